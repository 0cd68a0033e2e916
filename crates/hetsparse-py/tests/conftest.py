"""Which devices the tests run on.

``HETSPARSE_PY_DEVICES`` (comma-separated ``device=`` values, e.g. ``cuda,opencl``) names them;
every one named must be present, or the tests that use it fail (they are never skipped).
Without it: ``cpu``, and ``opencl`` where the build has OpenCL and a platform is installed.
"""

import os

import pytest

import hetsparse


def _devices():
    named = os.environ.get("HETSPARSE_PY_DEVICES", "")
    if named.strip():
        return [d.strip() for d in named.split(",") if d.strip()]
    found = ["cpu"]
    if "opencl" in hetsparse.FEATURES:
        try:
            hetsparse.devices("opencl")
            found.append("opencl")
        except hetsparse.DeviceError:
            pass
    return found


DEVICES = _devices()


def pytest_report_header(config):
    return f"hetsparse devices under test: {', '.join(DEVICES)}; built with {', '.join(hetsparse.FEATURES)}"


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param
