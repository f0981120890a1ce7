"""The forward ops on the suite's device, against the float64 reference and against torch."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pyopencl.array as cla
import pytest
from pool_cases import (
    adaptive_cases,
    assert_close,
    check_argument_error,
    check_error,
    data,
    fresh_queue,
    same_bits,
    window_cases,
)

import clpool
from clpool import discovery, policy, programs
from clpool import reference as ref

NAN, INF = np.nan, np.inf


def _ref_max(x, *args):
    """Reference max values in x's dtype (exact: they are elements of x) and indices."""
    out, idx = ref.max_pool2d_with_indices(x, *args)
    return out.astype(np.asarray(x).dtype), idx


# ---------------------------------------------------------------- random sweeps


def test_max_matches_reference(variant):
    seed = 1000 + variant
    rng = np.random.default_rng(seed)
    for case in window_cases(seed, 100, family="max"):
        x = data(rng, case.shape, special=True)
        want, want_i = _ref_max(x, *case.max_args)
        out, idx = clpool.max_pool2d_with_indices(x, *case.max_args)
        assert same_bits(out, want), case
        assert same_bits(idx, want_i), case
        assert same_bits(clpool.max_pool2d(x, *case.max_args), want), case


def test_avg_matches_reference(variant):
    seed = 1100 + variant
    rng = np.random.default_rng(seed)
    for case in window_cases(seed, 100, family="avg"):
        x = data(rng, case.shape)
        out = clpool.avg_pool2d(x, *case.avg_args)
        assert out.dtype == np.float32
        assert_close(out, ref.avg_pool2d(x, *case.avg_args), 1e-5, case)


# (input shape, max_pool2d arguments, avg_pool2d arguments): rows of 16 outputs or more,
# which the per-plane kernels take 16 at a time (a stride of 1 in one load, of 2 in two,
# others in 16; with a last 16 overlapping the ones before, or exactly 16), the rows'
# edges one by one
WIDE_ROWS = [
    ((2, 3, 9, 47), (3, 2, 1), (3, 2, 1, False, True)),
    ((2, 3, 7, 36), (3, 2, 1), (3, 2, 1, True, False)),
    ((1, 5, 6, 33), (2, 2, 0), (2, 2, 0)),
    ((2, 3, 8, 40), (3, 1, 1), (3, 1, 1, False, False)),
    ((2, 3, 8, 50), ((3, 4), (1, 2), (1, 2), (2, 3), True), ((3, 4), (1, 2), (1, 2), True,
                                                             True, 5)),
    ((2, 3, 8, 60), ((2, 3), (2, 1), (0, 1), (1, 2)), ((2, 3), (2, 1), (0, 1))),
    ((1, 4, 5, 70), (3, 3, 1), (3, 3, 1)),
    ((1, 3, 12, 90), (11, 4), (11, 4)),
    ((1, 3, 13, 100), ((5, 7), (2, 5), (2, 3), (1, 2), True), ((5, 7), (2, 5), (2, 3), True,
                                                               False)),
    ((1, 4, 5, 15), (3, 1, 1), (3, 1, 1)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_wide_rows_match_reference(device, dtype, path):
    if dtype == np.float64 and not discovery.has_fp64(device):
        pytest.skip("no float64 on this device")
    rng = np.random.default_rng(1250)
    for shape, max_args, avg_args in WIDE_ROWS:
        x = data(rng, shape, dtype, special=True)
        x[0, 0, :, 8:40] = -INF  # windows of -inf only: the first tap keeps the index
        out, idx = clpool.max_pool2d_with_indices(x, *max_args)
        want, want_i = _ref_max(x, *max_args)
        assert same_bits(out, want) and same_bits(idx, want_i), (shape, max_args)
        out, idx = clpool.max_pool2d_with_indices(x, *max_args, index_dtype="int32")
        assert same_bits(out, want) and same_bits(idx, want_i.astype(np.int32)), max_args
        assert same_bits(clpool.max_pool2d(x, *max_args), want), (shape, max_args)
        x = data(rng, shape, dtype)
        assert_close(clpool.avg_pool2d(x, *avg_args), ref.avg_pool2d(x, *avg_args), 1e-5,
                     (shape, avg_args))


def test_adaptive_matches_reference():
    rng = np.random.default_rng(1200)
    for shape, size in adaptive_cases(1200, 120):
        x = data(rng, shape)
        assert_close(clpool.adaptive_avg_pool2d(x, size), ref.adaptive_avg_pool2d(x, size),
                     1e-5, (shape, size))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adaptive_equal_cells_match_reference(device, build_options, dtype):
    """Equal cells of up to 16 x 16 on a CPU (8 x 8 on a GPU) build with their size as
    constants (-DCLPOOL_KH/KW): every cell width modulo 4, on CPU and GPU tiles."""
    if dtype == np.float64 and not discovery.has_fp64(device):
        pytest.skip("no float64 on this device")
    rng = np.random.default_rng(1210)
    for kh, kw in [(1, 1), (2, 3), (8, 8), (3, 4), (5, 7), (8, 1), (4, 6), (16, 16), (9, 13)]:
        for oh, ow in [(2, 3), (7, 1), (3, 7)]:
            x = data(rng, (2, 3, kh * oh, kw * ow), dtype)
            assert_close(clpool.adaptive_avg_pool2d(x, (oh, ow)),
                         ref.adaptive_avg_pool2d(x, (oh, ow)), 1e-5, (kh, kw, oh, ow))
    largest = 8 if policy.current().on_gpu(device) else 16
    assert any(f"-DCLPOOL_KH={largest}" in opts and f"-DCLPOOL_KW={largest}" in opts
               for opts in build_options)


def test_adaptive_cells_wider_than_a_block_match_reference():
    """Cells of more than 64 columns: window_sum adds them in blocks of 64 columns."""
    rng = np.random.default_rng(1230)
    for shape, size in [((1, 2, 5, 200), (2, 2)), ((1, 1, 40, 301), (3, 2)),
                        ((2, 1, 3, 129), (1, 1))]:
        x = data(rng, shape)
        assert_close(clpool.adaptive_avg_pool2d(x, size), ref.adaptive_avg_pool2d(x, size),
                     1e-5, (shape, size))


@pytest.mark.parametrize("gpu", [False, True])
def test_adaptive_cells_of_long_axes_take_64_bit_bounds(device, build_options, gpu):
    """An axis of 100,000 to 50,001 cells (the bounds' numerators pass 2^32): the adaptive
    average and max ops and their backward, 2-D and 3-D, give PyTorch's values, built with
    64-bit cell bounds; as the device plans them and as a GPU's (the gathers)."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional  # noqa: N806
    rng = np.random.default_rng(1231)
    x = rng.standard_normal((1, 2, 1, 100_000)).astype(np.float32)
    g = rng.standard_normal((1, 2, 1, 50_001)).astype(np.float32)
    t = torch.from_numpy(x).requires_grad_()
    size, tol = (1, 50_001), 1e-6 if gpu else 0  # a GPU's division need not round correctly
    with policy.use(gpu=gpu, per_plane=not gpu):
        want = F.adaptive_avg_pool2d(t, size)
        assert_close(clpool.adaptive_avg_pool2d(x, size), want.detach().numpy(), tol or 1e-7)
        want.backward(torch.from_numpy(g))
        got = clpool.adaptive_avg_pool2d_backward(g, x)
        assert_close(got, t.grad.numpy(), tol or 1e-7)
        t = torch.from_numpy(x).requires_grad_()
        want, want_i = F.adaptive_max_pool2d(t, size, return_indices=True)
        got, got_i = clpool.adaptive_max_pool2d(x, size, return_indices=True)
        assert same_bits(got, want.detach().numpy()) and same_bits(got_i, want_i.numpy())
        want.backward(torch.from_numpy(g))
        assert same_bits(clpool.adaptive_max_pool2d_backward(g, x, got_i), t.grad.numpy())
        x3 = x.reshape(1, 2, 100_000, 1, 1)
        want = F.adaptive_avg_pool3d(torch.from_numpy(x3), (50_001, 1, 1)).numpy()
        assert_close(clpool.adaptive_avg_pool3d(x3, (50_001, 1, 1)), want, tol or 1e-7)
    assert any("-DCLPOOL_LARGE_CELLS" in o for o in build_options)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_cpu_global_average_matches_reference(device, monkeypatch, launched, dtype):
    """Global average pooling as a CPU runs it, one work-item per plane summing 32 elements
    at a time and folding every 1024: planes just below, at and past those sizes."""
    if dtype == np.float64 and not discovery.has_fp64(device):
        pytest.skip("no float64 on this device")
    if dtype == np.float16 and not discovery.has_fp16(device):
        pytest.skip("the suite's device has no native fp16")
    policy.set_policy(replace(policy.from_env(), gpu=False))
    rng = np.random.default_rng(1240)
    for h, w in [(1, 1), (5, 6), (4, 8), (3, 11), (31, 33), (32, 32), (1, 1055), (70, 70),
                 (300, 301)]:
        x = data(rng, (2, 3, h, w), dtype) + dtype(10)
        assert_close(clpool.adaptive_avg_pool2d(x, 1), ref.adaptive_avg_pool2d(x, 1),
                     1e-3 if dtype == np.float16 else 1e-6, (h, w))
    # 4096 blocks of the same sum: without compensation their rounding errors add up in
    # float32 (the float16 and float64 sums of this plane are exact either way)
    x = np.full((1, 1, 2048, 2048), 1.1, dtype)
    assert_close(clpool.adaptive_avg_pool2d(x, 1), ref.adaptive_avg_pool2d(x, 1), 1e-6)
    assert ("adaptive_avg_pool2d_plane", dtype) in launched


def test_gpu_choices_match_reference(monkeypatch, launched):
    """What clpool runs on a GPU (its tiles, the band and global adaptive kernels), run on
    the suite's device."""
    policy.set_policy(replace(policy.from_env(), gpu=True))
    rng = np.random.default_rng(1250)
    bands = [((2, 3, 35, 12), (2, 3)), ((1, 2, 64, 16), (4, 4)), ((1, 1, 130, 8), (2, 5)),
             ((3, 40, 4), (2, 1)), ((1, 1, 16, 132), (1, 7))]
    wholes = [((2, 2, 48, 20), 1), ((3, 2, 9, 8), 1), ((1, 3, 33, 31), (1, 1))]  # tails
    for shape, size in bands + wholes + adaptive_cases(1250, 40):
        x = data(rng, shape)
        assert_close(clpool.adaptive_avg_pool2d(x, size), ref.adaptive_avg_pool2d(x, size),
                     1e-5, (shape, size))
    assert {"adaptive_avg_pool2d_band", "adaptive_avg_pool2d_global"} <= {n for n, _ in launched}
    for case in window_cases(1251, 40, family="max"):
        x = data(rng, case.shape, special=True)
        want, want_i = _ref_max(x, *case.max_args)
        out, idx = clpool.max_pool2d_with_indices(x, *case.max_args)
        assert same_bits(out, want) and same_bits(idx, want_i), case
    for case in window_cases(1252, 40, family="avg"):
        x = data(rng, case.shape)
        assert_close(clpool.avg_pool2d(x, *case.avg_args), ref.avg_pool2d(x, *case.avg_args),
                     1e-5, case)


@pytest.mark.parametrize("rows, cols", [(1, 4), (2, 2), (3, 1)])
def test_vector_row_loads_match_reference(monkeypatch, build_options, rows, cols):
    """The GPU forward that loads tile rows as vload4 chunks (-DCLPOOL_VEC4) and stores
    values 2 or 4 at a time (-DCLPOOL_PACK) and indices in pairs (-DCLPOOL_INDEX_PAIRS,
    int64 and int32) where they divide the row, one by one elsewhere: every padding modulo 4,
    strides 1 to 4, dilation, ceil mode and -inf, NaN and ties, on rows of 8 to 20
    columns."""
    monkeypatch.setenv("CLPOOL_ROWS", str(rows))
    monkeypatch.setenv("CLPOOL_COLS", str(cols))
    policy.set_policy(replace(policy.from_env(), gpu=True))
    rng = np.random.default_rng(1260 + cols)
    vec4 = 0
    for w in (8, 12, 20):
        for k, s, p, d, ceil in [(1, 4, 0, 1, False), (2, 2, 0, 1, True), (3, 1, 1, 1, False),
                                 (3, 2, 1, 2, True), (4, 4, 2, 1, True), (5, 2, 2, 1, False),
                                 (7, 1, 3, 1, True), (3, 4, 1, 3, False)]:
            x = data(rng, (2, 3, 9, w), special=True)
            args = (k, s, p, d, ceil)
            want, want_i = _ref_max(x, *args)
            out, idx = clpool.max_pool2d_with_indices(x, *args)
            assert same_bits(out, want) and same_bits(idx, want_i), (w, args)
            idx32 = clpool.max_pool2d_with_indices(x, *args, index_dtype="int32")[1]
            assert idx32.dtype == np.int32 and np.array_equal(idx32, want_i), (w, args)
            assert same_bits(clpool.max_pool2d(x, *args), want), (w, args)
            if d == 1:
                for include_pad in (True, False):
                    a = (k, s, p, ceil, include_pad)
                    assert_close(clpool.avg_pool2d(x, *a), ref.avg_pool2d(x, *a), 1e-5, (w, a))
            vec4 += cols * s % 4 == 0
    assert vec4 and any("-DCLPOOL_VEC4" in opts for opts in build_options)
    for option in ("-DCLPOOL_INDEX_PAIRS", "-DCLPOOL_PACK="):
        assert (cols % 2 == 0) == any(option in " ".join(o) for o in build_options), option


def test_a_strided_input_is_built_without_the_tiles_store_options(build_options):
    """A strided input runs the _strided kernels, which store through their own strides:
    its programs are built without the GPU tile's packed stores and index pairs (no
    second variant of the same program), and give the same results."""
    rng = np.random.default_rng(1270)
    base = data(rng, (3, 2, 12, 16), special=True)
    view = cla.to_device(fresh_queue(discovery.select()), base).transpose((1, 0, 2, 3))
    x = np.ascontiguousarray(base.transpose(1, 0, 2, 3))
    with policy.use(gpu=True, per_plane=False):
        out, idx = clpool.max_pool2d_with_indices(view, 2, 2)
        avg = clpool.avg_pool2d(view, 3, 2, 1)
    want, want_i = _ref_max(x, 2, 2)
    assert same_bits(out.get(), want) and same_bits(idx.get(), want_i)
    assert_close(avg.get(), ref.avg_pool2d(x, 3, 2, 1), 1e-5)
    built = [" ".join(o) for o in build_options]
    assert built and not any("-DCLPOOL_PACK" in o or "-DCLPOOL_INDEX_PAIRS" in o for o in built)


def test_max_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1300)
    for case in window_cases(1300, 80, family="max", torch_rule=True):
        x = data(rng, case.shape, special=True)
        want, want_i = torch.nn.functional.max_pool2d_with_indices(torch.from_numpy(x),
                                                                   *case.max_args)
        out, idx = clpool.max_pool2d_with_indices(x, *case.max_args)
        assert same_bits(out, want.numpy()), case  # NaN payloads too
        hit = idx != -1  # where the window misses the plane torch's index is meaningless
        assert np.array_equal(idx[hit], want_i.numpy()[hit]), case


def test_avg_and_adaptive_match_torch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(1400)
    for case in window_cases(1400, 60, family="avg"):
        x = data(rng, case.shape)
        want = F.avg_pool2d(torch.from_numpy(x), *case.avg_args).numpy()
        assert_close(clpool.avg_pool2d(x, *case.avg_args), want, 1e-5, case)
    for shape, size in adaptive_cases(1401, 60):
        x = data(rng, shape)
        want = F.adaptive_avg_pool2d(torch.from_numpy(x), size).numpy()
        assert_close(clpool.adaptive_avg_pool2d(x, size), want, 1e-5, (shape, size))


def _sums_of_every_range(rng, shape, dtype):
    """Values from tiny subnormals to near overflow, with NaN, infinities and both
    zeros: window sums of every magnitude and the division's special cases."""
    top = 900 if dtype == np.float64 else 120
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-top - 20, top, shape).astype(float))
    x = x.astype(dtype).reshape(-1)
    for value, count in ((NAN, 20), (INF, 20), (-INF, 20), (0.0, 200), (-0.0, 200)):
        x[rng.integers(0, x.size, count)] = value
    x[rng.integers(0, x.size, 500)] = np.finfo(dtype).smallest_subnormal * rng.integers(-9, 9, 500)
    return x.reshape(shape)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_constant_divisor_gives_pytorchs_quotient_bits(device, build_options, dtype):
    """Where every window divides by one build constant, a GPU's forward tiles divide by
    its reciprocal with one correction (clpool.h's by_avg_divisor) and divide for real
    only where a sum is NaN, infinite or tiny: PyTorch CPU's bits for sums of every
    magnitude, NaN payloads included, in 1-D, 2-D and 3-D."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    if dtype == np.float64 and not discovery.has_fp64(device):
        pytest.skip("no float64 on this device")
    rng = np.random.default_rng(4100)
    cases = [(1, (4, 8, 999), (3, 2)), (1, (2, 5, 500), (5, 1, 2)),
             (2, (2, 8, 40, 41), (3, 2, 1)), (2, (2, 3, 30, 33), (7, 3, 3)),
             (3, (2, 3, 9, 20, 21), (3, 2, 1))]  # fmt: skip
    inputs = [(rank, _sums_of_every_range(rng, shape, dtype), args)
              for rank, shape, args in cases]  # fmt: skip
    # Sums whose quotients by 6 lie halfway between two subnormals: the product by the
    # reciprocal, corrected once, rounds some of them the wrong way.
    halfway = np.zeros((2, 3, 1200), dtype)
    odd = 2 * rng.integers(0, 2**20, (2, 3, 200)) + 1
    halfway[..., ::6] = 3 * odd * np.finfo(dtype).smallest_subnormal
    for rank, x, args in inputs + [(1, halfway, (6,))]:
        shape = x.shape
        want = getattr(F, f"avg_pool{rank}d")(torch.from_numpy(x), *args).numpy()
        build_options.clear()
        with policy.use(gpu=True, per_plane=False):
            got = getattr(clpool, f"avg_pool{rank}d")(x, *args)
        assert any(o.startswith("-DCLPOOL_AVG_DIVISOR=") for opts in build_options for o in opts)
        assert same_bits(got, want), (rank, shape, args)


# ---------------------------------------------------------------- edge cases by name


def test_ceil_mode_overhang():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    # k=3, s=2, p=1: ceil gives 3 x 3 (floor 3 x 2); the last window overhangs the input
    out, idx = clpool.max_pool2d_with_indices(x, 3, 2, 1, ceil_mode=True)
    want, want_i = _ref_max(x, 3, 2, 1, 1, True)
    assert out.shape == (2, 3, 3, 3) and same_bits(out, want) and same_bits(idx, want_i)
    for cip in (True, False):
        got = clpool.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=cip)
        assert_close(got, ref.avg_pool2d(x, 3, 2, 1, True, cip))
    # the divisor of the overhanging corner is the window clipped to the padded input
    ones = np.ones((1, 1, 4, 4), np.float32)
    got = clpool.avg_pool2d(ones, 3, 2, 1, ceil_mode=True)
    assert_close(got[0, 0, 2], [2 / 6, 3 / 6, 1 / 4])
    # a window that would start inside the right padding is dropped: H=3, k=2, s=2, p=1
    assert clpool.max_pool2d(np.zeros((1, 1, 3, 3), np.float32), 2, 2, 1,
                             ceil_mode=True).shape == (1, 1, 2, 2)


@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
def test_dilated_window_missing_the_plane(index_dtype):
    x = np.random.default_rng(2).standard_normal((2, 2, 3, 3)).astype(np.float32)
    out, idx = clpool.max_pool2d_with_indices(x, 2, 2, 1, 5, True, index_dtype=index_dtype)
    assert out.shape == (2, 2, 1, 1) and (out == -INF).all()
    assert idx.dtype == np.dtype(index_dtype) and (idx == -1).all()
    # only the columns miss: torch would return the in-plane index 4 here
    out, idx = clpool.max_pool2d_with_indices(x, (1, 2), 2, (0, 1), 5, True,
                                              index_dtype=index_dtype)
    assert out.shape == (2, 2, 2, 1) and (out == -INF).all() and (idx == -1).all()


def test_padding_limit_of_the_contract_for_dilated_max():
    # p <= ((k-1)*d + 1) // 2: k=2, d=5 allows p=3 (torch 2.x allows only p <= k//2 = 1)
    x = np.random.default_rng(3).standard_normal((1, 2, 7, 8)).astype(np.float32)
    out, idx = clpool.max_pool2d_with_indices(x, 2, 1, 3, 5)
    want, want_i = _ref_max(x, 2, 1, 3, 5, False)
    assert same_bits(out, want) and same_bits(idx, want_i)
    out, idx = clpool.max_pool2d_with_indices(x[:, :, :3, :3], 2, 1, 2, 5)  # taps -2 and 3
    assert out.shape == (1, 2, 2, 2) and (out == -INF).all() and (idx == -1).all()
    with pytest.raises(clpool.PoolArgumentError):
        clpool.max_pool2d(x, 2, 1, 4, 5)


def test_single_nan():
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    x[0, 0, 0, 0] = NAN
    out, idx = clpool.max_pool2d_with_indices(x, 2)
    assert np.isnan(out[0, 0, 0, 0]) and idx[0, 0, 0, 0] == 0
    assert out[0, 0].ravel()[1:].tolist() == [7, 13, 15] and idx.ravel()[1:].tolist() == [7, 13, 15]


def test_several_nans_last_wins():
    x = np.zeros((1, 1, 3, 4), np.float32)
    bits = x.view(np.uint32)
    bits[0, 0, 0, 1], bits[0, 0, 1, 0], bits[0, 0, 2, 3] = 0x7FC00001, 0x7FC00002, 0x7FC00003
    x[0, 0, 2, 0] = 5
    out, idx = clpool.max_pool2d_with_indices(x, (3, 4))
    assert idx.item() == 11 and np.isnan(out.item())
    assert out.view(np.uint32).item() == 0x7FC00003  # the NaN itself, as torch returns it
    out, idx = clpool.max_pool2d_with_indices(x, (3, 3), 1)  # windows with one or two NaNs
    assert idx.ravel().tolist() == [4, 11]


def test_neg_inf_inputs():
    x = np.full((1, 1, 4, 4), -INF, np.float32)
    x[0, 0, 3, 3] = -1
    out, idx = clpool.max_pool2d_with_indices(x, 2)
    assert out.ravel().tolist() == [-INF, -INF, -INF, -1]
    assert idx.ravel().tolist() == [0, 2, 8, 15]  # all -inf: the window's first element
    out, idx = clpool.max_pool2d_with_indices(x, 3, 2, 1)  # padding is not read
    assert idx.ravel().tolist() == [0, 1, 4, 15]
    assert out.ravel().tolist() == [-INF, -INF, -INF, -1]
    assert_close(clpool.avg_pool2d(x, 2)[0, 0, 1, 1], -INF)


def test_ties_go_to_the_first_in_row_major_order():
    x = np.array([[[[1, 3, 3], [3, 0, 3], [2, 3, 3]]]], np.float32)
    out, idx = clpool.max_pool2d_with_indices(x, 2, 1)
    assert (out == 3).all() and idx.ravel().tolist() == [1, 1, 3, 5]
    x = np.zeros((1, 1, 2, 2), np.float32)
    x[0, 0, 1, 0] = -0.0
    assert clpool.max_pool2d_with_indices(x, 2)[1].item() == 0


@pytest.mark.parametrize("c", [1, 3])
def test_empty_batch(c):
    x = np.zeros((0, c, 6, 5), np.float32)
    out, idx = clpool.max_pool2d_with_indices(x, 2)
    assert out.shape == idx.shape == (0, c, 3, 2) and out.dtype == np.float32
    assert clpool.max_pool2d(x, 3, 1, 1).shape == (0, c, 6, 5)
    assert clpool.avg_pool2d(x, 2, ceil_mode=True).shape == (0, c, 3, 3)
    assert clpool.adaptive_avg_pool2d(x, (4, None)).shape == (0, c, 4, 5)
    assert clpool.adaptive_avg_pool2d(x, 1).shape == (0, c, 1, 1)


def test_unbatched_input():
    x = np.random.default_rng(4).standard_normal((3, 7, 6)).astype(np.float32)
    out, idx = clpool.max_pool2d_with_indices(x, 3, 2, 1)
    want, want_i = _ref_max(x, 3, 2, 1, 1, False)
    assert out.shape == (3, 4, 3) and same_bits(out, want) and same_bits(idx, want_i)
    assert_close(clpool.avg_pool2d(x, 2, 1), ref.avg_pool2d(x, 2, 1))
    assert_close(clpool.adaptive_avg_pool2d(x, (2, 5)), ref.adaptive_avg_pool2d(x, (2, 5)))
    assert clpool.adaptive_avg_pool2d(x, 1).shape == (3, 1, 1)


def _layouts(x: np.ndarray) -> list[np.ndarray]:
    """x's values in non-contiguous numpy layouts."""
    big = np.zeros((x.shape[0], x.shape[1], 2 * x.shape[2], x.shape[3] + 3), x.dtype)
    big[:, :, ::2, 1:-2] = x
    return [
        big[:, :, ::2, 1:-2],                                  # strided and offset
        np.asfortranarray(x),                                  # column-major
        x.transpose(1, 0, 3, 2).copy().transpose(1, 0, 3, 2),  # permuted strides
        x[:, :, ::-1, ::-1].copy()[:, :, ::-1, ::-1],          # negative strides
    ]


def test_noncontiguous_numpy_input():
    x = np.random.default_rng(5).standard_normal((2, 3, 7, 6)).astype(np.float32)
    want, want_i = clpool.max_pool2d_with_indices(x, 3, 2, 1)
    want_avg = clpool.avg_pool2d(x, 3, 2, 1)
    want_ad = clpool.adaptive_avg_pool2d(x, (3, 4))
    for v in _layouts(x):
        assert not v.flags.c_contiguous and np.array_equal(v, x)
        out, idx = clpool.max_pool2d_with_indices(v, 3, 2, 1)
        assert same_bits(out, want) and same_bits(idx, want_i)
        assert same_bits(clpool.avg_pool2d(v, 3, 2, 1), want_avg)
        assert same_bits(clpool.adaptive_avg_pool2d(v, (3, 4)), want_ad)


def test_device_array_in_device_array_out(queue):
    x = np.random.default_rng(6).standard_normal((2, 3, 7, 6)).astype(np.float32)
    xd = cla.to_device(queue, x)
    out, idx = clpool.max_pool2d_with_indices(xd, 3, 2, 1, index_dtype="int32")
    results = [out, idx, clpool.max_pool2d(xd, 2), clpool.avg_pool2d(xd, 3, 2, 1),
               clpool.adaptive_avg_pool2d(xd, (3, 4)), clpool.adaptive_avg_pool2d(xd, 1)]
    for r in results:
        assert isinstance(r, cla.Array) and r.queue is queue and r.context == queue.context
    want, want_i = _ref_max(x, 3, 2, 1, 1, False)
    assert same_bits(out.get(), want) and same_bits(idx.get(), want_i.astype(np.int32))
    assert same_bits(results[2].get(), clpool.max_pool2d(x, 2))
    assert same_bits(results[3].get(), clpool.avg_pool2d(x, 3, 2, 1))
    assert same_bits(results[4].get(), clpool.adaptive_avg_pool2d(x, (3, 4)))
    assert_close(results[5].get(), ref.adaptive_avg_pool2d(x, 1))
    # unbatched and empty device arrays
    out3 = clpool.avg_pool2d(cla.to_device(queue, x[0]), 2)
    assert isinstance(out3, cla.Array) and out3.shape == (3, 3, 3)
    empty = clpool.max_pool2d(cla.to_device(queue, x[:0]), 2)
    assert isinstance(empty, cla.Array) and empty.shape == (0, 3, 3, 3)


def test_noncontiguous_and_offset_device_arrays(queue):
    big = np.random.default_rng(7).standard_normal((3, 4, 10, 9)).astype(np.float32)
    bd = cla.to_device(queue, big)
    views = {
        "offset": (bd[1:], big[1:]),
        "channels": (bd[:, 1:3], big[:, 1:3]),
        "rows stepped": (bd[:, :, ::2], big[:, :, ::2]),
        "window": (bd[1:, :, 2:9, 1:], big[1:, :, 2:9, 1:]),
        "unbatched offset": (bd[2, 1:], big[2, 1:]),
    }
    for name, (v, host) in views.items():
        out, idx = clpool.max_pool2d_with_indices(v, 3, 2, 1)
        want, want_i = _ref_max(host, 3, 2, 1, 1, False)
        assert same_bits(out.get(), want) and same_bits(idx.get(), want_i), name
        assert_close(clpool.avg_pool2d(v, 2, 1, 1).get(), ref.avg_pool2d(host, 2, 1, 1),
                     context=name)
        assert_close(clpool.adaptive_avg_pool2d(v, (2, 3)).get(),
                     ref.adaptive_avg_pool2d(host, (2, 3)), context=name)
    assert np.array_equal(bd.get(), big)  # the inputs are left alone


@pytest.mark.parametrize("index_dtype", ["int64", "int32", np.int32, np.dtype(np.int64)])
def test_index_dtypes(index_dtype):
    x = np.random.default_rng(8).standard_normal((2, 2, 9, 8)).astype(np.float32)
    out, idx = clpool.max_pool2d_with_indices(x, 3, 2, 1, index_dtype=index_dtype)
    want, want_i = _ref_max(x, 3, 2, 1, 1, False)
    assert idx.dtype == np.dtype(index_dtype)
    assert same_bits(out, want) and np.array_equal(idx, want_i)
    assert clpool.max_pool2d_with_indices(x, 2)[1].dtype == np.int64  # the default


@pytest.mark.parametrize(("dtype", "seed", "tol"), [(np.float64, 9, 1e-12),
                                                    (np.float16, 11, 1e-3)])
def test_float64_and_float16(device, dtype, seed, tol):
    if dtype == np.float16 and not clpool.discovery.has_fp16(device):
        pytest.skip("the suite's device has no native fp16")
    rng = np.random.default_rng(seed)
    for case in window_cases(seed, 20, family="max"):
        x = data(rng, case.shape, dtype, special=True)
        out, idx = clpool.max_pool2d_with_indices(x, *case.max_args)
        want, want_i = _ref_max(x, *case.max_args)
        assert same_bits(out, want) and same_bits(idx, want_i), case
    for case in window_cases(seed + 1, 20, family="avg"):
        x = data(rng, case.shape, dtype)
        out = clpool.avg_pool2d(x, *case.avg_args)
        assert out.dtype == dtype
        assert_close(out, ref.avg_pool2d(x, *case.avg_args), tol, case)
    x = data(rng, (2, 3, 11, 7), dtype)
    for size in [(3, 4), 1, (13, None)]:
        assert_close(clpool.adaptive_avg_pool2d(x, size), ref.adaptive_avg_pool2d(x, size),
                     tol, size)
    if dtype == np.float16:
        # averages are computed in float32: a sum past the float16 range does not saturate
        big = np.full((1, 1, 4, 4), 60000, np.float16)
        assert clpool.avg_pool2d(big, 4).item() == 60000
        assert clpool.adaptive_avg_pool2d(big, 1).item() == 60000


# ---------------------------------------------------------------- the capability probe


def test_float16_rejected_without_fp16(pocl_device, monkeypatch):
    if clpool.discovery.has_fp16(pocl_device):
        pytest.skip("this PoCL device has fp16")
    monkeypatch.delenv("CLPOOL_FP16", raising=False)
    x = np.zeros((1, 1, 4, 4), np.float16)
    builds = programs.builds
    calls = {
        "max_pool2d": lambda: clpool.max_pool2d(x, 2, device=pocl_device),
        "max_pool2d_with_indices":
            lambda: clpool.max_pool2d_with_indices(x, 2, device=pocl_device),
        "avg_pool2d": lambda: clpool.avg_pool2d(x, 2, device=pocl_device),
        "adaptive_avg_pool2d": lambda: clpool.adaptive_avg_pool2d(x, 2, device=pocl_device),
    }
    for label, call in calls.items():
        with pytest.raises(clpool.UnsupportedDtypeError) as info:
            call()
        assert isinstance(info.value, TypeError)
        check_error(info, label, pocl_device, "float16")
        assert "fp16" in info.value.reason
    assert programs.builds == builds  # rejected before any build


def test_float16_storage_opt_in_is_honoured(pocl_device, monkeypatch):
    """CLPOOL_FP16=storage lets float16 past the probe of a device without cl_khr_fp16.

    PoCL cannot build here, so the input is empty: the op passes the probe and returns
    without launching a kernel."""
    monkeypatch.setenv("CLPOOL_FP16", "storage")
    x = np.zeros((0, 2, 4, 4), np.float16)
    builds = programs.builds
    out = clpool.max_pool2d(x, 2, device=pocl_device)
    assert out.shape == (0, 2, 2, 2) and out.dtype == np.float16
    assert clpool.avg_pool2d(x, 2, device=pocl_device).dtype == np.float16
    assert clpool.adaptive_avg_pool2d(x, 3, device=pocl_device).shape == (0, 2, 3, 3)
    assert programs.builds == builds
    monkeypatch.setenv("CLPOOL_FP16", "")
    policy.set_policy(None)
    if not clpool.discovery.has_fp16(pocl_device):
        with pytest.raises(clpool.UnsupportedDtypeError):
            clpool.max_pool2d(x, 2, device=pocl_device)


def test_storage_opt_in_on_a_native_fp16_device(device, monkeypatch):
    monkeypatch.setenv("CLPOOL_FP16", "storage")
    x = np.random.default_rng(13).standard_normal((2, 3, 6, 6)).astype(np.float16)
    out, idx = clpool.max_pool2d_with_indices(x, 3, 2, 1)
    want, want_i = _ref_max(x, 3, 2, 1, 1, False)
    assert same_bits(out, want) and same_bits(idx, want_i)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.bool_, np.complex64,
                                   np.float128 if hasattr(np, "float128") else np.int16])
def test_other_dtypes_rejected(device, dtype):
    x = np.zeros((1, 1, 4, 4), dtype)
    for label, call in [("max_pool2d", lambda: clpool.max_pool2d(x, 2)),
                        ("max_pool2d_with_indices", lambda: clpool.max_pool2d_with_indices(x, 2)),
                        ("avg_pool2d", lambda: clpool.avg_pool2d(x, 2)),
                        ("adaptive_avg_pool2d", lambda: clpool.adaptive_avg_pool2d(x, 2))]:
        with pytest.raises(clpool.UnsupportedDtypeError) as info:
            call()
        assert isinstance(info.value, TypeError) and isinstance(info.value, clpool.PoolError)
        check_error(info, label, device, np.dtype(dtype).name)


# ---------------------------------------------------------------- bad arguments

X = np.zeros((1, 2, 6, 6), np.float32)
BAD = [
    ("max_pool2d", lambda: clpool.max_pool2d(X, 0)),
    ("max_pool2d", lambda: clpool.max_pool2d(X, (2, 0))),
    ("max_pool2d", lambda: clpool.max_pool2d(X, -1)),
    ("max_pool2d", lambda: clpool.max_pool2d(X, 2, 0)),
    ("max_pool2d", lambda: clpool.max_pool2d(X, 2, (1, -1))),
    ("max_pool2d", lambda: clpool.max_pool2d(X, 2, 1, 0, 0)),
    ("max_pool2d", lambda: clpool.max_pool2d(X, 2, 1, -1)),
    ("max_pool2d", lambda: clpool.max_pool2d(X, 3, 1, 2)),  # p > ((k-1)*d+1)//2
    ("max_pool2d", lambda: clpool.max_pool2d(X, 7)),  # output size < 1
    ("max_pool2d", lambda: clpool.max_pool2d(X, 3, 1, 0, 3)),  # dilated window too big
    ("max_pool2d", lambda: clpool.max_pool2d(X, (1, 2, 3))),
    ("max_pool2d", lambda: clpool.max_pool2d(X, "a")),
    ("max_pool2d", lambda: clpool.max_pool2d(X, 2.5)),
    ("max_pool2d", lambda: clpool.max_pool2d(X, True)),
    ("max_pool2d", lambda: clpool.max_pool2d(X[0, 0], 2)),  # 2-D
    ("max_pool2d", lambda: clpool.max_pool2d(X[None], 2)),  # 5-D
    ("max_pool2d", lambda: clpool.max_pool2d(np.zeros((1, 0, 4, 4), np.float32), 2)),
    ("max_pool2d", lambda: clpool.max_pool2d(np.zeros((1, 1, 0, 4), np.float32), 1)),
    ("max_pool2d_with_indices", lambda: clpool.max_pool2d_with_indices(X, 2, index_dtype="int16")),
    ("max_pool2d_with_indices",
     lambda: clpool.max_pool2d_with_indices(X, 2, index_dtype="float32")),
    ("max_pool2d_with_indices", lambda: clpool.max_pool2d_with_indices(X, 2, index_dtype="nope")),
    ("max_pool2d_with_indices", lambda: clpool.max_pool2d_with_indices(X, 8, 1, 0)),
    ("avg_pool2d", lambda: clpool.avg_pool2d(X, 0)),
    ("avg_pool2d", lambda: clpool.avg_pool2d(X, 2, 0)),
    ("avg_pool2d", lambda: clpool.avg_pool2d(X, 3, 1, 2)),  # p > k//2
    ("avg_pool2d", lambda: clpool.avg_pool2d(X, 2, 1, -1)),
    ("avg_pool2d", lambda: clpool.avg_pool2d(X, 7)),
    ("avg_pool2d", lambda: clpool.avg_pool2d(X, 2, divisor_override=0)),
    ("avg_pool2d", lambda: clpool.avg_pool2d(X[0, 0], 2)),
    ("avg_pool2d", lambda: clpool.avg_pool2d(X, (2, 2, 2))),
    ("adaptive_avg_pool2d", lambda: clpool.adaptive_avg_pool2d(X, -1)),
    ("adaptive_avg_pool2d", lambda: clpool.adaptive_avg_pool2d(X, (2, -3))),
    ("adaptive_avg_pool2d", lambda: clpool.adaptive_avg_pool2d(X, (1, 2, 3))),
    ("adaptive_avg_pool2d", lambda: clpool.adaptive_avg_pool2d(X, "a")),
    ("adaptive_avg_pool2d", lambda: clpool.adaptive_avg_pool2d(X[0, 0], 2)),
    ("adaptive_avg_pool2d", lambda: clpool.adaptive_avg_pool2d(X[None], 2)),
]


@pytest.mark.parametrize(("label", "call"), BAD, ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD)])
def test_bad_arguments(device, label, call):
    check_argument_error(call, label, device)


def test_bad_device_argument():
    with pytest.raises(clpool.PoolArgumentError, match=r"^avg_pool2d kernel failed \(device="):
        clpool.avg_pool2d(X, 2, device="no such device anywhere")
    with pytest.raises(clpool.PoolArgumentError):
        clpool.avg_pool2d(X, 2, device=10_000)


# ---------------------------------------------------------------- large index arithmetic


def _block_mean(x: np.ndarray) -> np.ndarray:
    """Means of 2 x 2 blocks in ceil mode, not counting what lies past the plane."""
    n, c, h, w = x.shape
    padded = np.full((n, c, h + h % 2, w + w % 2), np.nan)
    padded[:, :, :h, :w] = x
    return np.nanmean(padded.reshape(n, c, padded.shape[2] // 2, 2, -1, 2), axis=(3, 5))


def test_tall_wide_and_many_planes_index_correctly():
    """Offsets past what small planes exercise: a tall narrow plane, a wide flat one and
    many planes (the product plane * H * W itself cannot reach 2^31 in this memory budget
    within the suite's time; see test_plane_offsets_past_2_31 for the opt-in check)."""
    for shape in [(1, 1, 200_003, 2), (1, 1, 2, 200_003), (3, 70_001, 2, 2)]:
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)  # exact below 2^24
        h, w = shape[-2:]
        out, idx = clpool.max_pool2d_with_indices(x, 2, ceil_mode=True)
        oh, ow = -(-h // 2), -(-w // 2)
        rows = np.minimum(2 * np.arange(oh) + 1, h - 1)
        cols = np.minimum(2 * np.arange(ow) + 1, w - 1)
        assert same_bits(out, x[:, :, rows][:, :, :, cols]), shape
        assert same_bits(idx[0, 0], (rows[:, None] * w + cols[None, :]).astype(np.int64))
        assert np.array_equal(idx[-1, -1], idx[0, 0])
        avg = clpool.avg_pool2d(x, 2, ceil_mode=True, count_include_pad=False)
        assert_close(avg, _block_mean(x), 1e-6, shape)
        mean = clpool.adaptive_avg_pool2d(x, 1)
        assert_close(mean.ravel(), x.reshape(shape[0] * shape[1], -1).astype(np.float64)
                     .mean(axis=1), 1e-5)


@pytest.mark.skipif(not os.environ.get("CLPOOL_TEST_BIG"),
                    reason="allocates about 10 GiB; set CLPOOL_TEST_BIG=1 to run")
def test_plane_offsets_past_2_31():
    """N*C*H*W > 2^31 float16 elements: the last planes start past 2^31 elements."""
    shape = (1, 65_537, 128, 256)
    x = np.zeros(shape, np.float16)
    x[-1, -1, -1, -1] = 7
    x[-1, -2, 5, 9] = 3
    out = clpool.max_pool2d(x, 2)
    assert out[-1, -1, -1, -1] == 7 and out[-1, -2, 2, 4] == 3
    assert np.count_nonzero(out) == 2


@pytest.mark.skipif(not os.environ.get("CLPOOL_TEST_BIG"),
                    reason="allocates about 9 GiB; set CLPOOL_TEST_BIG=1 to run")
def test_one_plane_past_2_31():
    """One float16 plane of more than 2^31 elements: in-plane offsets and int64 indices past
    2^31 (clpool builds a separate variant for such planes)."""
    h, w = 65_536, 32_769
    x = np.zeros((1, 1, h, w), np.float16)
    x[0, 0, -1, -1] = 7
    x[0, 0, -3, 5] = 3
    out, idx = clpool.max_pool2d_with_indices(x, 8, ceil_mode=True)
    assert out.shape == (1, 1, 8192, 4097)
    assert out[0, 0, -1, -1] == 7 and idx[0, 0, -1, -1] == h * w - 1 > 2**31
    assert out[0, 0, -1, 0] == 3 and idx[0, 0, -1, 0] == (h - 3) * w + 5
    assert np.count_nonzero(out) == 2
    avg = clpool.avg_pool2d(x, 8, ceil_mode=True)
    assert avg[0, 0, -1, -1] == np.float16(7 / 8) and avg[0, 0, -1, 0] == np.float16(3 / 64)


HUGE = [
    ("max_pool2d", lambda: clpool.max_pool2d(X, 2, stride=2**40)),
    ("max_pool2d", lambda: clpool.max_pool2d(X, 1, stride=3, dilation=2**31)),
    ("avg_pool2d", lambda: clpool.avg_pool2d(X, 2, stride=2**31)),
    ("avg_pool2d", lambda: clpool.avg_pool2d(X, 2, divisor_override=2**40)),
    ("adaptive_avg_pool2d", lambda: clpool.adaptive_avg_pool2d(X, 2**31)),
]


@pytest.mark.parametrize(("label", "call"), HUGE, ids=[f"{i}-{b[0]}" for i, b in enumerate(HUGE)])
def test_sizes_past_int32_raise_pool_errors(device, label, call):
    """torch 2.x refuses these too (value cannot be converted to type int without overflow);
    the contract wants clpool's own error, naming the op, device and dtype."""
    with pytest.raises(clpool.PoolError) as info:
        call()
    check_error(info, label, device, "float32")


def test_big_endian_numpy_input_is_read_by_value():
    rng = np.random.default_rng(4100)
    x = data(rng, (2, 3, 7, 6))
    swapped = x.astype(x.dtype.newbyteorder(">"))
    assert same_bits(clpool.max_pool2d(swapped, 3, 2, 1), clpool.max_pool2d(x, 3, 2, 1))
    assert same_bits(clpool.avg_pool2d(swapped, 2), clpool.avg_pool2d(x, 2))


# ---------------------------------------------------------------- 32-bit window arithmetic


@pytest.mark.parametrize("tile", ["1", "2", "8"])
def test_huge_windows_and_strides_on_a_tiny_plane(monkeypatch, tile):
    """Kernel, stride and padding near 2^31 on a 1x1 plane: PyTorch's values, no overflow
    (the divisor, the window extent and the strides of a work-item's rows and columns)."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional  # noqa: N806
    monkeypatch.setenv("CLPOOL_ROWS", tile)
    monkeypatch.setenv("CLPOOL_COLS", tile)
    x = np.array([[[[3.0]]]], np.float32)
    t = torch.from_numpy(x)
    for args in [(46341, 1, 23170), (65536, 1, 32768), (1, 2**30, 0), (2, 2**31 - 1, 1)]:
        assert_close(clpool.avg_pool2d(x, *args), F.avg_pool2d(t, *args).numpy())
    assert same_bits(clpool.max_pool2d(x, (9, 1), 2**31 - 1, (4, 0)), x)
    g = np.ones((1, 1, 1, 1), np.float32)
    assert_close(clpool.avg_pool2d_backward(g, x, 2, 2**31 - 1, 1), np.full_like(x, 0.25))
    _, idx = clpool.max_pool2d_with_indices(x, 2, 2**31 - 1, 1)
    assert same_bits(clpool.max_pool2d_with_indices_backward(g, x, 2, 2**31 - 1, 1, indices=idx), g)


def test_window_arithmetic_past_32_bits_is_an_argument_error(device):
    x = np.array([[[[3.0]]]], np.float32)
    check_argument_error(lambda: clpool.max_pool2d_with_indices(
        x, (2**30 + 1, 1), 1, (2**30, 0), (2, 1)), "max_pool2d_with_indices", device)


def test_int32_indices_refuse_a_plane_they_cannot_address(device):
    x = np.broadcast_to(np.float32(0), (1, 1, 65536, 32769))  # no memory behind it
    check_argument_error(lambda: clpool.max_pool2d_with_indices(x, 2, index_dtype="int32"),
                         "max_pool2d_with_indices", device)


@pytest.mark.parametrize(("label", "call"), [
    ("max_pool2d", lambda: clpool.max_pool2d([[1.0, 2.0], [3.0]], 2)),
    ("max_pool2d", lambda: clpool.max_pool2d(X, 1, stride=np.array([2, 2]))),
    ("max_pool2d", lambda: clpool.max_pool2d(X, 1, ceil_mode=np.array([1, 0]))),
    ("avg_pool2d", lambda: clpool.avg_pool2d(X, 1, count_include_pad="yes")),
    ("avg_pool2d", lambda: clpool.avg_pool2d(X, 1, divisor_override=(3, 5))),
    ("max_pool2d", lambda: clpool.max_pool2d(X, 1, device=True)),
])
def test_odd_arguments_are_argument_errors(label, call):
    with pytest.raises(clpool.PoolArgumentError) as info:
        call()
    assert str(info.value).startswith(f"{label} kernel failed (")
