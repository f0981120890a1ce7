"""The 3-D ops against PyTorch CPU (torch.nn.functional and ATen's backward ops) and
clpool.reference: random sweeps, the edge cases of SPEC's semantics, dtypes, index widths,
unbatched and empty batches, strided device inputs, errors, determinism, and the
clpool.torch functions and modules (gradcheck)."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest
from pool_cases import default_queue, fresh_queue, same_bits, scrambled, wrapped

import clpool
from clpool import policy, pool3d
from clpool import reference as ref
from clpool.errors import PoolArgumentError, UnsupportedDtypeError

torch = pytest.importorskip("torch")
F = torch.nn.functional
aten = torch.ops.aten

DTYPES = [np.float32, np.float64, np.float16]
TOL = {np.float32: 1e-5, np.float64: 1e-12, np.float16: 2e-3}


@pytest.fixture(autouse=True)
def half_storage(monkeypatch: pytest.MonkeyPatch) -> None:
    """float16 runs on any device: stored as half, computed in float32."""
    monkeypatch.setenv("CLPOOL_FP16", "storage")


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a))


def _triple(v: object) -> list[int]:
    return list(v) if isinstance(v, tuple) else [v] * 3


def _window_cases(seed: int, count: int, avg: bool) -> list[tuple]:
    """(shape, kernel_size, stride, padding, dilation, ceil_mode) that torch accepts."""
    rng = np.random.default_rng(seed)
    cases: list[tuple] = []
    while len(cases) < count:
        shape = (int(rng.integers(1, 3)), int(rng.integers(1, 4)),
                 *(int(v) for v in rng.integers(1, 8, 3)))  # fmt: skip
        k = tuple(int(v) for v in rng.integers(1, 4, 3))
        s = tuple(int(v) for v in rng.integers(1, 4, 3))
        p = tuple(int(rng.integers(0, kk // 2 + 1)) for kk in k)
        d = (1, 1, 1) if avg else tuple(int(v) for v in rng.integers(1, 3, 3))
        ceil = bool(rng.integers(0, 2))
        x = torch.zeros(shape)
        try:
            if avg:
                F.avg_pool3d(x, k, s, p, ceil)
            else:
                F.max_pool3d(x, k, s, p, d, ceil)
        except RuntimeError:
            continue
        cases.append((shape, k, s, p, d, ceil))
    return cases


MAX_CASES = _window_cases(1, 24, avg=False)
AVG_CASES = _window_cases(2, 24, avg=True)


def _data(shape: tuple[int, ...], dtype: type, seed: int) -> np.ndarray:
    """Random values with ties (a coarse grid) so that the tie rule counts."""
    rng = np.random.default_rng(seed)
    return (rng.integers(-4, 5, shape) / 2).astype(dtype)


def _max_backward_torch(g, x, k, s, p, d, ceil, indices) -> np.ndarray:
    return aten.max_pool3d_with_indices_backward(
        _t(g), _t(x), _triple(k), _triple(s), _triple(p), _triple(d), ceil, _t(indices)
    ).numpy()


# ---------------------------------------------------------------- max pooling


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(len(MAX_CASES)))
def test_max_pool3d_equals_torch(case, dtype):
    shape, k, s, p, d, ceil = MAX_CASES[case]
    x = _data(shape, dtype, case)
    bits = 32 if case % 2 else 64
    got, idx = clpool.max_pool3d(x, k, s, p, d, ceil, True, index_dtype=f"int{bits}")
    want, want_idx = F.max_pool3d(_t(x), k, s, p, d, ceil, return_indices=True)
    assert idx.dtype == np.dtype(f"int{bits}")
    np.testing.assert_array_equal(got, want.numpy())
    # SPEC: a window that misses every element names index -1 (torch: its start)
    missed = np.isneginf(want.numpy()) & ~np.isneginf(x).any()
    np.testing.assert_array_equal(np.where(missed, -1, want_idx.numpy()), idx)
    np.testing.assert_array_equal(clpool.max_pool3d(x, k, s, p, d, ceil), got)
    g = _data(got.shape, dtype, case + 100)
    grad = clpool.max_pool3d_with_indices_backward(g, x, k, s, p, d, ceil, idx)
    want_grad = _max_backward_torch(g, x, k, s, p, d, ceil, want_idx.numpy())
    np.testing.assert_allclose(grad, want_grad, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("case", range(0, len(MAX_CASES), 3))
def test_max_pool3d_equals_reference(case):
    shape, k, s, p, d, ceil = MAX_CASES[case]
    x = np.random.default_rng(case).standard_normal(shape)
    got, idx = clpool.max_pool3d_with_indices(x, k, s, p, d, ceil)
    want, want_idx = ref.max_pool3d_with_indices(x, k, s, p, d, ceil)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(idx, want_idx)
    g = np.random.default_rng(case + 1).standard_normal(got.shape)
    grad = clpool.max_pool3d_with_indices_backward(g, x, k, s, p, d, ceil, idx)
    np.testing.assert_allclose(
        grad, ref.max_pool3d_with_indices_backward(g, x, idx, k, s, p, d, ceil), rtol=1e-12
    )


def test_max_nan_wins_with_its_index_and_ties_go_to_the_first():
    x = np.zeros((1, 1, 4, 4, 4), np.float32)
    x[0, 0, 1, 1, 1] = x[0, 0, 0, 1, 0] = 5  # a tie: (0, 1, 0) comes first in window order
    x[0, 0, 3, 2, 3] = x[0, 0, 2, 3, 2] = np.nan  # two NaNs: the last in window order wins
    got, idx = clpool.max_pool3d_with_indices(x, 2)
    want, want_idx = F.max_pool3d(_t(x), 2, return_indices=True)
    np.testing.assert_array_equal(got, want.numpy())
    np.testing.assert_array_equal(idx, want_idx.numpy())
    assert idx[0, 0, 0, 0, 0] == 0 * 16 + 1 * 4 + 0
    assert np.isnan(got[0, 0, 1, 1, 1]) and idx[0, 0, 1, 1, 1] == 3 * 16 + 2 * 4 + 3


def test_max_of_a_window_of_minus_inf_names_its_first_element():
    x = np.full((1, 1, 3, 3, 3), -np.inf, np.float32)
    got, idx = clpool.max_pool3d_with_indices(x, 2, 1, 1)
    want, want_idx = F.max_pool3d(_t(x), 2, 1, 1, return_indices=True)
    np.testing.assert_array_equal(got, want.numpy())
    np.testing.assert_array_equal(idx, want_idx.numpy())


def test_a_dilated_window_that_misses_every_element_gives_minus_inf_and_index_minus_1():
    x = np.random.default_rng(0).standard_normal((1, 2, 2, 3, 3)).astype(np.float32)
    got, idx = clpool.max_pool3d_with_indices(x, 2, 1, 1, 3)
    np.testing.assert_array_equal(got, F.max_pool3d(_t(x), 2, 1, 1, 3).numpy())
    assert np.isneginf(got).all() and (idx == -1).all()
    g = np.ones_like(got)
    assert not clpool.max_pool3d_with_indices_backward(g, x, 2, 1, 1, 3, False, idx).any()


def test_max_backward_ignores_indices_that_name_no_element():
    x = np.random.default_rng(0).standard_normal((2, 1, 4, 4, 4)).astype(np.float32)
    _, idx = clpool.max_pool3d_with_indices(x, 2)
    bad = idx.copy()
    bad[0, 0, 0, 0, 0] = -1
    bad[0, 0, 1, 1, 1] = 64  # one past the volume
    bad[1, 0, 0, 0, 1] = -5
    g = np.ones((2, 1, 2, 2, 2), np.float32)
    grad = clpool.max_pool3d_with_indices_backward(g, x, 2, indices=bad)
    keep = (bad >= 0) & (bad < 64)
    np.testing.assert_array_equal(grad, ref.max_pool3d_with_indices_backward(g * keep, x, idx, 2))


def test_max_pool3d_takes_an_input_smaller_than_its_kernel():
    x = np.random.default_rng(0).standard_normal((1, 1, 2, 4, 4)).astype(np.float32)
    np.testing.assert_array_equal(
        clpool.max_pool3d(x, 3, padding=1), F.max_pool3d(_t(x), 3, padding=1).numpy()
    )


# ---------------------------------------------------------------- average pooling


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(len(AVG_CASES)))
def test_avg_pool3d_equals_torch(case, dtype):
    shape, k, s, p, _, ceil = AVG_CASES[case]
    include_pad = case % 2 == 0
    override = 7 if case % 5 == 0 else None
    x = _data(shape, dtype, case)
    got = clpool.avg_pool3d(x, k, s, p, ceil, include_pad, override)
    # torch's float16 average sums in float16: compare with its float32 result, rounded
    xt = _t(x.astype(np.float32) if dtype == np.float16 else x)
    want = F.avg_pool3d(xt, k, s, p, ceil, include_pad, override).numpy().astype(dtype)
    np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype])
    g = _data(got.shape, dtype, case + 100)
    grad = clpool.avg_pool3d_backward(g, x, k, s, p, ceil, include_pad, override)
    gt = _t(g.astype(np.float32) if dtype == np.float16 else g)
    want_grad = aten.avg_pool3d_backward(
        gt, xt, _triple(k), _triple(s), _triple(p), ceil, include_pad, override
    ).numpy()
    np.testing.assert_allclose(grad, want_grad.astype(dtype), rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("case", range(0, len(AVG_CASES), 3))
def test_avg_pool3d_equals_reference(case):
    shape, k, s, p, _, ceil = AVG_CASES[case]
    rng = np.random.default_rng(case)
    x = rng.standard_normal(shape)
    for include_pad, override in ((True, None), (False, None), (False, 5)):
        got = clpool.avg_pool3d(x, k, s, p, ceil, include_pad, override)
        want = ref.avg_pool3d(x, k, s, p, ceil, include_pad, override)
        np.testing.assert_allclose(got, want, rtol=1e-12)
        g = rng.standard_normal(got.shape)
        np.testing.assert_allclose(
            clpool.avg_pool3d_backward(g, x, k, s, p, ceil, include_pad, override),
            ref.avg_pool3d_backward(g, x, k, s, p, ceil, include_pad, override),
            rtol=1e-12,
        )


def test_count_include_pad_divides_by_the_window_clipped_to_the_padded_input():
    x = np.ones((1, 1, 4, 4, 4))
    # ceil mode: the last window overhangs the padded input (starts at 3, spans 3..5 of
    # -1..4): one element, divided by 2 along each axis, not 3
    got = clpool.avg_pool3d(x, 3, 2, 1, True, True)
    np.testing.assert_array_equal(got, F.avg_pool3d(_t(x), 3, 2, 1, True, True).numpy())
    assert got[0, 0, 2, 2, 2] == 1 / 8 and got[0, 0, 0, 0, 0] == 8 / 27


def test_avg_pool3d_refuses_an_input_smaller_than_its_kernel_even_with_padding():
    x = np.ones((1, 1, 2, 4, 4), np.float32)
    with pytest.raises(RuntimeError, match="smaller than kernel"):
        F.avg_pool3d(_t(x), 3, padding=1)
    with pytest.raises(PoolArgumentError, match="avg_pool3d kernel failed.*smaller than"):
        clpool.avg_pool3d(x, 3, padding=1)
    with pytest.raises(PoolArgumentError, match="avg_pool3d_backward kernel failed"):
        clpool.avg_pool3d_backward(np.ones((1, 1, 1, 2, 2), np.float32), x, 3, padding=1)


# ---------------------------------------------------------------- tiles

# Tiles of outputs (forward) or inputs (backward) per work-item, as a GPU plans them (window
# sizes as constants, loops unrolled, the depths of pool3d.DEPTHS), forced odd ones, and
# without constants: (policy, depths per work-item or None).
TILES = [(dict(gpu=True), None), (dict(gpu=True, rows=3, cols=2), 3),
         (dict(specialize=False, rows=2, cols=3), None)]  # fmt: skip


def _all_window_ops(x, g, case, avg):
    """Every windowed 3-D op of `case` on x, the backward ones with gradient g."""
    shape, k, s, p, d, ceil = case
    if avg:
        include, override = shape[0] == 1, 3 if shape[1] == 2 else None
        return [clpool.avg_pool3d(x, k, s, p, ceil, include, override),
                clpool.avg_pool3d_backward(g, x, k, s, p, ceil, include, override)]  # fmt: skip
    v, i = clpool.max_pool3d_with_indices(x, k, s, p, d, ceil)
    return [v, i, clpool.max_pool3d(x, k, s, p, d, ceil),
            clpool.max_pool3d_with_indices_backward(g, x, k, s, p, d, ceil, i)]  # fmt: skip


@pytest.mark.parametrize("tile", range(len(TILES)))
@pytest.mark.parametrize("case", range(0, 24, 3))
def test_tiles_give_the_results_of_one_output_per_work_item_bit_for_bit(case, tile, monkeypatch):
    """(rounding included: random sums, so that an order of summation would show)"""
    tiled, depths = TILES[tile]
    for name in pool3d.DEPTHS:
        monkeypatch.setitem(pool3d.DEPTHS, name, depths or pool3d.DEPTHS[name])
    for avg, cases in ((False, MAX_CASES), (True, AVG_CASES)):
        shape, k, s, p, d, ceil = cases[case]
        x = _data(shape, np.float32, case) + np.random.default_rng(case).random(shape, np.float32)
        out = clpool.avg_pool3d(x, k, s, p, ceil) if avg else clpool.max_pool3d(x, k, s, p, d, ceil)
        g = np.random.default_rng(case + 1).standard_normal(out.shape).astype(np.float32)
        with policy.use(gpu=False, rows=1, cols=1, per_plane=False):
            want = _all_window_ops(x, g, cases[case], avg)
        with policy.use(**tiled):
            got = _all_window_ops(x, g, cases[case], avg)
        for a, b in zip(got, want, strict=True):
            assert a.tobytes() == b.tobytes()


# Windows whose tiles start at multiples of four columns of rows of a multiple of four, as
# a GPU plans them: (shape, kernel_size, stride, padding, dilation, ceil_mode, tile columns,
# dtype). Few: a CPU driver takes seconds to build each unrolled 3-D max program.
VECTOR_CASES = [((2, 3, 5, 6, 8), 3, 2, 1, 1, False, 2, "float32"),
                ((1, 2, 3, 4, 8), 3, 1, 1, 1, False, 4, "float32"),
                ((1, 3, 6, 4, 12), 3, (1, 2, 2), 1, 2, True, 2, "float32"),
                ((1, 2, 3, 3, 20), (2, 3, 5), (1, 2, 4), (1, 1, 2), 1, True, 1, "float32"),
                ((2, 2, 3, 5, 16), 3, 2, 1, 1, True, 4, "bfloat16"),
                ((1, 1, 4, 4, 8), 3, 2, 0, 1, True, 2, "bfloat16")]  # fmt: skip


@pytest.mark.parametrize("case", VECTOR_CASES)
def test_forward_tiles_load_rows_as_vectors_and_give_the_same_bits(case, build_options):
    """The forwards of a GPU's tiles load rows as vectors (-DCLPOOL_VEC4; bfloat16 in eights,
    -DCLPOOL_VEC8, where the row and the tile's start allow), store rows 2 or 4 at a time
    (-DCLPOOL_PACK) where the row and the tile allow, and give the bits of a
    work-item per output without vectors: max pooling of ties with a few NaN and -inf, the
    average of random values (an order of summation would show)."""
    shape, k, s, p, d, ceil, cols, dtype = case
    bf16 = dtype == "bfloat16"
    dt = np.dtype(pytest.importorskip("ml_dtypes").bfloat16) if bf16 else np.dtype(dtype)
    x = _data(shape, np.float32, cols)
    noisy = (x + np.random.default_rng(cols).random(shape, np.float32)).astype(dt)
    x.reshape(-1)[::41] = np.nan
    x.reshape(-1)[5::37] = -np.inf
    x = x.astype(dt)

    def ops():
        v, i = clpool.max_pool3d_with_indices(x, k, s, p, d, ceil)
        return [v, i, clpool.max_pool3d(x, k, s, p, d, ceil),
                clpool.avg_pool3d(noisy, k, s, p, ceil)]  # fmt: skip

    with policy.use(gpu=False, rows=1, cols=1, per_plane=False):
        want = ops()
    build_options.clear()
    with policy.use(gpu=True, per_plane=False, rows=2, cols=cols):
        got = ops()
    vectors = [o for o in build_options if "-DCLPOOL_VEC4" in o]
    assert len(vectors) == 3  # max with indices, max values, average
    eights = sum("-DCLPOOL_VEC8" in o for o in vectors)
    assert eights == (3 if bf16 and cols * _triple(s)[2] % 8 == 0 else 0)
    # rows stored 2 or 4 at a time where that divides the tile's columns and the row
    packs = [next((n for n in (4, 2) if cols % n == 0 and a.shape[-1] % n == 0), None)
             for a in (got[0], got[2], got[3])]  # fmt: skip
    assert [next((n for n in (4, 2) if f"-DCLPOOL_PACK={n}" in o), None) for o in vectors] == packs
    for a, b in zip(got, want, strict=True):
        assert same_bits(a, b)


# ---------------------------------------------------------------- one work-item per volume


# (max case, average case): random ones, and windows overlapping along every axis (27 of
# them reach an element: an order of summation shows).
PER_VOLUME = [(MAX_CASES[i], AVG_CASES[i]) for i in range(0, 24, 2)] + [
    (((2, 3, 6, 7, 9), 3, 1, 1, (1, 2, 1), True), ((2, 3, 6, 7, 9), 3, 1, 1, 1, True))
]


# Rows wide enough for 16 windows of a row at once (the CPU kernels' vectors), by stride,
# dilation and padding: (shape, kernel_size, stride, padding, dilation, ceil_mode).
WIDE_ROWS = [((1, 2, 4, 5, 40), 3, 2, 1, 1, False), ((2, 1, 3, 4, 37), 3, 1, 1, 1, True),
             ((1, 2, 5, 3, 50), (2, 3, 3), (2, 1, 3), (1, 1, 0), (1, 1, 1), True),
             ((1, 1, 4, 4, 45), (3, 2, 3), (1, 1, 2), (1, 0, 1), (2, 1, 2), False)]  # fmt: skip


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", range(len(PER_VOLUME) + len(WIDE_ROWS)))
def test_the_backward_per_volume_equals_the_gather_bit_for_bit(case, dtype, launched):
    """max_pool3d_backward_plane and avg_pool3d_backward_plane against the gathers of one
    input element per work-item (random gradients, so that the order of summation would
    show); max with its indices, and with indices outside their windows (next to their
    rows and depths too), repeated, and outside the volume; rows of 16 windows or more,
    which the max backward checks 16 at a time (their last 16 overlap those before)."""
    rng = np.random.default_rng(case)
    max_case, avg_case = (PER_VOLUME + [(w, w) for w in WIDE_ROWS])[case]
    shape, k, s, p, d, ceil = max_case
    x = (_data(shape, dtype, case) + rng.random(shape)).astype(dtype)
    _, i = clpool.max_pool3d_with_indices(x, k, s, p, d, ceil)
    g = rng.standard_normal(i.shape).astype(dtype)
    bad = scrambled(i, int(np.prod(shape[2:])), rng), wrapped(i, shape[2:], k, s, p, d, rng)
    window = (k, s, p, d, ceil)
    runs = [
        ("max_pool3d_backward", lambda j: clpool.max_pool3d_with_indices_backward(
            g, x, *window, j), index) for index in (i, *bad)
    ]  # fmt: skip
    shape, k, s, p, _, ceil = avg_case
    y = (_data(shape, dtype, case) + rng.random(shape)).astype(dtype)
    include, override = bool(case % 2), (None, 3, 7)[case % 3]
    ga = rng.standard_normal(clpool.avg_pool3d(y, k, s, p, ceil).shape).astype(dtype)
    runs.append(("avg_pool3d_backward", lambda _: clpool.avg_pool3d_backward(
        ga, y, k, s, p, ceil, include, override), None))  # fmt: skip
    for name, run, arg in runs:
        with policy.use(per_plane=False):
            want = run(arg)
        assert launched[-1][0] == name
        with policy.use(per_plane=True):
            got = run(arg)
        assert launched[-1][0] == f"{name}_plane"
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", range(len(PER_VOLUME) + len(WIDE_ROWS)))
def test_the_forward_per_plane_equals_a_work_item_per_output_bit_for_bit(case, dtype, launched):
    """max_pool3d_forward_plane and avg_pool3d_forward_plane (a work-item per output plane,
    16 windows of a row at a time where they fit) against the tiles' kernels: max of ties
    with NaN and -inf (the first of ties and the last NaN keep their index), values only
    and with indices; the average of random values (an order of summation would show)."""
    rng = np.random.default_rng(case)
    max_case, avg_case = (PER_VOLUME + [(w, w) for w in WIDE_ROWS])[case]
    shape, *window = max_case
    x = _data(shape, dtype, case)
    x.reshape(-1)[rng.random(x.size) < 0.05] = np.nan
    x.reshape(-1)[rng.random(x.size) < 0.05] = -np.inf
    runs = [("max_pool3d_forward", lambda: clpool.max_pool3d_with_indices(x, *window)),
            ("max_pool3d_forward", lambda: [clpool.max_pool3d(x, *window)])]  # fmt: skip
    shape, k, s, p, _, ceil = avg_case
    y = (_data(shape, dtype, case) + rng.random(shape)).astype(dtype)
    avg = (k, s, p, ceil, bool(case % 2), (None, 3, 7)[case % 3])
    runs.append(("avg_pool3d_forward", lambda: [clpool.avg_pool3d(y, *avg)]))
    for name, run in runs:
        with policy.use(per_plane=False):
            want = run()
        assert launched[-1][0] == name
        with policy.use(per_plane=True):
            got = run()
        assert launched[-1][0] == f"{name}_plane"
        for a, b in zip(got, want, strict=True):
            assert a.tobytes() == b.tobytes()


# ---------------------------------------------------------------- adaptive average pooling

ADAPTIVE = [((2, 3, 5, 7, 6), (2, 3, 4)), ((1, 2, 4, 4, 4), 1), ((1, 1, 3, 5, 7), (5, 7, 9)),
            ((2, 1, 8, 6, 9), (None, 4, 2)), ((1, 2, 7, 3, 5), (3, 3, 3))]  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, size", ADAPTIVE)
def test_adaptive_avg_pool3d_equals_torch_and_reference(shape, size, dtype):
    x = _data(shape, dtype, 0)
    got = clpool.adaptive_avg_pool3d(x, size)
    xt = _t(x.astype(np.float32) if dtype == np.float16 else x)
    want = F.adaptive_avg_pool3d(xt, size).numpy().astype(dtype)
    np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype])
    g = _data(got.shape, dtype, 1)
    grad = clpool.adaptive_avg_pool3d_backward(g, x)
    gt = _t(g.astype(np.float32) if dtype == np.float16 else g)
    want_grad = aten._adaptive_avg_pool3d_backward(gt, xt).numpy().astype(dtype)
    np.testing.assert_allclose(grad, want_grad, rtol=TOL[dtype], atol=TOL[dtype])
    if dtype == np.float64:
        np.testing.assert_allclose(got, ref.adaptive_avg_pool3d(x, size), rtol=1e-12)
        np.testing.assert_allclose(grad, ref.adaptive_avg_pool3d_backward(g, x), rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adaptive_avg_pool3d_sums_each_cell_in_atens_order(dtype):
    """ATen's bits: each cell summed by depth, row and column, then divided by its depth,
    rows and columns, over cells that overlap, upsampling (cells of one column) and long
    rows; a NaN and an infinity stay in their own cells. Values off a grid, so that
    another order of additions rounds otherwise."""
    cases = [*ADAPTIVE, ((2, 3, 4, 5, 30), (3, 2, 11)), ((1, 2, 6, 9, 40), (2, 3, 5))]
    rng = np.random.default_rng(30)
    for shape, size in cases:
        x = rng.standard_normal(shape).astype(dtype)
        x[0, 0, 0, 0, -1], x[-1, -1, -1, -1, 0] = np.nan, np.inf
        assert same_bits(clpool.adaptive_avg_pool3d(x, size),
                         F.adaptive_avg_pool3d(_t(x), size).numpy()), (shape, size)  # fmt: skip


# an axis upsampled: a GPU's backward gathers
UPSAMPLING = [((1, 1, 3, 5, 7), (5, 7, 9)), ((2, 2, 4, 6, 5), (3, 7, 2)),
              ((1, 2, 7, 5, 3), (3, 2, 4))]  # fmt: skip


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [1, 3, 8])
def test_a_gpus_adaptive_average_backward_takes_rows_of_a_column(rows, dtype, launch_sizes):
    """On a GPU the contiguous backward, where an axis upsamples, takes `rows` rows of a
    column per work-item, each cell's share worked out once for the rows it holds: ATen's
    bits (the same divisions in the same order per element) over cells that overlap, a
    last tile cut short; the launch covers H by tiles of rows."""
    for seed, (shape, size) in enumerate(UPSAMPLING):
        x = _data(shape, dtype, 10 + seed)
        g = _data(F.adaptive_avg_pool3d(_t(x), size).shape, dtype, 20 + seed)
        launch_sizes.clear()
        with policy.use(gpu=True, per_plane=False, rows=rows):
            got = clpool.adaptive_avg_pool3d_backward(g, x)
        assert same_bits(got, aten._adaptive_avg_pool3d_backward(_t(g), _t(x)).numpy()), shape
        assert launch_sizes[-1][1] >= -(-shape[3] // rows) > launch_sizes[-1][1] // 2, shape


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_gpus_adaptive_average_backward_takes_slabs_where_no_axis_upsamples(dtype, launched):
    """On a GPU, where no axis upsamples, a work-group per slab of rows stores in each row
    the sum of shares of its kind (in the cells before along D and H, or not): ATen's bits
    over cells that overlap on every axis, equal cells, one cell, -0 gradients, and rows
    wider than a work-group."""
    cases = [c for c in ADAPTIVE if c not in UPSAMPLING and c[0][-3:] != (3, 5, 7)]
    cases += [((2, 3, 16, 20, 21), (7, 6, 5)), ((1, 2, 5, 7, 300), (3, 4, 7)),
              ((3, 16, 56, 56), 7), ((1, 2, 4, 4, 4), 4)]  # fmt: skip
    rng = np.random.default_rng(31)
    for shape, size in cases:
        x = rng.standard_normal(shape).astype(dtype)
        g = rng.standard_normal(F.adaptive_avg_pool3d(_t(x), size).shape).astype(dtype)
        g.reshape(-1)[::5] = -0.0
        launched.clear()
        with policy.use(gpu=True, per_plane=False):
            got = clpool.adaptive_avg_pool3d_backward(g, x)
        assert same_bits(got, aten._adaptive_avg_pool3d_backward(_t(g), _t(x)).numpy()), shape
        assert [name for name, _ in launched] == ["adaptive_avg_pool3d_slab"], shape


def test_adaptive_avg_pool3d_along_an_axis_too_long_for_32_bit_cell_bounds():
    x = _data((1, 1, 2, 1, 50_000), np.float32, 0)
    for size in ((1, 1, 7), (3, 1, 49_999)):
        got = clpool.adaptive_avg_pool3d(x, size)
        np.testing.assert_allclose(got, F.adaptive_avg_pool3d(_t(x), size).numpy(), rtol=1e-5)
        g = _data(got.shape, np.float32, 1)
        np.testing.assert_allclose(
            clpool.adaptive_avg_pool3d_backward(g, x),
            aten._adaptive_avg_pool3d_backward(_t(g), _t(x)).numpy(),
            rtol=1e-5,
            atol=1e-6,
        )


@pytest.mark.parametrize("per_plane", [False, True])
def test_adaptive_avg_pool3d_to_an_empty_output(per_plane):
    """An output of no cells; its backward, per volume too, clears a gradient of NaN."""
    x = np.ones((1, 2, 3, 4, 5), np.float32)
    got = clpool.adaptive_avg_pool3d(x, (0, 2, 2))
    assert got.shape == F.adaptive_avg_pool3d(_t(x), (0, 2, 2)).shape == (1, 2, 0, 2, 2)
    grad = cla.to_device(default_queue(), np.full(x.shape, np.nan, np.float32))
    with policy.use(per_plane=per_plane):
        clpool.adaptive_avg_pool3d_backward(got, x, out=grad)
    assert not grad.get().any()


# ---------------------------------------------------------------- shapes, layouts, errors


def _all_ops(x: np.ndarray) -> list[np.ndarray]:
    """Every 3-D op on x (k 2, s 2 and the like), forward and backward."""
    v, i = clpool.max_pool3d_with_indices(x, 2, 1, 1)
    a = clpool.avg_pool3d(x, 2, 1, 1, False, False)
    m = clpool.adaptive_avg_pool3d(x, (2, 3, 2))
    return [v, i, a, m,
            clpool.max_pool3d_with_indices_backward(v, x, 2, 1, 1, indices=i),
            clpool.avg_pool3d_backward(a, x, 2, 1, 1, False, False),
            clpool.adaptive_avg_pool3d_backward(m, x)]  # fmt: skip


def test_an_unbatched_input_gives_unbatched_results():
    x = np.random.default_rng(0).standard_normal((3, 4, 5, 6)).astype(np.float32)
    for got, want in zip(_all_ops(x), _all_ops(x[None]), strict=True):
        np.testing.assert_array_equal(got, want[0])


def test_an_empty_batch_gives_empty_results():
    x = np.ones((0, 2, 4, 5, 6), np.float32)
    shapes = [r.shape for r in _all_ops(x)]
    xt = _t(x)
    assert shapes[0] == tuple(F.max_pool3d(xt, 2, 1, 1).shape)
    assert shapes[2] == tuple(F.avg_pool3d(xt, 2, 1, 1).shape)
    assert shapes[3] == (0, 2, 2, 3, 2) and shapes[4:] == [x.shape] * 3


def test_strided_device_inputs_are_copied(device):
    queue = fresh_queue(device)
    rng = np.random.default_rng(0)
    base = rng.standard_normal((3, 4, 7, 6, 9)).astype(np.float32)
    x = cla.to_device(queue, base)
    strided = cla.Array(queue, (4, 3, 7, 9, 6), np.float32, data=x.base_data,
                        strides=tuple(base.strides[a] for a in (1, 0, 2, 4, 3)))  # fmt: skip
    want = base.transpose(1, 0, 2, 4, 3)
    assert not strided.flags.c_contiguous
    got, idx = clpool.max_pool3d_with_indices(strided, 3, 2, 1)
    want_v, want_i = clpool.max_pool3d_with_indices(want, 3, 2, 1)
    np.testing.assert_array_equal(got.get(), want_v)
    np.testing.assert_array_equal(idx.get(), want_i)
    np.testing.assert_array_equal(
        clpool.avg_pool3d(strided, 3, 2, 1).get(), clpool.avg_pool3d(want, 3, 2, 1)
    )
    np.testing.assert_array_equal(
        clpool.adaptive_avg_pool3d(strided, 2).get(), clpool.adaptive_avg_pool3d(want, 2)
    )


def test_queue_and_out_as_the_2d_ops_take_them(device):
    queue = fresh_queue(device)
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 5, 6)).astype(np.float32)
    got = clpool.avg_pool3d(x, 2, queue=queue)
    assert isinstance(got, cla.Array) and got.queue is queue
    np.testing.assert_array_equal(got.get(), clpool.avg_pool3d(x, 2))
    values = cla.empty(queue, (1, 2, 2, 2, 3), np.float32)
    indices = cla.empty(queue, (1, 2, 2, 2, 3), np.int32)
    pair = clpool.max_pool3d_with_indices(x, 2, index_dtype="int32", out=(values, indices))
    assert pair[0] is values and pair[1] is indices
    want, want_i = clpool.max_pool3d_with_indices(x, 2, index_dtype="int32")
    np.testing.assert_array_equal(values.get(), want)
    np.testing.assert_array_equal(indices.get(), want_i)
    with pytest.raises(PoolArgumentError, match="^max_pool3d kernel failed"):
        clpool.max_pool3d(x, 2, out=cla.empty(queue, (1, 2, 2, 2, 2), np.float32))


def test_a_volume_of_2_31_elements_builds_with_64_bit_offsets():
    class Options:
        options: tuple[str, ...] = ()

    small, large, reach = Options(), Options(), Options()
    pool3d._volumes(small, (1023, 1024, 2048), (1, 1, 1), (1, 3, 3))  # 2^31 - 2^21 elements
    pool3d._volumes(large, (1, 1, 1), (1024, 1024, 2048))  # an output of 2^31
    # a last window's 3 depths reaching 2 past the volume: a depth start of 2^31 (max
    # backward)
    pool3d._volumes(reach, (1023, 1024, 2048), (1, 1, 1), (3, 1, 1))
    assert small.options == () and large.options == reach.options == ("-DCLPOOL_LARGE_PLANE",)


BAD = [
    ("max_pool3d", lambda x: clpool.max_pool3d(x, 0), PoolArgumentError),
    ("max_pool3d", lambda x: clpool.max_pool3d(x, 3, padding=2, dilation=2), PoolArgumentError),
    ("max_pool3d", lambda x: clpool.max_pool3d(x, (2, 2)), PoolArgumentError),
    ("max_pool3d", lambda x: clpool.max_pool3d(x, 9), PoolArgumentError),
    ("max_pool3d", lambda x: clpool.max_pool3d(x[0, 0], 2), PoolArgumentError),
    ("max_pool3d", lambda x: clpool.max_pool3d(x[:, :0], 2), PoolArgumentError),
    ("max_pool3d_with_indices",
     lambda x: clpool.max_pool3d_with_indices(x, 2, index_dtype="int16"), PoolArgumentError),
    ("max_pool3d", lambda x: clpool.max_pool3d(x.astype(np.int32), 2), UnsupportedDtypeError),
    ("avg_pool3d", lambda x: clpool.avg_pool3d(x, 2, divisor_override=0), PoolArgumentError),
    ("avg_pool3d", lambda x: clpool.avg_pool3d(x, 2, stride=(1, 0, 1)), PoolArgumentError),
    ("adaptive_avg_pool3d", lambda x: clpool.adaptive_avg_pool3d(x, (2, -1, 2)),
     PoolArgumentError),
    ("max_pool3d_with_indices_backward",
     lambda x: clpool.max_pool3d_with_indices_backward(x[..., :2, :2, :2], x, 2),
     PoolArgumentError),
    ("max_pool3d_with_indices_backward",
     lambda x: clpool.max_pool3d_with_indices_backward(
         x[..., :2, :2, :2], x, 2, indices=np.zeros((1, 2, 2, 2, 2), np.float32)),
     PoolArgumentError),
    ("max_pool3d_with_indices_backward",
     lambda x: clpool.max_pool3d_with_indices_backward(
         x[..., :3, :2, :2], x, 2, indices=np.zeros((1, 2, 3, 2, 2), np.int64)),
     PoolArgumentError),
    ("avg_pool3d_backward", lambda x: clpool.avg_pool3d_backward(x, x, 2), PoolArgumentError),
    ("avg_pool3d_backward",
     lambda x: clpool.avg_pool3d_backward(x[..., :2, :2, :2].astype(np.float64), x, 2),
     PoolArgumentError),
    ("adaptive_avg_pool3d_backward",
     lambda x: clpool.adaptive_avg_pool3d_backward(x[0], x), PoolArgumentError),
    ("adaptive_avg_pool3d_backward",
     lambda x: clpool.adaptive_avg_pool3d_backward(x[:, :1], x), PoolArgumentError),
]  # fmt: skip


@pytest.mark.parametrize("label, call, error", BAD)
def test_errors_name_the_op_and_have_their_type(label, call, error):
    x = np.ones((1, 2, 4, 5, 5), np.float32)
    with pytest.raises(error, match=rf"^{label} kernel failed \(device="):
        call(x)


def test_errors_torch_refuses_too():
    x = torch.ones((1, 2, 4, 5, 5))
    for call in (lambda: F.max_pool3d(x, 0), lambda: F.max_pool3d(x, 3, padding=2, dilation=2),
                 lambda: F.max_pool3d(x, 9), lambda: F.avg_pool3d(x, 2, divisor_override=0),
                 lambda: F.max_pool3d(x[:, :0], 2)):  # fmt: skip
        with pytest.raises(RuntimeError):
            call()


def test_each_backward_is_bit_identical_run_to_run():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 9, 8, 7)).astype(np.float32)
    v, i = clpool.max_pool3d_with_indices(x, 3, 1, 1)
    a = clpool.avg_pool3d(x, 3, 1, 1)
    m = clpool.adaptive_avg_pool3d(x, (4, 5, 3))
    g, ga, gm = (rng.standard_normal(r.shape).astype(np.float32) for r in (v, a, m))
    runs = [
        lambda: clpool.max_pool3d_with_indices_backward(g, x, 3, 1, 1, indices=i),
        lambda: clpool.avg_pool3d_backward(ga, x, 3, 1, 1),
        lambda: clpool.adaptive_avg_pool3d_backward(gm, x),
    ]
    for run in runs:
        first = run()
        for _ in range(3):
            assert first.tobytes() == run().tobytes()


# ---------------------------------------------------------------- clpool.torch

ct = pytest.importorskip("clpool.torch")


def test_torch_functions_and_modules_equal_torch():
    x = torch.randn(2, 3, 6, 7, 8, dtype=torch.float64)
    cases = [
        (ct.MaxPool3d(3, 2, 1, dilation=1, ceil_mode=True),
         torch.nn.MaxPool3d(3, 2, 1, ceil_mode=True)),
        (ct.AvgPool3d((2, 3, 2), 1, (1, 1, 0), False, False, 5),
         torch.nn.AvgPool3d((2, 3, 2), 1, (1, 1, 0), False, False, 5)),
        (ct.AdaptiveAvgPool3d((3, None, 2)), torch.nn.AdaptiveAvgPool3d((3, None, 2))),
    ]  # fmt: skip
    for mine, theirs in cases:
        assert repr(mine) == repr(theirs)
        assert vars(mine).keys() >= {k for k in vars(theirs) if not k.startswith("_")}
        a = x.clone().requires_grad_()
        b = x.clone().requires_grad_()
        got, want = mine(a), theirs(b)
        torch.testing.assert_close(got, want)
        g = torch.randn_like(got)
        got.backward(g)
        want.backward(g)
        torch.testing.assert_close(a.grad, b.grad)
    out, idx = ct.max_pool3d(x, 2, return_indices=True)
    want_out, want_idx = F.max_pool3d(x, 2, return_indices=True)
    assert torch.equal(out, want_out) and torch.equal(idx, want_idx)
    assert repr(ct.MaxPool3d(2)) == repr(torch.nn.MaxPool3d(2))


def test_torch_gradcheck_in_float64():
    x = torch.randn(1, 2, 4, 5, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: ct.max_pool3d(t, 2, 1, 1), (x,))
    assert torch.autograd.gradcheck(lambda t: ct.avg_pool3d(t, 3, 2, 1, True, False), (x,))
    assert torch.autograd.gradcheck(lambda t: ct.adaptive_avg_pool3d(t, (3, 2, 3)), (x,))
