"""Shared fixtures: the device the suite runs on, the PoCL device for probe tests, the two
kernel build variants the random sweeps run, a queue of the test's own, and records of what
clpool launches, builds and plans."""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pyopencl as cl
import pyopencl._cl as _cl
import pytest

from clpool import discovery, launch, plans, policy, programs, verify
from clpool.errors import Problem


def _suite_device() -> cl.Device:
    """The device clpool itself chooses: CLPOOL_DEVICE's if set, else its default (the
    first verified GPU, else the first verified CPU)."""
    try:
        return discovery.select()
    except Problem as p:
        pytest.exit(f"no device to test on: {p.reason}", returncode=3)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Keep each phase's report on its test (rep_setup, rep_call), for fixtures that check
    what a test launched only when it ran."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


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
    """The first PoCL CPU device that clpool has not refused."""
    for i, d in enumerate(discovery.cl_devices()):
        if "Portable Computing Language" in d.platform.name:
            if verify.verify(d, i).status != verify.VERIFIED:
                pytest.skip(f"clpool refuses PoCL here: {verify.cached(d).reason}")
            return d
    pytest.skip("PoCL is not installed")


@pytest.fixture(autouse=True)
def fresh_policy():
    """Each test reads the CLPOOL_ tuning variables afresh (at its first op call); a test
    that changes them mid-way calls policy.set_policy(None)."""
    policy.set_policy(None)
    yield
    policy.set_policy(None)


@pytest.fixture(params=["specialised", "generic"])
def variant(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Run with small windows built as constants (clpool's default) and work-items of one
    row and two columns (as on a GPU), and without constants (CLPOOL_SPECIALIZE=0) and
    work-items of 3 x 3 (CLPOOL_ROWS, CLPOOL_COLS); gives a seed offset so the two see
    different cases. The other tests run the device's own tiles."""
    specialised = request.param == "specialised"
    monkeypatch.setenv("CLPOOL_SPECIALIZE", "1" if specialised else "0")
    monkeypatch.setenv("CLPOOL_ROWS", "1" if specialised else "3")
    monkeypatch.setenv("CLPOOL_COLS", "2" if specialised else "3")
    return 0 if specialised else 50


@pytest.fixture
def queue(device: cl.Device) -> Iterator[cl.CommandQueue]:
    """A context and queue of the test's own, not clpool's. The context is held here: Intel's
    CPU runtime invalidates a queue whose context object was released."""
    context = cl.Context([device])
    yield cl.CommandQueue(context)
    del context


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The label of every plan made during the test."""
    record: list[str] = []
    keep = plans.keep

    def spy(key, plan):
        record.append(key[0])
        return keep(key, plan)

    monkeypatch.setattr(plans, "keep", spy)
    return record


def _step_sizes(monkeypatch: pytest.MonkeyPatch, field: str) -> list:
    """`field` of every step of every plan clpool runs during the test, in order."""
    record: list = []
    run = launch.run

    def spy(plan, arrays, out=None):
        record.extend(getattr(step, field) for step in plan.steps)
        return run(plan, arrays, out)

    monkeypatch.setattr(launch, "run", spy)
    return record


@pytest.fixture
def launch_sizes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The global size of every step of every plan clpool runs during the test, in order."""
    return _step_sizes(monkeypatch, "global_size")


@pytest.fixture
def local_sizes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...] | None]:
    """The local size of every step of every plan clpool runs during the test, in order."""
    return _step_sizes(monkeypatch, "local_size")


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, np.dtype]]:
    """(kernel name, dtype) of every kernel clpool launches during the test, in order."""
    record: list[tuple[str, np.dtype]] = []
    run = launch.run

    def spy(plan, arrays, out=None):
        steps = [c for c in plan.copies if c is not None] + list(plan.steps)
        record.extend((step.name, plan.dtype) for step in steps)
        return run(plan, arrays, out)

    monkeypatch.setattr(launch, "run", spy)
    return record


@pytest.fixture
def build_options(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """The build options of every program clpool asks for during the test."""
    record: list[tuple[str, ...]] = []
    kernels = programs.kernels

    def spy(context, name, options):
        record.append(options)
        return kernels(context, name, options)

    monkeypatch.setattr(programs, "kernels", spy)
    return record


@pytest.fixture(params=["tiled", "plane"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, launched):
    """Run the windowed ops and the adaptive backward through the kernels of one work-item
    per output or gradient element (or tile of them: GPU) and through those of one
    work-item per plane (CPU, float32 and float64), and check that the chosen ones
    launched."""
    plane = request.param == "plane"
    with policy.use(per_plane=plane):
        yield request.param
    ran = getattr(request.node, "rep_call", None)
    if ran is None or ran.skipped:
        return  # the test did not run (the device lacks its dtype)
    windowed = [
        (n, t)
        for n, t in launched
        if n.startswith(("max_pool2d_", "avg_pool2d_", "adaptive_avg_pool2d_backward"))
    ]
    assert windowed
    for name, dtype in windowed:
        # 16-bit backward kernels per plane would round at each addition: bfloat16 and
        # float16 backward always run tiled, float16 forward too
        tiled = dtype == np.float16 or (dtype.itemsize == 2 and "backward" in name)
        assert name.endswith("_plane") == (plane and not tiled), name


@pytest.fixture
def torch_one_thread():
    """torch on one thread: its CPU max_unpool splits a plane's inputs between threads, so
    which of two inputs naming one output wins depends on the thread count (one thread:
    the later, as SPEC says)."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of every kernel enqueued through PyOpenCL during the test (clpool's or
    PyOpenCL's own: pyopencl._cl.enqueue_nd_range_kernel under either name)."""
    names: list[str] = []
    enqueue = _cl.enqueue_nd_range_kernel

    def recording(queue, kernel, *args, **kwargs):
        names.append(kernel.function_name)
        return enqueue(queue, kernel, *args, **kwargs)

    monkeypatch.setattr(_cl, "enqueue_nd_range_kernel", recording)
    monkeypatch.setattr(cl, "enqueue_nd_range_kernel", recording)
    return names
