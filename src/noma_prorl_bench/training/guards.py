"""Run guards: the NaN/Inf guard of the minibatch update and graceful SIGINT/SIGTERM.

NaN guard (`nan_guard`, called by Learner.minibatch_step after backward and gradient
clipping, before `optimizer.step()`): if the loss, the gradient norm (any non-finite gradient
makes it non-finite), the policy log-probs or the loss's KL term (both on response tokens)
is NaN or Inf, the gradients are dropped and neither the optimizer nor the LR scheduler
steps; a `nan_guard` event lists the offending quantities. `--on_nan skip` then goes on with
the next minibatch (each is checked); `--on_nan stop` raises `NonFiniteError`, which
`run.main` turns into exit code 3 after closing (flushing) the output files.

Test hook: the environment variable NOMA_PRORL_INJECT_NAN_STEP=k multiplies the loss of
every minibatch of step k by NaN (read on every call; unset in normal runs).

Sampling: non-finite logits before `torch.multinomial` (e.g. weights blown up by a huge --lr)
raise `NonFiniteLogits`, a NonFiniteError whatever --on_nan says (a policy that cannot sample
cannot go on): the run writes a `nan_guard` event and exits 3 without a checkpoint of that state.

Signals during the set-up (`stop_during_setup`, around the Trainer's construction: model
build, supervised warm start, the evaluation before RL): SIGINT/SIGTERM/SIGHUP/SIGUSR1 raise
`SetupStopped` at once; nothing is written yet, so the run exits 128 + signal number with
nothing to resume and nothing to clean up.

Signals (`GracefulStop`): the first SIGINT/SIGTERM/SIGHUP/SIGUSR1 sets a flag that the training loop reads
after each step (it then writes a checkpoint and exits 128 + signal number); a second one
aborts at once (KeyboardInterrupt). A step still running STOP_GRACE_S seconds after the first
signal is abandoned (`StepAbandoned` raised inside it by SIGALRM): its half-done update is never
saved, the last checkpoint stays the run's resume point. The environment variable
NOMA_PRORL_STOP_GRACE_S overrides the grace (tests).
"""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Callable, Optional

import torch

from noma_prorl_bench.io.run_procs import CaughtSignal
from noma_prorl_bench.rollout.nonfinite import NonFiniteError, NonFiniteLogits  # noqa: F401  (re-exported)

INJECT_NAN_ENV = "NOMA_PRORL_INJECT_NAN_STEP"
MAX_PARAM_NAMES = 8  # parameters with non-finite gradients named in the event


def inject_nan(loss: torch.Tensor, step: int) -> torch.Tensor:
    """Test hook: NaN loss at step NOMA_PRORL_INJECT_NAN_STEP (identity otherwise)."""
    target = os.environ.get(INJECT_NAN_ENV)
    if target and target.strip().isdigit() and int(target) == step:
        return loss * float("nan")
    return loss


def _describe(t: torch.Tensor, n: int) -> dict:
    """{"nonfinite": count, "numel": n} plus the value itself for a scalar (a string if non-finite)."""
    out: dict[str, int | float | str] = {"nonfinite": int((~torch.isfinite(t)).sum()), "numel": n}
    if t.numel() == 1:
        v = float(t)
        out["value"] = v if math.isfinite(v) else str(v)
    return out


def nonfinite_report(
    loss: torch.Tensor,
    grad_norm: torch.Tensor,
    logp: torch.Tensor,
    kl: torch.Tensor,
    mask: torch.Tensor,
    model: Optional[torch.nn.Module] = None,
) -> dict:
    """{} when loss, grad_norm, logp[n, T] and kl[n, T] (on tokens where mask[n, T] > 0) are all
    finite, else a description of each offending quantity (and the names of parameters whose
    gradient is non-finite). One host sync when everything is finite."""
    on = mask > 0  # [n, T] response tokens
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    gn = torch.as_tensor(grad_norm).detach().reshape(1).to(loss.device)
    quantities = {
        "loss": loss.detach().reshape(1),
        "grad_norm": gn,
        "logp": torch.where(on, logp.detach(), zero),
        "kl": torch.where(on, kl.detach(), zero),
    }
    if bool(torch.stack([torch.isfinite(q).all() for q in quantities.values()]).all()):
        return {}
    n_tok = int(on.sum())
    report = {
        k: _describe(q, 1 if q.numel() == 1 else n_tok)
        for k, q in quantities.items()
        if not bool(torch.isfinite(q).all())
    }
    if model is not None:
        names = [
            n for n, p in model.named_parameters() if p.grad is not None and not bool(torch.isfinite(p.grad).all())
        ]
        if names:
            report["grads"] = {"params": names[:MAX_PARAM_NAMES], "n_params": len(names)}
    return report


def nan_guard(
    policy, optimizer, on_nan: str, event: Callable[..., None], step: int, sl: slice, *, loss, grad_norm, logp, kl, mask
) -> bool:
    """True when this minibatch's update must be skipped (the optimizer's gradients already
    dropped); writes the `nan_guard` event through `event(name, reason, **values)`; raises
    NonFiniteError under --on_nan stop (`on_nan`)."""
    report = nonfinite_report(loss, grad_norm, logp, kl, mask, policy)
    if not report:
        return False
    optimizer.zero_grad(set_to_none=True)
    bad = [k for k in report if k != "grads"] + (["gradients"] if "grads" in report else [])
    event("nan_guard", f"non-finite {', '.join(bad)}", action=on_nan, rows=[sl.start, sl.stop], **report)
    if on_nan == "stop":
        raise NonFiniteError(step, bad)
    return True


# ============================================================================ signals
STOP_GRACE_S = 5.0  # a step may go on this long after a stop signal, then it is abandoned


class StepAbandoned(BaseException):
    """Raised inside a step that outlived the stop grace (a BaseException so that no `except
    Exception` in the step swallows it)."""


class SetupStopped(BaseException):
    """A stop signal during the run's set-up (model build, warm start, the evaluation before RL):
    nothing is written yet, so the set-up is dropped at once and the run exits 128 + signal number.
    A BaseException so that no `except Exception` in the set-up swallows it."""

    def __init__(self, signum: int):
        super().__init__(f"interrupted by {signal.Signals(signum).name} during the set-up")
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


@contextmanager
def stop_during_setup():
    """While the Trainer is built, SIGINT/SIGTERM/SIGHUP/SIGUSR1 raise SetupStopped (main thread
    only; elsewhere signals stay as they were)."""

    def handler(signum, _frame):
        raise SetupStopped(signum)

    old = {}
    if threading.current_thread() is threading.main_thread():
        for s in GracefulStop.SIGNALS:
            old[s] = signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class GracefulStop(CaughtSignal):
    """Context manager: SIGINT/SIGTERM/SIGHUP/SIGUSR1 request a stop after the current step (`.signum`;
    its `name` and `exit_code`: io/run_procs.CaughtSignal).

    Handlers are only installed from the main thread (elsewhere signals stay as they were).
    """

    def __init__(self, quiet: bool = False):
        self.signum: Optional[int] = None
        self.quiet = quiet
        self._old: dict = {}
        self._in_step = False

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt(f"second {signal.Signals(signum).name}: aborting without a checkpoint")
        self.signum = signum
        grace = float(os.environ.get("NOMA_PRORL_STOP_GRACE_S", STOP_GRACE_S))
        print(
            f"\nreceived {self.name}: finishing the current step (abandoned after {grace:g} s), then writing a "
            f"checkpoint (send it again to abort at once)",
            file=sys.stderr,
            flush=True,
        )
        if self._in_step and self._old:
            signal.setitimer(signal.ITIMER_REAL, max(grace, 1e-3))

    def _alarm(self, signum, frame) -> None:
        if self._in_step:
            raise StepAbandoned(self.name)

    @contextmanager
    def step(self):
        """Mark a training step: after a stop signal it has the grace period to finish."""
        self._in_step = True
        try:
            yield
        finally:
            self._in_step = False
            if self._old:
                signal.setitimer(signal.ITIMER_REAL, 0)

    def __enter__(self) -> "GracefulStop":
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._old[s] = signal.signal(s, self._handle)
            self._old[signal.SIGALRM] = signal.signal(signal.SIGALRM, self._alarm)
        return self

    def __exit__(self, *exc) -> None:
        if self._old:
            signal.setitimer(signal.ITIMER_REAL, 0)
        for s, old in self._old.items():
            signal.signal(s, old)
        self._old = {}
