"""Shared fixtures: the device the suite runs on, and the PoCL device for probe tests."""

from __future__ import annotations

import os

import pyopencl as cl
import pytest

from clpool import discovery


def _suite_device() -> cl.Device:
    """CLPOOL_TEST_DEVICE if set, else the first device that builds, PoCL first."""
    spec = os.environ.get("CLPOOL_TEST_DEVICE")
    if spec:
        return discovery.select(spec)
    found = sorted(discovery.cl_devices(), key=lambda d: "Portable" not in d.platform.name)
    for d in found:
        if discovery.can_build(d):
            return d
    pytest.exit("no OpenCL device here can build a kernel", returncode=3)


def pytest_configure(config: pytest.Config) -> None:
    device = _suite_device()
    index = discovery.cl_devices().index(device)
    os.environ["CLPOOL_DEVICE"] = str(index)
    config.stash[_DEVICE] = device


_DEVICE = pytest.StashKey[cl.Device]()


def pytest_report_header(config: pytest.Config) -> str:
    d = config.stash[_DEVICE]
    return f"clpool test device: {d.platform.name.strip()} | {d.name.strip()}"


@pytest.fixture(scope="session")
def device(pytestconfig: pytest.Config) -> cl.Device:
    """The OpenCL device every op in the suite runs on (CLPOOL_DEVICE points at it)."""
    return pytestconfig.stash[_DEVICE]


@pytest.fixture(scope="session")
def pocl_device() -> cl.Device:
    """The PoCL CPU device from pyopencl[pocl] (only listed and probed, never built on)."""
    for d in discovery.cl_devices():
        if "Portable Computing Language" in d.platform.name:
            return d
    pytest.skip("PoCL is not installed")
