"""The backward ops on the suite's device, against the float64 reference and torch autograd."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest
from pool_cases import (
    adaptive_cases,
    assert_close,
    check_argument_error,
    check_error,
    data,
    same_bits,
    scrambled,
    window_cases,
    wrapped,
)

import clpool
from clpool import launch, policy, programs
from clpool import reference as ref
from clpool.shapes import stored_channels_last


def _max_bw(g, x, idx, case_args, **kw):
    return clpool.max_pool2d_with_indices_backward(g, x, *case_args, indices=idx, **kw)


# ---------------------------------------------------------------- random sweeps


def test_max_backward_matches_reference(variant, path):
    seed = 2000 + variant
    rng = np.random.default_rng(seed)
    for case in window_cases(seed, 80, family="max"):
        x = data(rng, case.shape, special=True)
        _, idx = clpool.max_pool2d_with_indices(x, *case.max_args)
        g = data(rng, idx.shape)
        got = _max_bw(g, x, idx, case.max_args)
        assert got.dtype == np.float32 and got.shape == x.shape
        assert_close(got, ref.max_pool2d_with_indices_backward(g, x, idx, *case.max_args),
                     1e-5, case)


def test_avg_backward_matches_reference(variant, path):
    seed = 2100 + variant
    rng = np.random.default_rng(seed)
    for case in window_cases(seed, 80, family="avg"):
        x = data(rng, case.shape)
        g = data(rng, ref.avg_pool2d(x, *case.avg_args).shape)
        got = clpool.avg_pool2d_backward(g, x, *case.avg_args)
        assert_close(got, ref.avg_pool2d_backward(g, x, *case.avg_args), 1e-5, case)


def test_adaptive_backward_matches_reference(path):
    rng = np.random.default_rng(2200)
    for shape, size in adaptive_cases(2200, 120):
        x = data(rng, shape)
        g = data(rng, ref.adaptive_avg_pool2d(x, size).shape)
        assert_close(clpool.adaptive_avg_pool2d_backward(g, x),
                     ref.adaptive_avg_pool2d_backward(g, x), 1e-5, (shape, size))


def test_wide_windows_match_reference(path):
    """Windows and cells of 16 columns or more: the per-plane kernels add their rows 16 at
    a time, into cleared rows or, where the windows tile the plane, into fresh ones."""
    rng = np.random.default_rng(2240)
    x = data(rng, (2, 3, 32, 47))
    for args in [((17, 18), 3, 0), ((16, 20), (2, 5), (8, 10)), ((3, 33), 1, 1)]:
        g = data(rng, ref.avg_pool2d(x, *args).shape)
        assert_close(clpool.avg_pool2d_backward(g, x, *args),
                     ref.avg_pool2d_backward(g, x, *args), 1e-5, args)
    x = data(rng, (2, 3, 32, 48))
    g = data(rng, (2, 3, 2, 3))  # cells of 16 x 16 that tile the plane
    assert_close(clpool.adaptive_avg_pool2d_backward(g, x),
                 ref.adaptive_avg_pool2d_backward(g, x), 1e-5)
    x = data(rng, (2, 3, 21, 70))
    g = data(rng, (2, 3, 2, 3))  # overlapping cells of 11 x 24
    assert_close(clpool.adaptive_avg_pool2d_backward(g, x),
                 ref.adaptive_avg_pool2d_backward(g, x), 1e-5)


def test_backward_of_windows_overlapping_at_most_twice_builds_their_sizes(build_options):
    """A backward loops over the windows reaching an element, so large windows that overlap
    at most twice build with their sizes as constants (the user picks the window). Equal
    adaptive cells follow the input's size: only square cells of the policy's fixed sides
    are constants, so images of varying size do not build a program each."""
    rng = np.random.default_rng(2260)
    x = data(rng, (1, 2, 112, 112))
    clpool.avg_pool2d_backward(data(rng, (1, 2, 10, 10)), x, 20, 10, 0)
    assert any("-DCLPOOL_KH=20" in opts and "-DCLPOOL_SW=10" in opts for opts in build_options)
    build_options.clear()
    clpool.adaptive_avg_pool2d_backward(data(rng, (1, 2, 2, 2)), x)  # cells of 56 x 56
    assert build_options and not any("-DCLPOOL_KH" in " ".join(o) for o in build_options)
    build_options.clear()
    clpool.adaptive_avg_pool2d_backward(data(rng, (1, 2, 14, 14)), x)  # cells of 8 x 8
    assert 8 in policy.current().adaptive_cells
    assert any("-DCLPOOL_KH=8" in opts for opts in build_options)
    build_options.clear()
    clpool.adaptive_avg_pool2d_backward(data(rng, (1, 2, 7, 7)), x)  # cells of 16 x 16
    on_gpu = policy.current().on_gpu(clpool.default_queue().device)
    # A GPU unrolls cells up to the policy's specialize_up_to (8) only.
    assert any("-DCLPOOL_KH=16" in opts for opts in build_options) != on_gpu


def test_per_plane_backward_runs_in_its_forward_program(monkeypatch, build_options,
                                                         device):
    """One work-item per plane takes no tile, so a backward asks for the program its
    forward op built (one build fewer per window on a CPU), also for the copy of a strided
    device gradient."""
    policy.set_policy(replace(policy.from_env(), gpu=False, per_plane=True))
    context = cl.Context([device])
    queue = cl.CommandQueue(context)
    rng = np.random.default_rng(2250)
    x = cla.to_device(queue, data(rng, (2, 3, 9, 10)))
    out, idx = clpool.max_pool2d_with_indices(x, 3, 2, 1)
    grad = cla.to_device(queue, data(rng, (2, 6) + out.shape[2:]))[:, ::2]  # strided
    asked = len(build_options)
    clpool.max_pool2d_with_indices_backward(grad, x, 3, 2, 1, indices=idx)
    assert set(build_options[asked:]) == {build_options[asked - 1]}
    out = clpool.avg_pool2d(x, (2, 3), 2)
    grad = cla.to_device(queue, data(rng, (2, 6) + out.shape[2:]))[:, ::2]
    asked = len(build_options)
    clpool.avg_pool2d_backward(grad, x, (2, 3), 2)
    assert set(build_options[asked:]) == {build_options[asked - 1]}
    del context


def test_backward_matches_torch_autograd(path, device):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(2300)
    for case in window_cases(2300, 60, family="max", torch_rule=True):
        x = data(rng, case.shape, special=True)
        _, idx = clpool.max_pool2d_with_indices(x, *case.max_args)
        if (idx == -1).any():
            continue  # torch's own backward writes out of bounds for such windows
        g = data(rng, idx.shape)
        xt = torch.from_numpy(x).requires_grad_()
        F.max_pool2d(xt, *case.max_args).backward(torch.from_numpy(g))
        # same additions in the same (oh, ow) order: bit-identical to torch
        assert same_bits(_max_bw(g, x, idx, case.max_args), xt.grad.numpy()), case
    for case in window_cases(2301, 60, family="avg"):
        x = data(rng, case.shape)
        xt = torch.from_numpy(x).requires_grad_()
        out = F.avg_pool2d(xt, *case.avg_args)
        g = data(rng, tuple(out.shape))
        out.backward(torch.from_numpy(g))
        got = clpool.avg_pool2d_backward(g, x, *case.avg_args)
        assert_close(got, xt.grad.numpy(), 1e-5, case)
        # per plane: PyTorch's CPU additions in its order, so bit-identical where division
        # is correctly rounded (OpenCL allows a GPU's float division 2.5 ulp)
        exact = path == "plane" and not policy.current().on_gpu(device)
        assert not exact or same_bits(got, xt.grad.numpy()), case
    for shape, size in adaptive_cases(2302, 60):
        x = data(rng, shape)
        xt = torch.from_numpy(x).requires_grad_()
        out = F.adaptive_avg_pool2d(xt, size)
        g = data(rng, tuple(out.shape))
        out.backward(torch.from_numpy(g))
        assert_close(clpool.adaptive_avg_pool2d_backward(g, x), xt.grad.numpy(), 1e-5,
                     (shape, size))


# ---------------------------------------------------------------- indices


@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
def test_out_of_range_indices_are_ignored(index_dtype, path):
    rng = np.random.default_rng(2400)
    x = data(rng, (2, 3, 7, 6))
    args = (3, 1, 1, 1, False)
    _, idx = clpool.max_pool2d_with_indices(x, *args, index_dtype=index_dtype)
    info = np.iinfo(idx.dtype)
    bad = np.array([-1, -2, -7, 42, 43, 1000, info.min, info.max], idx.dtype)  # plane: 0..41
    mask = rng.random(idx.shape) < 0.3
    idx[mask] = rng.choice(bad, mask.sum())
    g = data(rng, idx.shape)
    got = _max_bw(g, x, idx, args)
    want = ref.max_pool2d_with_indices_backward(g, x, idx, *args)
    assert_close(got, want, 1e-5)
    all_bad = np.full_like(idx, -1)
    assert (_max_bw(g, x, all_bad, args) == 0).all()


def test_empty_windows_give_no_gradient():
    x = data(np.random.default_rng(2500), (2, 2, 3, 3))
    args = (2, 2, 1, 5, True)  # the one window's taps are -1 and 4: no element
    _, idx = clpool.max_pool2d_with_indices(x, *args)
    assert (idx == -1).all()
    assert (_max_bw(np.ones(idx.shape, np.float32), x, idx, args) == 0).all()


def test_in_plane_index_outside_its_window_is_ignored_like_cuda(path):
    """clpool gathers, as PyTorch's CUDA kernel does: an index counts only for the windows
    that contain the element it names. ATen's CPU kernel scatters and would add the
    gradient of every window to element 0 here (4); clpool gives the one window that
    contains element 0 (1). Autograd never makes such indices."""
    x = np.zeros((1, 1, 4, 4), np.float32)
    g = np.ones((1, 1, 2, 2), np.float32)
    idx = np.zeros((1, 1, 2, 2), np.int64)  # every window names element 0
    got = _max_bw(g, x, idx, (2,))
    want = np.zeros_like(x)
    want[0, 0, 0, 0] = 1
    assert same_bits(got, want)


def test_index_just_outside_its_window_is_ignored(path):
    """Windows of 2 x 2 on a 5 x 5 plane, each naming the element one row below, one
    column to the right, or one row above it: no gradient anywhere."""
    x = np.zeros((1, 1, 5, 5), np.float32)
    g = np.ones((1, 1, 2, 2), np.float32)
    idx = np.array([[[[10, 4], [20, 7]]]], np.int64)  # (2,0) (0,4) (4,0) (1,2)
    assert same_bits(_max_bw(g, x, idx, (2,)), np.zeros_like(x))


@pytest.mark.parametrize("cols", ["1", "2", "3"])
def test_index_outside_its_window_is_ignored_by_every_column_of_a_work_item(monkeypatch,
                                                                          cols):
    """A work-item of several columns loads the windows that reach any of them; each
    window's index still counts only for the columns that window contains."""
    monkeypatch.setenv("CLPOOL_COLS", cols)
    x = np.zeros((1, 1, 2, 7), np.float32)
    args = ((1, 2), 1)  # windows (0,1), (1,2) ... (5,6) along each row
    g = np.arange(1, 13, dtype=np.float32).reshape(1, 1, 2, 6)
    idx = np.zeros(g.shape, np.int64) + np.array([[0], [7]])  # all name column 0
    want = np.zeros_like(x)
    want[0, 0, :, 0] = g[0, 0, :, 0]  # only window 0 of each row contains it
    assert same_bits(_max_bw(g, x, idx, args), want)


def test_int32_and_int64_indices_agree():
    rng = np.random.default_rng(2600)
    x = data(rng, (2, 3, 9, 8))
    args = (3, 2, 1, 2, True)
    _, idx64 = clpool.max_pool2d_with_indices(x, *args)
    _, idx32 = clpool.max_pool2d_with_indices(x, *args, index_dtype="int32")
    assert np.array_equal(idx64, idx32) and idx32.dtype == np.int32
    g = data(rng, idx64.shape)
    assert same_bits(_max_bw(g, x, idx64, args), _max_bw(g, x, idx32, args))


# ---------------------------------------------------------------- determinism


def test_backward_is_deterministic(device):
    """Heavily overlapping windows, each backward run twice: identical bytes."""
    rng = np.random.default_rng(2700)
    dtypes = [np.float32, np.float64] + ([np.float16] if clpool.discovery.has_fp16(device)
                                         else [])
    for dtype in dtypes:
        x = data(rng, (2, 4, 33, 29), dtype, special=True)
        args = (5, 1, 2, 1, True)
        _, idx = clpool.max_pool2d_with_indices(x, *args)
        g = data(rng, idx.shape, dtype)
        runs = [
            lambda: _max_bw(g, x, idx, args),  # noqa: B023
            lambda: clpool.avg_pool2d_backward(g, x, 5, 1, 2, True),  # noqa: B023
            lambda: clpool.adaptive_avg_pool2d_backward(g[:, :, :7, :5], x),  # noqa: B023
            lambda: clpool.adaptive_avg_pool2d_backward(g[:, :, :40, :3], x),  # noqa: B023
        ]
        for run in runs:
            first = run()
            assert same_bits(first, run()), dtype


# ---------------------------------------------------------------- shapes, dtypes, layouts


def test_empty_batch_and_unbatched():
    x = np.zeros((0, 3, 6, 5), np.float32)
    g = np.zeros((0, 3, 3, 2), np.float32)
    assert _max_bw(g, x, g.astype(np.int64), (2,)).shape == x.shape
    assert clpool.avg_pool2d_backward(g, x, 2).shape == x.shape
    assert clpool.adaptive_avg_pool2d_backward(g, x).shape == x.shape
    rng = np.random.default_rng(2800)
    x = data(rng, (3, 7, 6))
    _, idx = clpool.max_pool2d_with_indices(x, 3, 2, 1)
    g = data(rng, idx.shape)
    assert_close(_max_bw(g, x, idx, (3, 2, 1)),
                 ref.max_pool2d_with_indices_backward(g, x, idx, 3, 2, 1))
    assert_close(clpool.avg_pool2d_backward(g, x, 3, 2, 1),
                 ref.avg_pool2d_backward(g, x, 3, 2, 1))
    assert_close(clpool.adaptive_avg_pool2d_backward(g, x),
                 ref.adaptive_avg_pool2d_backward(g, x))


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_float64_and_float16(device, dtype, path):
    if dtype == np.float16 and not clpool.discovery.has_fp16(device):
        pytest.skip("the suite's device has no native fp16")
    tol = 1e-12 if dtype == np.float64 else 1e-3
    rng = np.random.default_rng(2900)
    for case in window_cases(2900, 15, family="max"):
        x = data(rng, case.shape, dtype, special=True)
        _, idx = clpool.max_pool2d_with_indices(x, *case.max_args)
        g = data(rng, idx.shape, dtype)
        got = _max_bw(g, x, idx, case.max_args)
        assert got.dtype == dtype
        assert_close(got, ref.max_pool2d_with_indices_backward(g, x, idx, *case.max_args),
                     tol, case)
    for case in window_cases(2901, 15, family="avg"):
        x = data(rng, case.shape, dtype)
        g = data(rng, ref.avg_pool2d(x, *case.avg_args).shape, dtype)
        assert_close(clpool.avg_pool2d_backward(g, x, *case.avg_args),
                     ref.avg_pool2d_backward(g, x, *case.avg_args), tol, case)
    for shape, size in adaptive_cases(2902, 15):
        x = data(rng, shape, dtype)
        g = data(rng, ref.adaptive_avg_pool2d(x, size).shape, dtype)
        assert_close(clpool.adaptive_avg_pool2d_backward(g, x),
                     ref.adaptive_avg_pool2d_backward(g, x), tol, (shape, size))


def test_noncontiguous_numpy_gradients():
    rng = np.random.default_rng(3000)
    x = data(rng, (2, 3, 8, 7))
    _, idx = clpool.max_pool2d_with_indices(x, 2, 1)
    g = data(rng, idx.shape)
    gt = np.asfortranarray(g)
    it = idx.transpose(0, 1, 3, 2).copy().transpose(0, 1, 3, 2)
    assert same_bits(_max_bw(gt, x[:, :, ::-1][:, :, ::-1], it, (2, 1)),
                     _max_bw(g, x, idx, (2, 1)))
    assert same_bits(clpool.avg_pool2d_backward(gt, x, 2, 1),
                     clpool.avg_pool2d_backward(g, x, 2, 1))
    assert same_bits(clpool.adaptive_avg_pool2d_backward(gt, x),
                     clpool.adaptive_avg_pool2d_backward(g, x))


@pytest.mark.parametrize("plane", [False, True], ids=["tiled", "plane"])
def test_device_arrays(device, plane):
    """Device views of any strides (the _strided kernels) give the contiguous inputs' bits,
    tiled or per plane: every kernel adds the same terms in output order."""
    with policy.use(per_plane=plane):
        context = cl.Context([device])
        queue = cl.CommandQueue(context)
        rng = np.random.default_rng(3100)
        big = data(rng, (3, 4, 9, 8))
        x = big[1:, 1:3]
        _, idx = clpool.max_pool2d_with_indices(x, 3, 2, 1)
        gbig = data(rng, (3, 4) + idx.shape[2:])
        g = gbig[1:, 1:3]
        gd = cla.to_device(queue, gbig)[1:, 1:3]  # offset, non-contiguous device views
        xd = cla.to_device(queue, big)[1:, 1:3]
        idxd = cla.to_device(queue, idx)
        results = {
            "max": (_max_bw(gd, xd, idxd, (3, 2, 1)), _max_bw(g, x, idx, (3, 2, 1))),
            "avg": (clpool.avg_pool2d_backward(gd, xd, 3, 2, 1),
                    clpool.avg_pool2d_backward(g, x, 3, 2, 1)),
            "adaptive": (clpool.adaptive_avg_pool2d_backward(gd, xd),
                         clpool.adaptive_avg_pool2d_backward(g, x)),
        }
        for name, (got, want) in results.items():
            assert isinstance(got, cla.Array) and got.queue is queue, name
            assert same_bits(got.get(), want), name
        # grad_output on the device and the forward input on the host: runs on the device
        out = clpool.avg_pool2d_backward(gd, x, 3, 2, 1)
        assert isinstance(out, cla.Array) and same_bits(out.get(), results["avg"][1])
        del context


@pytest.mark.parametrize("rank", [2, 3])
def test_a_cpus_wide_rows_of_average_shares_give_pytorchs_bits(device, rank):
    """The per-plane average backwards add the shares of 16 windows of stride 2 or 1 (2 to
    4 columns) at once where they lie inside a row: each element still sums its windows'
    shares in output order, PyTorch CPU's bits, with windows overlapping by 0 to 3 columns,
    padding, count_include_pad off, a divisor override, ceil mode, and the rows' first and
    last windows one by one (rows of 36 to 157 columns); a tiny gradient's +0 where the
    windows tile the plane; NaN and -inf among the inputs' gradients; grad_x written into
    memory that held NaN (every element is cleared before a share is added to it)."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(3600 + rank)
    windows = [(2, 2, 0, False, True, None), (3, 2, 1, False, True, None),
               (4, 2, 2, False, True, None), (3, 2, 1, True, False, None),
               (4, 2, 1, True, True, 7), ((3, 2, 4), 2, (1, 0, 2), False, False, None),
               (2, 1, 0, False, True, None), (3, 1, 1, True, False, None),
               (4, 1, 2, False, True, 5), ((3, 3, 4), 1, (1, 1, 2), False, False, None),
               (1, 1, 0, False, True, None), ((1, 2, 1), 1, (0, 0, 0), False, True, None)]
    for w, args in enumerate(windows):
        if rank == 2 and isinstance(args[0], tuple):
            args = ((args[0][1], args[0][2]), args[1], args[2][1:]) + args[3:]
        spatial = (6, 8, 36 + 11 * w)[-rank:]
        x = data(rng, (2, 3) + spatial)
        xt = torch.from_numpy(x).requires_grad_()
        y = getattr(F, f"avg_pool{rank}d")(xt, *args)
        g = data(rng, tuple(y.shape), special=True)
        g[0, 0].reshape(-1)[::3] = -(2.0**-149)
        y.backward(torch.from_numpy(g))
        queue = clpool.default_queue()
        stale = cla.to_device(queue, np.full(x.shape, np.nan, np.float32))  # grad_x's memory
        with policy.use(per_plane=True):
            got = getattr(clpool, f"avg_pool{rank}d_backward")(g, x, *args, out=stale)
        assert got is stale and same_bits(got.get(), xt.grad.numpy()), (rank, args)


def test_tall_wide_and_many_planes():
    for shape in [(1, 1, 100_001, 2), (1, 1, 2, 100_001), (2, 70_001, 2, 2)]:
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        _, idx = clpool.max_pool2d_with_indices(x, 2, ceil_mode=True)
        g = np.random.default_rng(3200).standard_normal(idx.shape).astype(np.float32)
        got = _max_bw(g, x, idx, (2, 2, 0, 1, True))
        h, w = shape[-2:]
        want = np.zeros(shape, np.float32)
        rows = np.minimum(2 * np.arange(idx.shape[2]) + 1, h - 1)
        cols = np.minimum(2 * np.arange(idx.shape[3]) + 1, w - 1)
        want[:, :, rows[:, None], cols[None, :]] = g
        assert same_bits(got, want), shape
        got = clpool.avg_pool2d_backward(g, x, 2, ceil_mode=True, divisor_override=1)
        assert same_bits(got, np.repeat(np.repeat(g, 2, 2), 2, 3)[:, :, :h, :w]), shape
        gm = np.arange(shape[0] * shape[1], dtype=np.float32).reshape(shape[:2] + (1, 1))
        got = clpool.adaptive_avg_pool2d_backward(gm, x)
        assert_close(got, np.broadcast_to(gm / (h * w), shape), 1e-6, shape)


# ---------------------------------------------------------------- bad arguments

X = np.zeros((2, 3, 6, 6), np.float32)
G = np.zeros((2, 3, 3, 3), np.float32)
I = np.zeros((2, 3, 3, 3), np.int64)  # noqa: E741
BAD = [
    ("max_pool2d_with_indices_backward", lambda: _max_bw(G[:, :, :2], X, I[:, :, :2], (2,))),
    ("max_pool2d_with_indices_backward", lambda: _max_bw(G[:1], X, I[:1], (2,))),
    ("max_pool2d_with_indices_backward", lambda: _max_bw(G[0], X, I[0], (2,))),
    ("max_pool2d_with_indices_backward", lambda: _max_bw(G, X, I[:, :, :2], (2,))),
    ("max_pool2d_with_indices_backward", lambda: _max_bw(G, X, I[0], (2,))),
    ("max_pool2d_with_indices_backward", lambda: _max_bw(G, X, I.astype(np.float32), (2,))),
    ("max_pool2d_with_indices_backward", lambda: _max_bw(G, X, I.astype(np.int16), (2,))),
    ("max_pool2d_with_indices_backward", lambda: _max_bw(G, X, I.astype(np.uint64), (2,))),
    ("max_pool2d_with_indices_backward", lambda: _max_bw(G, X, I, (3,))),  # window mismatch
    ("max_pool2d_with_indices_backward", lambda: _max_bw(G, X, I, (0,))),
    ("max_pool2d_with_indices_backward", lambda: _max_bw(G, X, I, (2, 2, 2))),
    ("max_pool2d_with_indices_backward", lambda: _max_bw(G, X[0, 0], I, (2,))),
    ("avg_pool2d_backward", lambda: clpool.avg_pool2d_backward(G[:, :, :2], X, 2)),
    ("avg_pool2d_backward", lambda: clpool.avg_pool2d_backward(G[:, :2], X, 2)),
    ("avg_pool2d_backward", lambda: clpool.avg_pool2d_backward(G[0], X, 2)),
    ("avg_pool2d_backward", lambda: clpool.avg_pool2d_backward(G, X, 3)),
    ("avg_pool2d_backward", lambda: clpool.avg_pool2d_backward(G, X, 2, 2, 2)),
    ("avg_pool2d_backward", lambda: clpool.avg_pool2d_backward(G, X, 2, divisor_override=0)),
    ("adaptive_avg_pool2d_backward", lambda: clpool.adaptive_avg_pool2d_backward(G[:1], X)),
    ("adaptive_avg_pool2d_backward", lambda: clpool.adaptive_avg_pool2d_backward(G[:, :2], X)),
    ("adaptive_avg_pool2d_backward", lambda: clpool.adaptive_avg_pool2d_backward(G[0], X)),
    ("adaptive_avg_pool2d_backward",
     lambda: clpool.adaptive_avg_pool2d_backward(G, X[0, 0])),
]


@pytest.mark.parametrize(("label", "call"), BAD, ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD)])
def test_bad_arguments(device, label, call):
    check_argument_error(call, label, device)


@pytest.mark.parametrize("label", ["max_pool2d_with_indices_backward", "avg_pool2d_backward",
                                   "adaptive_avg_pool2d_backward"])
def test_grad_output_of_another_dtype(device, label):
    g64 = G.astype(np.float64)
    call = {
        "max_pool2d_with_indices_backward": lambda: _max_bw(g64, X, I, (2,)),
        "avg_pool2d_backward": lambda: clpool.avg_pool2d_backward(g64, X, 2),
        "adaptive_avg_pool2d_backward": lambda: clpool.adaptive_avg_pool2d_backward(g64, X),
    }[label]
    with pytest.raises(clpool.PoolArgumentError) as info:
        call()
    check_error(info, label, device, "float32")
    with pytest.raises(clpool.UnsupportedDtypeError):
        clpool.avg_pool2d_backward(G.astype(np.int32), X.astype(np.int32), 2)


def exact(device: cl.Device) -> bool:
    """True where `device` gives PyTorch's float32 quotients in these tiles: a CPU (Intel's
    runtime too, built without exact division: its 16-column tiles miss by 1 ulp,
    RELIABILITY.md), a GPU where clpool builds with exact division (OpenCL allows 2.5 ulp
    otherwise)."""
    return not device.type & cl.device_type.GPU or bool(programs.exact_division(device))


@pytest.mark.parametrize("tile", [(4, 2), (4, 4), (2, 3), (3, 1), (1, 1)])
def test_gpu_tiles_of_the_avg_backward_give_pytorchs_bits(device, build_options, tile):
    """A GPU's avg backward tile, its coverage folded at build time where the tile is a
    multiple of the stride (window sizes and padding as constants, each axis its own):
    each window's share added in output order, PyTorch CPU's bits (and the per-plane
    kernel's), at the plane's edges too; on a device whose division need not round
    correctly (OpenCL allows 2.5 ulp unless the device offers exact division), within 1e-6."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3300)
    x = data(rng, (2, 3, 13, 11))
    windows = [(3, 2, 1, False, True, None), (3, 1, 1, False, True, None),
               (2, 2, 0, False, True, None), (3, 2, 1, True, False, None),
               (5, 3, 2, False, True, None), (3, 2, 1, False, True, 7),
               ((3, 4), 2, (1, 2), False, True, None), ((2, 3), (2, 1), (1, 0), True, False, None)]
    for args in windows:
        xt = torch.from_numpy(x).requires_grad_()
        y = torch.nn.functional.avg_pool2d(xt, *args)
        g = data(rng, tuple(y.shape))
        y.backward(torch.from_numpy(g))
        with policy.use(gpu=True, per_plane=False, rows=tile[0], cols=tile[1]):
            got = clpool.avg_pool2d_backward(g, x, *args)
        with policy.use(per_plane=True):
            plane = clpool.avg_pool2d_backward(g, x, *args)
        if not exact(device):
            assert_close(got, xt.grad.numpy(), 1e-6, args)
        else:
            assert same_bits(got, xt.grad.numpy()), args
            assert same_bits(got, plane), args
    assert any({"-DCLPOOL_PH=1", "-DCLPOOL_PW=2"} <= set(o) for o in build_options)


@pytest.mark.parametrize("rows, cols", [(1, 1), (3, 2), (8, 4), (16, 3)])
def test_gpu_adaptive_backward_gives_pytorchs_bits(device, rows, cols):
    """The GPU's adaptive average backward of unequal cells, NCHW and channels-last, with
    tiles of `rows` rows and `cols` columns (the channels-last kernel takes no columns;
    a last tile may be cut short): each element
    adds its cells' shares grad_out / rows / columns in output order, worked out again only
    where its cells change, once for all the tile's columns: PyTorch CPU's bits and the
    per-plane kernel's (where division may be inexact: within 1e-6), down- and upsampling;
    the channels-last kernel's bits are the NCHW kernel's."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3400 + rows)
    cases = [((2, 3, 13, 11), (5, 4)), ((1, 4, 40, 9), (7, 3)), ((2, 4, 5, 6), (9, 13)),
             ((1, 8, 37, 23), 7), ((1, 4, 19, 3), (19, 2))]  # fmt: skip
    for shape, size in cases:
        x = data(rng, shape)
        xt = torch.from_numpy(x).requires_grad_()
        y = torch.nn.functional.adaptive_avg_pool2d(xt, size)
        g = data(rng, tuple(y.shape))
        y.backward(torch.from_numpy(g))
        with policy.use(gpu=True, per_plane=False, rows=rows, cols=cols):
            got = clpool.adaptive_avg_pool2d_backward(g, x)
            nhwc = clpool.adaptive_avg_pool2d_backward(
                stored_channels_last(g), stored_channels_last(x)
            )
        with policy.use(per_plane=True):
            plane = clpool.adaptive_avg_pool2d_backward(g, x)
        if not exact(device):
            assert_close(got, xt.grad.numpy(), 1e-6, (shape, size))
        else:
            assert same_bits(got, xt.grad.numpy()), (shape, size)
            assert same_bits(plane, got), (shape, size)
        assert same_bits(nhwc, got), (shape, size)


# Rows of 16 windows or more, which the CPU's max backward checks 16 at a time: (shape,
# kernel_size, stride, padding, dilation, ceil_mode); 37, 20, 25, 17, 16 and 40 windows a
# row; the last spans 13 rows (more than plane.h counts: it divides).
WIDE_ROWS = [((2, 3, 5, 37), 3, 1, 1, 1, False), ((1, 2, 6, 40), 2, 2, 0, 1, False),
             ((1, 2, 7, 50), 3, 2, 1, 2, True), ((1, 1, 4, 17), (2, 3), 1, 1, 1, False),
             ((1, 2, 3, 16), 3, 1, 1, 1, False),
             ((1, 2, 12, 40), (5, 3), 1, (2, 1), (3, 1), False)]  # fmt: skip
# Windows apart (strides at least their spans): tiling, with gaps between windows and rows
# (and rows no window reaches), padded, dilated, ceil mode's last window hanging over.
APART = [((2, 3, 14, 14), 2, 2, 0, 1, False), ((1, 2, 11, 13), 2, 3, 0, 1, False),
         ((1, 2, 9, 10), (2, 3), (2, 3), 1, 1, True), ((1, 1, 10, 11), 2, 3, 1, 2, False),
         ((1, 2, 7, 9), 3, (3, 4), 1, 1, True)]  # fmt: skip


@pytest.mark.parametrize("index", [np.int64, np.int32])
@pytest.mark.parametrize("case", range(len(WIDE_ROWS + APART)))
def test_the_cpus_max_backward_of_wide_rows_equals_the_gather(launched, case, index):
    """max_pool2d_backward_plane, 16 windows at a time (the last 16 of a row overlapping
    those before), or windows apart: the gather's bits, with ties and NaN, gradients of
    -0, and with indices outside their windows (next to their rows too), repeated, and
    outside the plane (int64: one whose low 32 bits name an element of it)."""
    rng = np.random.default_rng(3500 + case)
    shape, *window = (WIDE_ROWS + APART)[case]
    x = data(rng, shape, special=True)
    x[..., 1:3, 2:9] = 0.5  # ties
    _, idx = clpool.max_pool2d_with_indices(x, *window, index_dtype=index)
    g = data(rng, idx.shape)
    g[rng.random(g.shape) < 0.2] = -0.0
    bad = scrambled(idx, shape[-2] * shape[-1], rng), wrapped(idx, shape[-2:], *window[:4], rng)
    for i in (idx, *bad):
        with policy.use(gpu=True, per_plane=False):
            want = _max_bw(g, x, i, window)
        assert launched[-1][0] == "max_pool2d_backward"
        with policy.use(per_plane=True):
            got = _max_bw(g, x, i, window)
        assert launched[-1][0] == "max_pool2d_backward_plane"
        assert same_bits(got, want), i


@pytest.mark.parametrize("tile", [(8, 2), (8, 4), (2, 3), (3, 1), (1, 1)])
def test_gpu_tiles_of_the_max_backward_give_pytorchs_bits(device, build_options, tile):
    """A GPU's max backward tile, each window reaching it loaded once and its coverage
    folded at build time where the tile is a multiple of the stride (window sizes and
    padding as constants): PyTorch CPU's bits and the per-plane kernel's, with ties,
    NaN, dilation, ceil mode, padding of its own per axis and the plane's edges."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3400)
    x = data(rng, (2, 3, 13, 11), special=True)
    x[0, 0, 2:6, 3:7] = 0.5  # a block of ties
    windows = [(3, 2, 1, 1, False), (3, 1, 1, 1, False), (2, 2, 0, 1, True),
               (3, 2, 1, 2, True), (5, 3, 2, 1, False),
               ((3, 4), 2, (1, 2), 1, False), ((2, 3), (2, 1), (1, 0), (1, 2), True)]
    for args in windows:
        xt = torch.from_numpy(x).requires_grad_()
        y, idx = torch.nn.functional.max_pool2d(xt, *args, return_indices=True)
        g = data(rng, tuple(y.shape))
        y.backward(torch.from_numpy(g))
        i = idx.numpy()
        with policy.use(gpu=True, per_plane=False, rows=tile[0], cols=tile[1]):
            got = clpool.max_pool2d_with_indices_backward(g, x, *args, indices=i)
        with policy.use(per_plane=True):
            plane = clpool.max_pool2d_with_indices_backward(g, x, *args, indices=i)
        assert same_bits(got, xt.grad.numpy()), args
        assert same_bits(got, plane), args
    assert any({"-DCLPOOL_PH=1", "-DCLPOOL_PW=2"} <= set(o) for o in build_options)


BANDED = ("max_pool2d_backward_plane", "max_pool3d_backward_plane",
          "adaptive_max_pool_backward_plane")  # fmt: skip


@pytest.mark.parametrize("planes", [1, 2])
def test_a_cpus_max_backward_splits_few_planes_into_bands_of_rows(device, monkeypatch, planes):
    """Where planes are fewer than cores, a CPU's per-plane max backward gives each band
    of a plane's rows (a volume's depths) a work-item (Policy.plane_bands): the gather's
    sums, windows across a band's edges (strides 1 to 3, padding, dilation, ceil mode,
    ties) included, the same bits as the float64 reference, in the backward of
    max_pool2d, max_pool3d and adaptive_max_pool2d (cells of one size and of two)."""
    cores = device.max_compute_units
    if cores < 2 * planes:
        pytest.skip("bands need more cores than planes")
    grids = []
    run = launch.run

    def spy(plan, arrays, out=None):
        grids.extend((s.name, s.global_size) for s in plan.steps if s.name in BANDED)
        return run(plan, arrays, out)

    monkeypatch.setattr(launch, "run", spy)
    rng = np.random.default_rng(4300 + planes)

    def ties(shape):
        return np.round(rng.standard_normal(shape) * 2).astype(np.float32)

    def grads(shape):  # integers: exact sums in any order
        return rng.integers(-8, 8, shape).astype(np.float32)

    with policy.use(gpu=False, per_plane=True, min_band_rows=2):
        for h, w, args in [(37, 20, (3, 1, 1)), (40, 16, (2, 2)), (29, 31, (3, 2, 1, 2, True)),
                           (12, 40, (5, 3, 2)), (64, 9, (4, 1, 2, 1, False))]:  # fmt: skip
            x = ties((1, planes, h, w))
            out, idx = clpool.max_pool2d_with_indices(x, *args)
            g = grads(out.shape)
            want = ref.max_pool2d_with_indices_backward(g, x, idx, *args)
            got = clpool.max_pool2d_with_indices_backward(g, x, *args, indices=idx)
            assert same_bits(got, want.astype(np.float32)), (h, w, args)
        for d, args in [(9, (3, 1, 1)), (12, (3, 2, 1, 2, True)), (7, (2, 2))]:
            x = ties((1, planes, d, 10, 11))
            out, idx = clpool.max_pool3d_with_indices(x, *args)
            g = grads(out.shape)
            want = ref.max_pool3d_with_indices_backward(g, x, idx, *args)
            got = clpool.max_pool3d_with_indices_backward(g, x, *args, indices=idx)
            assert same_bits(got, want.astype(np.float32)), (d, args)
        for size in [(7, 4), (5, 3)]:  # 42 x 28 in cells of 6 x 7; of 8-9 x 9-10
            x = ties((1, planes, 42, 28))
            out, idx = clpool.adaptive_max_pool2d(x, size, return_indices=True)
            g = grads(out.shape)
            want = ref.adaptive_max_pool_backward(g, x, idx, 2)
            got = clpool.adaptive_max_pool2d_backward(g, x, idx)
            assert same_bits(got, want.astype(np.float32)), size
    assert {name for name, _ in grids} == set(BANDED), grids
    assert all(len(s) == 2 and s[0] == planes and 1 < s[1] <= cores // planes for _, s in grids)
