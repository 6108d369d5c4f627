"""Stop signals in the Ray driver: SIGINT, SIGTERM, SIGHUP and SIGUSR1 become `EngineStopped`,
which `launch.run_engine` turns into a flushed, cleaned-up stop (exit 128 + signal number).

The driver spends most of its time blocked in `ray.wait` / `ray.get`, where Ray's C++ side
checks for signals and runs the Python handler; an exception raised by the handler there comes
back as a `SystemError` ("returned a result with an exception set") whose cause is the
EngineStopped. `stops_through_ray` around those calls gives the EngineStopped back.
"""
from __future__ import annotations

import signal
from contextlib import contextmanager


class EngineStopped(Exception):
    """A stop signal reached the driver: the run stops, cleans up and exits 128 + signum."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


@contextmanager
def stop_on_signals():
    """SIGINT, SIGTERM, SIGHUP and SIGUSR1 raise EngineStopped in the driver (main thread only), so
    the run cleans up instead of dying inside Ray with actors and daemons left behind."""
    def handler(signum, _frame):
        raise EngineStopped(signum)
    old = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
            old[sig] = signal.signal(sig, handler)
    except ValueError:                       # not the main thread: leave the handlers alone
        pass
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


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
