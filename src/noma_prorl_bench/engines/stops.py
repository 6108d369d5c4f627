"""Stop signals in the Ray driver: SIGINT, SIGTERM, SIGHUP and SIGUSR1 become `EngineStopped`,
which `launch.run_engine` turns into a clean stop (exit 128 + signal number): during the set-up
(Ray start, actors, warm start) nothing is written, as in the local engine's set-up; later the
outputs are flushed and a `stopped` event written.

The handlers are installed before `ray.init` (`ray_starting`). While it runs, a signal is only
recorded and acted on when it returns (a few seconds): an exception raised inside it leaves Ray's
core worker half-built, and the process then crashed at exit (SIGSEGV, or SIGABRT after a C++
stack dump); a second signal raises at once. Ray is kept from installing its own SIGTERM handler
meanwhile (a `sys.exit` from inside Ray: exit 15 or 1, no message), and the handlers are put back
afterwards over the C++ SIGTERM handler of Ray's core worker. The driver spends most of its time
blocked in `ray.wait` / `ray.get`, where Ray's C++ side checks for signals and runs the Python
handler; an exception raised by the handler there comes back as a `SystemError` ("returned a
result with an exception set") whose cause is the EngineStopped. `stops_through_ray` around
those calls gives the EngineStopped back; and `StopSignals.signum` records the first signal, so
a stop whose exception was lost (raised where Python ignores exceptions) is still acted on.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager, nullcontext
from typing import Optional

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)


class EngineStopped(BaseException):
    """A stop signal reached the driver: the run stops, cleans up and exits 128 + signum. A
    BaseException, so that no `except Exception` (in Ray's start-up, say) swallows it."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


class StopSignals:
    """The driver's stop handlers: the first signal is kept in `signum`; it raises EngineStopped at
    once, except inside `held()`, where it is only recorded (the caller acts on it afterwards;
    `held(second_escapes=True)`: a second signal then raises at once)."""

    def __init__(self):
        self.signum: Optional[int] = None
        self._holding = 0
        self._escape_after: Optional[int] = None  # signals counted when an escapable hold began
        self._count = 0

    def handler(self, signum, _frame) -> None:
        self._count += 1
        if self.signum is None:
            self.signum = signum
        escape = self._escape_after is not None and self._count - self._escape_after >= 2
        if not self._holding or escape:
            raise EngineStopped(signum)

    def install(self) -> dict:
        """Put the handler on every stop signal (main thread only); returns the handlers it replaced.
        Again after `ray.init`: Ray's core worker puts a C++ failure handler on SIGTERM (a stack dump,
        then the process aborts), which Python's own handler must replace."""
        old = {}
        try:
            for sig in SIGNALS:
                old[sig] = signal.signal(sig, self.handler)
        except ValueError:  # not the main thread: leave the handlers alone
            pass
        return old

    def check(self) -> None:
        """Raise EngineStopped for a signal already received: the handler's own exception can be
        lost where Python ignores exceptions (a `__del__`, a logging lock's release)."""
        if self.signum is not None and not self._holding:
            raise EngineStopped(self.signum)

    @contextmanager
    def held(self, second_escapes: bool = False):
        """Signals only recorded meanwhile: for steps that must not stop half-way (taking the lock
        and opening the run's files; shutting Ray down after a stop; `ray.init`, whose core worker,
        left half-built by an exception, crashes the process at exit: SIGSEGV or SIGABRT seen).
        With `second_escapes`, a second signal raises at once (Ctrl-C twice: a `ray.init` that hangs)."""
        self._holding += 1
        outer = self._escape_after
        if second_escapes:
            self._escape_after = self._count
        try:
            yield
        finally:
            self._holding -= 1
            self._escape_after = outer


@contextmanager
def stop_on_signals():
    """SIGINT, SIGTERM, SIGHUP and SIGUSR1 raise EngineStopped in the driver (main thread only), so
    the run cleans up instead of dying inside Ray with actors and daemons left behind. Yields the
    StopSignals (its `signum`: the first signal received, None before)."""
    stops = StopSignals()
    old = stops.install()
    try:
        yield stops
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


@contextmanager
def ray_keeps_our_handlers():
    """While `ray.init` runs: its SIGTERM handlers (`sys.exit(15)`, or the head node's kill of its
    processes then `sys.exit(1)`), installed through `ray._private.utils.set_sigterm_handler`, are
    not installed, so a SIGTERM during the start reaches the driver's handler like any other stop
    (the driver then shuts Ray down itself; a private cluster's reaper sweeps what is left)."""
    try:
        from ray._private import utils  # noqa: PLC0415
    except ImportError:
        yield
        return
    original = getattr(utils, "set_sigterm_handler", None)
    if original is None:
        yield
        return
    utils.set_sigterm_handler = lambda _handler: None
    try:
        yield
    finally:
        utils.set_sigterm_handler = original


@contextmanager
def ray_starting(stops: Optional[StopSignals]):
    """Around `ray.init`: Ray kept from installing its SIGTERM handler, stop signals only recorded
    (a second one raises at once); then the handlers put back over the C++ SIGTERM handler of Ray's
    core worker (a stack dump, then an abort) and a stop recorded meanwhile raised."""
    with ray_keeps_our_handlers(), stops_through_ray(), stops.held(True) if stops else nullcontext():
        yield
    if stops is not None:
        stops.install()
        stops.check()


@contextmanager
def stops_through_ray():
    """Around a blocking Ray call: the EngineStopped that Ray wrapped in a SystemError, unwrapped."""
    try:
        yield
    except SystemError as e:
        stop = e.__cause__ or e.__context__
        if isinstance(stop, EngineStopped):
            raise stop from None
        raise
