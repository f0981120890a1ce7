"""Reliability: property tests against the float64 reference, threads, memory, faults,
and inputs that are never modified. See RELIABILITY.md."""

from __future__ import annotations

import os
import threading

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pool_cases import in_threads

import clpool
from clpool import check, discovery, launch, plans, policy, programs
from clpool import reference as ref
from clpool.errors import KernelError, PoolArgumentError, PoolError, UnsupportedDtypeError

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - torch is optional
    torch = None

DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# Derandomized so that CI is repeatable; CLPOOL_HYPOTHESIS_EXPLORE=1 draws new examples.
PROPERTY = settings(max_examples=int(os.environ.get("CLPOOL_HYPOTHESIS_EXAMPLES", "300")),
                    deadline=None, database=None,
                    derandomize=not os.environ.get("CLPOOL_HYPOTHESIS_EXPLORE"),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture
def forgetting():
    """Programs and plans made before and during the test are dropped around it."""
    programs.forget()
    plans.forget()
    yield
    programs.forget()
    plans.forget()


def device_name(device: cl.Device) -> str:
    return device.name.strip()


# ------------------------------------------------------------------ strategies and oracle


def _pair(draw, values: st.SearchStrategy) -> object:
    a, b = draw(values), draw(values)
    form = draw(st.sampled_from(["int", "tuple", "list"]))
    if form == "int" or a == b and form != "list":
        return a if form == "int" else (a, a)
    return [a, b] if form == "list" else (a, b)


def _as_pair(v) -> tuple[int, int]:
    return tuple(v) * (2 // len(v)) if isinstance(v, (tuple, list)) else (v, v)


# One example in four may break any rule; the others keep rank and sizes plausible (they
# can still break the padding or output-size rules).
ANY = st.sampled_from([False, False, False, True])


@st.composite
def shapes(draw, any_: bool) -> tuple[int, ...]:
    rank = draw(st.sampled_from([4, 4, 4, 3, 3, 2, 5] if any_ else [4, 4, 3]))
    low = 0 if any_ else 1
    dims = [draw(st.integers(0, 2)), draw(st.integers(1, 3)),
            draw(st.integers(low, 8)), draw(st.integers(low, 8))]
    if rank == 3:
        return tuple(dims[1:])
    if rank == 2:
        return tuple(dims[2:])
    if rank == 5:
        return (1, *dims)
    return tuple(dims)


@st.composite
def data(draw, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    seed = draw(st.integers(0, 2**32 - 1))
    kind = draw(st.sampled_from(["normal", "normal", "ties", "nan"]))
    rng = np.random.default_rng(seed)
    if kind == "ties":
        return rng.integers(-2, 3, size=shape).astype(dtype)
    x = rng.standard_normal(shape).astype(dtype)
    if kind == "nan" and x.size:
        x.reshape(-1)[rng.integers(0, x.size, size=max(1, x.size // 10))] = np.nan
    return x


@st.composite
def windows(draw, family: str, any_: bool) -> dict:
    low = -1 if any_ else 1
    args = {
        "kernel_size": _pair(draw, st.integers(low, 4)),
        "stride": draw(st.sampled_from([None, ()])) if draw(st.booleans()) else _pair(
            draw, st.integers(low + 1 if any_ else 1, 4)),
        "padding": _pair(draw, st.integers(-1 if any_ else 0, 3 if any_ else 2)),
        "ceil_mode": draw(st.booleans()),
    }
    if family == "max":
        args["dilation"] = _pair(draw, st.integers(0 if any_ else 1, 3))
    else:
        args["count_include_pad"] = draw(st.booleans())
        divisors = st.integers(-3, 5) if any_ else st.sampled_from([-2, 1, 3, 5])
        args["divisor_override"] = draw(st.one_of(st.none(), st.none(), divisors))
    return args


def window_problem(shape: tuple[int, ...], args: dict, family: str) -> str | None:
    """Why the contract (SPEC.md) rejects this call, or None; written from the contract,
    independently of clpool.shapes."""
    if len(shape) not in (3, 4):
        return "rank"
    if min(shape[-3:]) == 0:
        return "empty non-batch dimension"
    k = _as_pair(args["kernel_size"])
    s = k if args["stride"] in (None, ()) else _as_pair(args["stride"])
    p = _as_pair(args["padding"])
    d = _as_pair(args.get("dilation", 1))
    if min(k) <= 0 or min(s) <= 0 or min(d) <= 0 or min(p) < 0:
        return "non-positive size"
    for a in range(2):
        limit = ((k[a] - 1) * d[a] + 1) // 2 if family == "max" else k[a] // 2
        if p[a] > limit:
            return "padding"
    for a in range(2):
        if ref.pooled_size(shape[-2 + a], k[a], s[a], p[a], d[a], args["ceil_mode"]) < 1:
            return "output too small"
    if args.get("divisor_override") == 0:
        return "divisor 0"
    return None


def torch_rejects(fn, *args, **kwargs) -> bool:
    try:
        fn(*args, **kwargs)
    except (RuntimeError, ValueError, TypeError, IndexError):
        return True
    return False


def assert_close(got, want, dtype: np.dtype, exact: bool = False) -> None:
    got = got.get() if isinstance(got, cla.Array) else got
    want = np.asarray(want)
    assert got.shape == want.shape
    if want.dtype.kind == "i":
        np.testing.assert_array_equal(got.astype(np.int64), want)
        return
    assert got.dtype == dtype
    if exact:
        np.testing.assert_array_equal(got, want.astype(dtype))
        return
    assert check.error(got, want) <= check.TOLERANCE[dtype.name]


def assert_argument_error(excinfo, label: str, device: cl.Device, dtype: np.dtype) -> None:
    e = excinfo.value
    assert isinstance(e, PoolArgumentError) and isinstance(e, ValueError)
    assert (e.label, e.device, e.dtype) == (label, device_name(device), dtype.name), str(e)
    assert str(e).startswith(f"{label} kernel failed (device={e.device}, dtype={e.dtype}): ")


# ------------------------------------------------------------------ properties


def _window_case(draw, family: str) -> tuple:
    """A drawn case of `family` ("max" or "avg"): dtype, input shape, window arguments by
    name, input, and the problem window_problem finds in them (None: valid)."""
    dtype = draw(st.sampled_from(DTYPES))
    any_ = draw(ANY)
    shape = draw(shapes(any_))
    args = draw(windows(family, any_))
    x = draw(data(shape, dtype))
    problem = window_problem(shape, args, family)
    event(f"{family}: {problem or 'valid'}")
    return dtype, shape, args, x, problem


@PROPERTY
@given(st.data())
def test_max_pool_matches_reference_or_rejects(device, data_) -> None:
    draw = data_.draw
    dtype, shape, args, x, problem = _window_case(draw, "max")
    index_dtype = draw(st.sampled_from(["int64", "int32"]))
    pos = (args["kernel_size"], args["stride"], args["padding"], args["dilation"],
           args["ceil_mode"])
    if torch is not None and len(shape) in (3, 4):
        rejected = torch_rejects(F.max_pool2d, torch.from_numpy(x), *pos)
        torch_padding = any(pp > kk // 2 for pp, kk in zip(_as_pair(args["padding"]),
                                                            _as_pair(args["kernel_size"]),
                                                            strict=True))
        if problem or not torch_padding:  # torch 2.x also caps padding at k/2 for max
            assert rejected == bool(problem), (problem, shape, args)
    if problem:
        for label, call in [("max_pool2d", lambda: clpool.max_pool2d(x, *pos)),
                            ("max_pool2d_with_indices", lambda: clpool.max_pool2d_with_indices(
                                x, *pos, index_dtype=index_dtype))]:
            with pytest.raises(PoolError) as excinfo:
                call()
            assert_argument_error(excinfo, label, device, dtype)
        return
    want, want_idx = ref.max_pool2d_with_indices(x, *pos)
    assert_close(clpool.max_pool2d(x, *pos), want, dtype, exact=True)
    out, idx = clpool.max_pool2d_with_indices(x, *pos, index_dtype=index_dtype)
    assert idx.dtype == np.dtype(index_dtype)
    assert_close(out, want, dtype, exact=True)
    assert_close(idx, want_idx, dtype)
    grad = draw(data(want.shape, dtype))
    if idx.size and draw(st.booleans()):  # indices that name no element are ignored
        flat = idx.reshape(-1)
        plane = shape[-1] * shape[-2]
        for v in draw(st.lists(st.sampled_from([-1, plane, plane + 5, -plane - 1,
                                                np.iinfo(idx.dtype).max]), max_size=3)):
            flat[draw(st.integers(0, flat.size - 1))] = v
    assert_close(clpool.max_pool2d_with_indices_backward(grad, x, *pos, indices=idx),
                 ref.max_pool2d_with_indices_backward(grad, x, idx, *pos), dtype)


@PROPERTY
@given(st.data())
def test_avg_pool_matches_reference_or_rejects(device, data_) -> None:
    draw = data_.draw
    dtype, shape, args, x, problem = _window_case(draw, "avg")
    pos = (args["kernel_size"], args["stride"], args["padding"], args["ceil_mode"],
           args["count_include_pad"], args["divisor_override"])
    if torch is not None and len(shape) in (3, 4):
        rejected = torch_rejects(F.avg_pool2d, torch.from_numpy(x), *pos)
        assert rejected == bool(problem), (problem, shape, args)
    if problem:
        with pytest.raises(PoolError) as excinfo:
            clpool.avg_pool2d(x, *pos)
        assert_argument_error(excinfo, "avg_pool2d", device, dtype)
        if len(shape) in (3, 4) and min(shape[-3:]) > 0:
            grad = np.zeros(shape[:-2] + (1, 1), dtype)
            with pytest.raises(PoolError) as excinfo:
                clpool.avg_pool2d_backward(grad, x, *pos)
            assert_argument_error(excinfo, "avg_pool2d_backward", device, dtype)
        return
    want = ref.avg_pool2d(x, *pos)
    assert_close(clpool.avg_pool2d(x, *pos), want, dtype)
    grad = draw(data(want.shape, dtype))
    assert_close(clpool.avg_pool2d_backward(grad, x, *pos),
                 ref.avg_pool2d_backward(grad, x, *pos), dtype)


@PROPERTY
@given(st.data())
def test_adaptive_pool_matches_reference_or_rejects(device, data_) -> None:
    draw = data_.draw
    dtype = draw(st.sampled_from(DTYPES))
    any_ = draw(ANY)
    shape = draw(shapes(any_))
    sizes = st.integers(-1 if any_ else 0, 6)
    size = draw(st.one_of(sizes, st.tuples(st.one_of(st.none(), sizes),
                                           st.one_of(st.none(), sizes))))
    x = draw(data(shape, dtype))
    wanted = [v for v in (size if isinstance(size, tuple) else (size,)) if v is not None]
    problem = len(shape) not in (3, 4) or min(shape[-3:]) == 0 or min(wanted, default=0) < 0
    event(f"adaptive: {'invalid' if problem else 'valid'}")
    if torch is not None and len(shape) in (3, 4) and min(shape[-3:]) > 0:
        assert torch_rejects(F.adaptive_avg_pool2d, torch.from_numpy(x), size) == problem
    if problem:
        with pytest.raises(PoolError) as excinfo:
            clpool.adaptive_avg_pool2d(x, size)
        assert_argument_error(excinfo, "adaptive_avg_pool2d", device, dtype)
        return
    want = ref.adaptive_avg_pool2d(x, size)
    assert_close(clpool.adaptive_avg_pool2d(x, size), want, dtype)
    grad = draw(data(want.shape, dtype))
    want_grad = ref.adaptive_avg_pool2d_backward(grad, x)
    assert_close(clpool.adaptive_avg_pool2d_backward(grad, x), want_grad, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_bad_gradients_and_indices_are_argument_errors(device, dtype) -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 6, 5)).astype(dtype)
    out, idx = clpool.max_pool2d_with_indices(x, 2)
    good = np.ones(out.shape, dtype)
    calls = {
        "max_pool2d_with_indices_backward": [
            lambda: clpool.max_pool2d_with_indices_backward(good[:, :, :1], x, 2, indices=idx),
            lambda: clpool.max_pool2d_with_indices_backward(good, x, 2, indices=idx[:, :1]),
            lambda: clpool.max_pool2d_with_indices_backward(good, x, 2, indices=idx.astype(dtype)),
            lambda: clpool.max_pool2d_with_indices_backward(good[0], x, 2, indices=idx),
            lambda: clpool.max_pool2d_with_indices_backward(good, x, 2, 1, indices=idx),
        ],
        "avg_pool2d_backward": [
            lambda: clpool.avg_pool2d_backward(good[..., :1], x, 2),
            lambda: clpool.avg_pool2d_backward(good.reshape(-1), x, 2),
        ],
        "adaptive_avg_pool2d_backward": [
            lambda: clpool.adaptive_avg_pool2d_backward(good[:1], x),
            lambda: clpool.adaptive_avg_pool2d_backward(good[0], x),
        ],
        "max_pool2d_with_indices": [
            lambda: clpool.max_pool2d_with_indices(x, 2, index_dtype="int16"),
            lambda: clpool.max_pool2d_with_indices(x, 2, index_dtype="float32"),
        ],
    }
    for label, group in calls.items():
        for call in group:
            with pytest.raises(PoolError) as excinfo:
                call()
            assert_argument_error(excinfo, label, device, dtype)


# ------------------------------------------------------------------ every op, fixed inputs


def all_ops(x, queue=None) -> dict[str, object]:
    """Every op once on x (numpy or device array); results as numpy arrays."""
    def host(a):
        return a.get() if isinstance(a, cla.Array) else a

    out, idx = clpool.max_pool2d_with_indices(x, 3, 2, 1, ceil_mode=True)
    idx32 = clpool.max_pool2d_with_indices(x, 3, 2, 1, ceil_mode=True, index_dtype="int32")[1]
    avg = clpool.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)
    ada = clpool.adaptive_avg_pool2d(x, (3, 2))
    return {
        "max_pool2d": host(clpool.max_pool2d(x, 2, 1, 1, dilation=2)),
        "max_pool2d_with_indices": (host(out), host(idx), host(idx32)),
        "max_pool2d_with_indices_backward": (
            host(clpool.max_pool2d_with_indices_backward(out, x, 3, 2, 1, ceil_mode=True,
                                                         indices=idx)),
            host(clpool.max_pool2d_with_indices_backward(out, x, 3, 2, 1, ceil_mode=True,
                                                         indices=idx32))),
        "avg_pool2d": host(avg),
        "avg_pool2d_backward": host(clpool.avg_pool2d_backward(
            avg, x, 3, 2, 1, ceil_mode=True, count_include_pad=False)),
        "adaptive_avg_pool2d": (host(ada), host(clpool.adaptive_avg_pool2d(x, 1))),
        "adaptive_avg_pool2d_backward": host(clpool.adaptive_avg_pool2d_backward(ada, x)),
    }


def assert_same(a, b) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, tuple):
        for u, v in zip(a, b, strict=True):
            assert_same(u, v)
    else:
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()  # bit-identical: deterministic kernels


def test_threads_give_single_thread_results_and_build_once(device, monkeypatch,
                                                            forgetting) -> None:
    monkeypatch.setattr(programs, "builds", 0)
    queue = discovery.runtime(device).queue
    rng = np.random.default_rng(7)
    inputs = []
    for dtype in DTYPES:
        x = rng.standard_normal((2, 3, 9, 7)).astype(dtype)
        inputs += [x, cla.to_device(queue, x), cla.to_device(queue, x)[:, :, 1:, ::2]]
    barrier = threading.Barrier(8)
    results: dict[int, list] = {}

    def worker(i: int) -> None:
        barrier.wait()  # all threads start cold, at once: the builds race
        results[i] = [[all_ops(x) for x in inputs] for _ in range(3)]

    in_threads(worker, timeout=120)
    assert len(results) == 8
    # each (context, source, options) was built once, although 8 threads asked at once
    built = programs.builds
    assert built == sum(len(held) for held in programs._programs.values()) >= 6
    single = [all_ops(x) for x in inputs]
    for per_thread in results.values():
        for rounds in per_thread:
            for got, want in zip(rounds, single, strict=True):
                assert_same(got, want)
    assert programs.builds == built


# ------------------------------------------------------------------ memory


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_many_calls_do_not_grow_memory(device, monkeypatch) -> None:
    live = [0]

    class CountedBuffer(cl.Buffer):  # pyopencl.array allocates through pyopencl.Buffer
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            live[0] += 1

        def __del__(self):
            live[0] -= 1

    monkeypatch.setattr(cl, "Buffer", CountedBuffer)
    queue = discovery.runtime(device).queue
    x = np.random.default_rng(3).standard_normal((1, 2, 5, 4)).astype(np.float32)
    xd = cla.to_device(queue, x)
    strided = cla.to_device(queue, np.repeat(x, 2, axis=-1))[..., ::2]
    g_max = np.ones((1, 2, 3, 3), np.float32)
    idx = clpool.max_pool2d_with_indices(x, 2, 2, 1)[1]
    g_ada = np.ones((1, 2, 2, 2), np.float32)
    calls = [
        lambda: clpool.max_pool2d(x, 2, 2, 1),
        lambda: clpool.max_pool2d_with_indices(xd, 2, 2, 1, index_dtype="int32"),
        lambda: clpool.max_pool2d_with_indices_backward(g_max, x, 2, 2, 1, indices=idx),
        lambda: clpool.avg_pool2d(strided, 2, 2, 1),
        lambda: clpool.avg_pool2d_backward(g_max, x, 2, 2, 1),
        lambda: clpool.adaptive_avg_pool2d(x, 1),
        lambda: clpool.adaptive_avg_pool2d_backward(g_ada, x),
    ]

    def run(n: int) -> None:
        for i in range(n):
            calls[i % len(calls)]()
        queue.finish()

    run(1400)  # warm-up: builds, kernel objects, allocator pools, numpy caches
    pool = launch.memory_pool(queue)  # clpool's outputs and uploads come from it
    base_buffers, base_rss = live[0], _rss_kib()
    base_pool = (pool.active_blocks, pool.held_blocks, pool.managed_bytes)
    run(10_000)
    grown = _rss_kib() - base_rss
    assert live[0] == base_buffers, f"{live[0] - base_buffers} device buffers leaked"
    assert (pool.active_blocks, pool.held_blocks, pool.managed_bytes) == base_pool, \
        "clpool's memory pool grew"
    assert grown < 4096, f"RSS grew by {grown} KiB over 10,000 calls"


# ------------------------------------------------------------------ faults


def op_calls(x: np.ndarray, **kw) -> dict[str, object]:
    """A call of every op on a (1, 2, 4, 4) x; every output is (1, 2, 3, 3)."""
    g3 = np.ones(x.shape[:-2] + (3, 3), x.dtype)
    idx = np.zeros(x.shape[:-2] + (3, 3), np.int64)
    return {
        "max_pool2d": lambda: clpool.max_pool2d(x, 2, 2, 1, **kw),
        "max_pool2d_with_indices": lambda: clpool.max_pool2d_with_indices(x, 2, 2, 1, **kw),
        "max_pool2d_with_indices_backward":
            lambda: clpool.max_pool2d_with_indices_backward(g3, x, 2, 2, 1, indices=idx, **kw),
        "avg_pool2d": lambda: clpool.avg_pool2d(x, 2, 2, 1, **kw),
        "avg_pool2d_backward": lambda: clpool.avg_pool2d_backward(g3, x, 2, 2, 1, **kw),
        "adaptive_avg_pool2d": lambda: clpool.adaptive_avg_pool2d(x, 3, **kw),
        "adaptive_avg_pool2d_backward":
            lambda: clpool.adaptive_avg_pool2d_backward(g3, x, **kw),
    }


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_build_failure_is_kernel_error(device, monkeypatch, forgetting, dtype) -> None:
    monkeypatch.setattr(programs, "source", lambda name: "__kernel void broken( { oops }\n")
    x = np.ones((1, 2, 4, 4), dtype)
    for label, call in op_calls(x).items():
        with pytest.raises(KernelError) as excinfo:
            call()
        e = excinfo.value
        assert isinstance(e, RuntimeError)
        assert (e.label, e.device, e.dtype) == (label, device_name(device), dtype.name)
        assert "build" in e.reason and e.log, str(e)


def test_launch_beyond_work_group_limit_is_kernel_error(device, monkeypatch, forgetting) -> None:
    too_big = device.max_work_group_size * 2

    def ndrange(dev, cols, rows, planes):
        return (too_big, 1, max(planes, 1)), (too_big, 1, 1)

    monkeypatch.setattr(plans, "ndrange", ndrange)
    x = np.ones((1, 2, 4, 4), np.float32)
    with policy.use(per_plane=False):  # the tile kernels, launched over ndrange's sizes
        for label, call in op_calls(x).items():
            with pytest.raises(KernelError) as excinfo:
                call()
            e = excinfo.value
            assert (e.label, e.device, e.dtype) == (label, device_name(device), "float32"), e
    monkeypatch.undo()  # and the device still works afterwards
    plans.forget()
    assert clpool.adaptive_avg_pool2d(x, 1).shape == (1, 2, 1, 1)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_output_too_large_for_the_device_is_an_argument_error(device, dtype) -> None:
    x = np.ones((1, 1, 2, 2), dtype)
    with pytest.raises(PoolArgumentError, match="largest allocation") as excinfo:
        clpool.adaptive_avg_pool2d(x, (10**6, 10**6))  # 10^12 elements
    e = excinfo.value
    assert (e.label, e.device, e.dtype) == ("adaptive_avg_pool2d", device_name(device),
                                            dtype.name)
    # and the device still works afterwards
    assert_close(clpool.adaptive_avg_pool2d(x, 1), ref.adaptive_avg_pool2d(x, 1), dtype)


def test_missing_dtype_rejected_before_any_build(pocl_device, monkeypatch) -> None:
    monkeypatch.delenv("CLPOOL_FP16", raising=False)
    assert not discovery.has_fp16(pocl_device)
    before = programs.builds
    for dtype in (np.dtype(np.float16), np.dtype(np.int32), np.dtype(np.complex64)):
        x = np.ones((1, 2, 4, 4), dtype)
        for label, call in op_calls(x, device=pocl_device).items():
            with pytest.raises(UnsupportedDtypeError) as excinfo:
                call()
            e = excinfo.value
            assert isinstance(e, TypeError)
            assert (e.label, e.device, e.dtype) == (label, device_name(pocl_device),
                                                    dtype.name), str(e)
    assert programs.builds == before


# ------------------------------------------------------------------ inputs are never modified


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_inputs_are_never_modified(device, dtype) -> None:
    queue = discovery.runtime(device).queue
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 7, 6)).astype(dtype)
    x[0, 0, 0, 0] = np.nan
    out, idx = ref.max_pool2d_with_indices(x, 3, 2, 1, 1, True)
    idx = idx.copy()
    idx.reshape(-1)[:3] = (-1, 7 * 6, 2**40)  # out-of-range indices too
    grad = rng.standard_normal(out.shape).astype(dtype)
    avg_grad = rng.standard_normal(ref.avg_pool2d(x, 3, 2, 1, True).shape).astype(dtype)
    ada_grad = rng.standard_normal((2, 3, 4, 4)).astype(dtype)

    def forms(a):
        """a as numpy, numpy non-contiguous, device array, device non-contiguous."""
        wide = np.repeat(a, 2, axis=-1)
        return [a, wide[..., ::2], cla.to_device(queue, a), cla.to_device(queue, wide)[..., ::2]]

    def snapshot(arrays):
        """The bytes of each numpy array, and of the whole buffer under each device array."""
        out = []
        for a in arrays:
            if isinstance(a, cla.Array):
                raw = np.empty(a.base_data.size, np.uint8)
                cl.enqueue_copy(queue, raw, a.base_data)
                out.append(raw.tobytes())
            else:
                out.append(a.tobytes())
        return out

    for i in range(4):
        xs, gs, ags, adg = forms(x)[i], forms(grad)[i], forms(avg_grad)[i], forms(ada_grad)[i]
        i64 = forms(idx)[i]
        i32 = forms(idx.astype(np.int32))[i]
        args = [xs, gs, ags, adg, i64, i32]
        before = snapshot(args)
        clpool.max_pool2d(xs, 3, 2, 1, ceil_mode=True)
        clpool.max_pool2d_with_indices(xs, 3, 2, 1, ceil_mode=True, index_dtype="int32")
        clpool.max_pool2d_with_indices_backward(gs, xs, 3, 2, 1, indices=i64, ceil_mode=True)
        clpool.max_pool2d_with_indices_backward(gs, xs, 3, 2, 1, indices=i32, ceil_mode=True)
        clpool.avg_pool2d(xs, 3, 2, 1, ceil_mode=True)
        clpool.avg_pool2d_backward(ags, xs, 3, 2, 1, ceil_mode=True)
        clpool.adaptive_avg_pool2d(xs, 1)
        clpool.adaptive_avg_pool2d(xs, (4, 4))
        clpool.adaptive_avg_pool2d_backward(adg, xs)
        queue.finish()
        assert snapshot(args) == before, f"an input was modified (form {i})"


def test_strided_device_indices(device) -> None:
    queue = discovery.runtime(device).queue
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    out, idx = clpool.max_pool2d_with_indices(x, 2)
    strided = cla.to_device(queue, np.repeat(idx, 2, axis=-1))[..., ::2]
    assert not strided.flags.c_contiguous
    want = clpool.max_pool2d_with_indices_backward(np.ones_like(out), x, 2, indices=idx)
    got = clpool.max_pool2d_with_indices_backward(np.ones_like(out), x, 2, indices=strided)
    np.testing.assert_array_equal(got, want)
