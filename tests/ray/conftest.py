"""One local Ray cluster for the whole test session (2 CPUs, no dashboard, quiet).

Engines started in this process see `ray.is_initialized()` and reuse it, killing only their
own actors at the end; a subprocess joins it with `--ray_address <gcs address>`.
"""

import os
import shutil
import tempfile
import time

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="session")
def ray_cluster():
    """The session's cluster; yields its GCS address."""
    ray = pytest.importorskip("ray")
    tmp = tempfile.mkdtemp(prefix="nrb_test_", dir="/tmp")  # short: Ray's unix sockets live here
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False, _temp_dir=tmp)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


def _alive_actors(timeout: float = 10.0) -> list:
    """Actors still ALIVE in the cluster after up to `timeout` s (kills are asynchronous)."""
    from ray._private import state

    deadline = time.time() + timeout
    while True:
        alive = [a for a in state.actors().values() if a["State"] not in ("DEAD",)]
        if not alive or time.time() > deadline:
            return alive
        time.sleep(0.2)


@pytest.fixture
def alive_actors(ray_cluster):
    """alive_actors() -> actors not DEAD after up to 10 s."""
    return _alive_actors
