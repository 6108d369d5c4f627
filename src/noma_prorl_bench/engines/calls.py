"""Actor calls with deadlines, shared by the Ray engines' driver: each call is awaited with a
deadline of `--actor_timeout` seconds from its submission (start-up calls, which build models and
run the warm start: at least SETUP_TIMEOUT_S); a dead actor (`RayActorError`), a hung one
(deadline passed) or an exception inside one (`RayTaskError`) becomes an `EngineError` naming the
actor and the call (and carrying the actor's exception). Waits run in slices of WAIT_SLICE_S so
that a stop signal is acted on meanwhile (stops.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional

from noma_prorl_bench.engines.stops import stops_through_ray

SETUP_TIMEOUT_S = 300.0  # actor start-up (process, model build, warm start) may take this long
#: longest single ray.wait: Python runs a stop signal's handler only between calls, and a wait
#: blocked in Ray's C++ side for the whole start-up timeout could leave SIGHUP unanswered for minutes
WAIT_SLICE_S = 0.5


class EngineError(RuntimeError):
    """A Ray engine failure (an actor died, hung past --actor_timeout, or raised).
    `cause_name`: the class name of the exception raised inside an actor, if any; `cause`: that
    exception itself when Ray could bring it back (e.g. NonFiniteLogits with its step and rows)."""

    def __init__(
        self,
        message: str,
        cause_name: str = "",
        waited_s: Optional[float] = None,
        cause: Optional[BaseException] = None,
    ):
        super().__init__(message)
        self.cause_name, self.waited_s, self.cause = cause_name, waited_s, cause


@dataclass
class Call:
    """One outstanding actor call: what it is (for messages), its deadline, how to handle it."""

    what: str
    deadline: float
    kind: str = ""
    data: Any = None
    setup: bool = False
    submitted: float = 0.0

    def waited(self) -> float:
        return time.time() - self.submitted


class Deadlines:
    """The driver's calls with deadlines (mixed into `driver.RayEngine`): needs `self.cfg`
    (`actor_timeout`) and `self.stops` (stops.StopSignals, or None)."""

    cfg: Any
    stops: Any

    def call(self, what: str, kind: str = "", data: Any = None, setup: bool = False) -> Call:
        """A deadline of --actor_timeout from now (start-up calls: at least SETUP_TIMEOUT_S)."""
        timeout = max(self.cfg.actor_timeout, SETUP_TIMEOUT_S) if setup else self.cfg.actor_timeout
        now = time.time()
        return Call(what, now + timeout, kind, data, setup, now)

    def wait_any(self, pending: dict):
        """(ref, Call, value) of the first pending call to finish; EngineError on death or timeout."""
        import ray  # noqa: PLC0415

        while True:
            if self.stops is not None:
                self.stops.check()
            first = min(c.deadline for c in pending.values())
            with stops_through_ray():  # in slices, so a stop signal is acted on within WAIT_SLICE_S
                ready, _ = ray.wait(
                    list(pending), num_returns=1, timeout=min(WAIT_SLICE_S, max(0.0, first - time.time()))
                )
            if ready:
                ref = ready[0]
                call = pending.pop(ref)
                return ref, call, self.fetch(ref, call)
            late = [c for c in pending.values() if c.deadline <= time.time()]
            if late:
                raise EngineError(
                    f"{late[0].what} did not answer within "
                    f"{self.timeout_text(late[0])} (the actor hangs or is too slow)",
                    waited_s=late[0].waited(),
                )

    def get(self, ref, what: str, setup: bool = False):
        return self.wait_any({ref: self.call(what, setup=setup)})[2]

    def timeout_text(self, call: Call) -> str:
        return (
            f"the start-up timeout of {max(self.cfg.actor_timeout, SETUP_TIMEOUT_S):g} s"
            if call.setup
            else f"--actor_timeout {self.cfg.actor_timeout:g} s"
        )

    def fetch(self, ref, call: Call):
        import ray  # noqa: PLC0415
        from ray import exceptions as rex  # noqa: PLC0415

        try:
            with stops_through_ray():
                return ray.get(ref, timeout=max(1.0, call.deadline - time.time()))
        except (rex.RayActorError, rex.WorkerCrashedError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise EngineError(
                f"{call.what}: the actor died ({type(e).__name__}: {first[:300]})", waited_s=call.waited()
            ) from None
        except rex.GetTimeoutError:
            raise EngineError(
                f"{call.what} did not answer within {self.timeout_text(call)}", waited_s=call.waited()
            ) from None
        except rex.RayTaskError as e:
            text = str(e).strip()
            name = next(
                (ln.split(":")[0].split(".")[-1] for ln in reversed(text.splitlines()) if "Error" in ln.split(":")[0]),
                type(e.cause).__name__ if e.cause else "an error",
            )
            raise EngineError(
                f"{call.what} raised {name}:\n{text}", cause_name=name, waited_s=call.waited(), cause=e.cause
            ) from None
        except rex.RayError as e:
            raise EngineError(
                f"{call.what}: {type(e).__name__}: {str(e).strip()[:500]}", waited_s=call.waited()
            ) from None
