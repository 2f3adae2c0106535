import os

import pytest
import warp as wp

wp.config.log_level = wp.LOG_WARNING
os.environ.setdefault("WARP_QUIET", "1")


def _devices() -> list[str]:
    wp.init()
    return ["cpu"] + (["cuda:0"] if wp.is_cuda_available() else [])


@pytest.fixture(params=_devices())
def device(request) -> str:
    """Always ``cpu``; also ``cuda:0`` where a GPU is present."""
    return request.param
