"""Stop signals in the Ray driver: SIGINT, SIGTERM, SIGHUP and SIGUSR1 become `EngineStopped`,
which `launch.run_engine` turns into a clean stop (exit 128 + signal number): during the set-up
(Ray start, actors, warm start) nothing is written, as in the local engine's set-up; later the
outputs are flushed and a `stopped` event written.

The handlers are installed before `ray.init`, which would otherwise put its own SIGTERM handler in
place (a `sys.exit` from deep inside Ray): `ray_keeps_our_handlers` stops it from doing so while
it starts. The driver spends most of its time blocked in `ray.wait` / `ray.get`, where Ray's C++
side checks for signals and runs the Python handler; an exception raised by the handler there
comes back as a `SystemError` ("returned a result with an exception set") whose cause is the
EngineStopped. `stops_through_ray` around those calls gives the EngineStopped back; and
`StopSignals.signum` records the first signal, so whatever Ray makes of the handler's exception,
the driver knows that a stop was asked for.
"""
from __future__ import annotations

import signal
from contextlib import contextmanager
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
    once, except inside `held()`, where it is only recorded (the caller acts on it afterwards)."""

    def __init__(self):
        self.signum: Optional[int] = None
        self._holding = 0

    def handler(self, signum, _frame) -> None:
        if self.signum is None:
            self.signum = signum
        if not self._holding:
            raise EngineStopped(signum)

    @contextmanager
    def held(self):
        """Signals only recorded meanwhile: for steps that must not stop half-way (taking the lock
        and opening the run's files; shutting Ray down after a stop)."""
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1


@contextmanager
def stop_on_signals():
    """SIGINT, SIGTERM, SIGHUP and SIGUSR1 raise EngineStopped in the driver (main thread only), so
    the run cleans up instead of dying inside Ray with actors and daemons left behind. Yields the
    StopSignals (its `signum`: the first signal received, None before)."""
    stops = StopSignals()
    old = {}
    try:
        for sig in SIGNALS:
            old[sig] = signal.signal(sig, stops.handler)
    except ValueError:                       # not the main thread: leave the handlers alone
        pass
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
    (the driver shuts the half-started Ray down itself; its reaper sweeps what is left)."""
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
def stops_through_ray():
    """Around a blocking Ray call: the EngineStopped that Ray wrapped in a SystemError, unwrapped."""
    try:
        yield
    except SystemError as e:
        stop = e.__cause__ or e.__context__
        if isinstance(stop, EngineStopped):
            raise stop from None
        raise
