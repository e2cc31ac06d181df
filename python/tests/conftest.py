"""Shared fixtures: the build's tools, run as the package's peers.

tests/test-python.sh sets DLTRAIN, DLINFO and PYTHON_ABI to the build's
programs (and DLRT_LIBRARY to its libdlrt.so); run by hand, give them too:
    DLRT_LIBRARY=_build/.libs/libdlrt.so DLTRAIN=_build/tools/dltrain \\
    DLINFO=_build/tools/dlinfo PYTHON_ABI=_build/tests/python-abi pytest python/tests
"""

import gc
import json
import os
import subprocess

import pytest


def _tool(var):
    path = os.environ.get(var)
    if not path or not os.access(path, os.X_OK):
        pytest.skip("$%s (a build's program) is not set: tests/test-python.sh sets it" % var)
    return path


def run_json(argv, timeout=600):
    """Runs a tool, returns the JSON object of its stdout (dlinfo's, over
    several lines) or of its last line (dltrain's, after its report)."""
    env = dict(os.environ)
    for var in ("DLRT_DEVICE", "DLRT_BACKEND", "DLRT_MEM_LIMIT"):
        env.pop(var, None)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    assert out.returncode == 0, "%s exited %d: %s" % (argv[0], out.returncode, out.stderr[-2000:])
    try:
        return json.loads(out.stdout)
    except ValueError:
        return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def dltrain():
    path = _tool("DLTRAIN")
    return lambda *args: run_json([path, *args])


@pytest.fixture
def dlinfo():
    path = _tool("DLINFO")
    return lambda *args: run_json([path, *args])


@pytest.fixture
def python_abi():
    return run_json([_tool("PYTHON_ABI")])


@pytest.fixture
def cpu():
    import dlrt
    return dlrt.device("cpu")


def live_allocations(dev):
    """Buffers alive on dev's allocator, after collecting what Python holds."""
    gc.collect()
    return dev.memory_stats()["allocation.all.current"]
