import os

import pytest
import warp as wp

wp.config.log_level = wp.LOG_WARNING
os.environ.setdefault("WARP_QUIET", "1")
# Under pytest-xdist (the README's test command runs the suite on every core) each worker process builds kernels
# into a cache of its own, as Warp advises for concurrent processes; the processes a test starts inherit it.
if os.environ.get("PYTEST_XDIST_WORKER"):
    _cache = os.environ.get("WARP_CACHE_PATH") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "warp", wp.config.version
    )
    os.environ["WARP_CACHE_PATH"] = os.path.join(_cache, f"xdist-{os.environ['PYTEST_XDIST_WORKER']}")


def _devices() -> list[str]:
    wp.init()
    return ["cpu"] + (["cuda:0"] if wp.is_cuda_available() else [])


@pytest.fixture(params=_devices())
def device(request) -> str:
    """Always ``cpu``; also ``cuda:0`` where a GPU is present."""
    return request.param
