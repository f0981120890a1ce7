"""The float64 reference (clpool.reference) against hand-worked examples and against torch."""

from __future__ import annotations

import numpy as np
import pytest
from pool_cases import adaptive_cases, assert_close, data, window_cases

from clpool import reference as ref

NAN, INF = np.nan, np.inf


# ---------------------------------------------------------------- hand-worked examples


def test_max_of_arange():
    x = np.arange(16.0).reshape(1, 1, 4, 4)
    out, idx = ref.max_pool2d_with_indices(x, 2)
    assert out.tolist() == [[[[5, 7], [13, 15]]]]
    assert idx.tolist() == [[[[5, 7], [13, 15]]]]
    assert out.dtype == np.float64 and idx.dtype == np.int64


def test_max_rules_nan_ties_neg_inf():
    x = np.array([[[1, NAN, 3, NAN],  # the last NaN wins
                   [2, 2, 0, 2],      # ties: the first
                   [-INF, -INF, 5, -INF],  # all -inf: the first element and -inf
                   [NAN, 9, 9, 1]]])  # a single NaN beats larger values
    out, idx = ref.max_pool2d_with_indices(x, (1, 4))
    assert np.array_equal(out[0, :, 0], [NAN, 2, 5, NAN], equal_nan=True)
    assert idx[0, :, 0].tolist() == [3, 4, 10, 12]
    out, idx = ref.max_pool2d_with_indices(np.full((1, 2, 2), -INF), 2)
    assert out.item() == -INF and idx.item() == 0


def test_padding_is_never_read_by_max():
    x = -np.ones((1, 1, 2, 2))
    out, idx = ref.max_pool2d_with_indices(x, 3, stride=1, padding=1)
    assert (out == -1).all() and idx.tolist() == [[[[0, 0], [0, 0]]]]


def test_window_missing_the_plane_gives_neg_inf_and_minus_one():
    # k=2, d=5, p=1 on H=W=3 in ceil mode: the one window's taps are -1 and 4, both outside.
    out, idx = ref.max_pool2d_with_indices(np.zeros((1, 1, 3, 3)), 2, 2, 1, 5, True)
    assert out.shape == (1, 1, 1, 1) and out.item() == -INF and idx.item() == -1
    # missing only the columns: still empty
    out, idx = ref.max_pool2d_with_indices(np.zeros((1, 3, 3)), (1, 2), 2, (0, 1), 5, True)
    assert (out == -INF).all() and (idx == -1).all()


@pytest.mark.parametrize(("size", "k", "s", "p", "d", "ceil", "want"), [
    (5, 2, 2, 0, 1, False, 2), (5, 2, 2, 0, 1, True, 3), (4, 2, 2, 1, 1, True, 3),
    (5, 3, 2, 1, 1, True, 3), (6, 3, 3, 1, 1, True, 3),  # (3-1)*3 = 6 >= 6 + 1? no: kept
    (3, 2, 2, 1, 1, True, 2),  # ceil gives 3 but the third window starts in the padding
    (5, 3, 1, 0, 2, False, 1), (4, 3, 1, 0, 2, False, 0),
])
def test_pooled_size(size, k, s, p, d, ceil, want):
    assert ref.pooled_size(size, k, s, p, d, ceil) == want


def test_avg_count_include_pad_divisor_in_ceil_overhang():
    # H=W=5, k=3, s=2, p=1, ceil: 3 windows per axis starting at -1, 1, 3. The last ends at
    # 6 = H + p (clipped from 6), so with padding counted its divisor per axis is 3: 9 for
    # the corner. The first spans rows -1..1: 3 rows counted, 2 real.
    x = np.ones((1, 1, 5, 5))
    out = ref.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=True)
    assert out.shape == (1, 1, 3, 3)
    np.testing.assert_allclose(out[0, 0], [[4 / 9, 6 / 9, 4 / 9], [6 / 9, 1, 6 / 9],
                                           [4 / 9, 6 / 9, 4 / 9]])
    # H=W=4, k=3, s=2, p=1, ceil: windows start at -1, 1, 3; the last covers rows 3..5,
    # clipped to H + p = 5: rows 3, 4 -> divisor 2 per axis, not 3.
    out = ref.avg_pool2d(np.ones((1, 1, 4, 4)), 3, 2, 1, ceil_mode=True)
    np.testing.assert_allclose(out[0, 0, 2], [2 / 6, 3 / 6, 1 / 4])
    out = ref.avg_pool2d(np.ones((1, 1, 4, 4)), 3, 2, 1, ceil_mode=True,
                         count_include_pad=False)
    assert (out == 1).all()
    out = ref.avg_pool2d(np.ones((1, 1, 4, 4)), 3, 2, 1, ceil_mode=True, divisor_override=2)
    np.testing.assert_allclose(out[0, 0, 0], [4 / 2, 6 / 2, 2 / 2])


def test_adaptive_cells():
    x = np.arange(5.0).reshape(1, 1, 5)  # H=1, W=5 -> 3 cells: [0,2) [1,4) [3,5)
    np.testing.assert_allclose(ref.adaptive_avg_pool2d(x, (1, 3))[0, 0], [0.5, 2, 3.5])
    up = ref.adaptive_avg_pool2d(np.arange(2.0).reshape(1, 1, 2), (1, 4))
    np.testing.assert_allclose(up[0, 0], [0, 0, 1, 1])
    assert ref.adaptive_avg_pool2d(np.zeros((2, 3, 4, 5)), (None, 2)).shape == (2, 3, 4, 2)
    assert ref.adaptive_avg_pool2d(np.zeros((3, 4, 5)), 1).shape == (3, 1, 1)


def test_max_backward_scatters_and_ignores_outside_indices():
    x = np.zeros((1, 2, 2, 3))
    g = np.array([[[[1.0, 2.0]], [[4.0, 8.0]]]])
    idx = np.array([[[[5, 5]], [[-1, 6]]]])  # duplicates add; -1 and 6 name nothing
    out = ref.max_pool2d_with_indices_backward(g, x, idx, (2, 1), (2, 2))
    assert out[0, 0].ravel().tolist() == [0, 0, 0, 0, 0, 3]
    assert (out[0, 1] == 0).all()


def test_avg_and_adaptive_backward_sum_over_windows():
    x = np.zeros((1, 3, 3))
    g = np.ones((1, 2, 2))
    grad = ref.avg_pool2d_backward(g, x, 2, 1)
    np.testing.assert_allclose(grad[0], np.array([[1, 2, 1], [2, 4, 2], [1, 2, 1]]) / 4)
    grad = ref.adaptive_avg_pool2d_backward(g, x)  # cells [0,2) and [1,3)
    np.testing.assert_allclose(grad[0], np.array([[1, 2, 1], [2, 4, 2], [1, 2, 1]]) / 4)


def test_reference_accepts_any_float_dtype_and_layout():
    x = np.random.default_rng(0).standard_normal((2, 3, 6, 7)).astype(np.float16)
    want = ref.avg_pool2d(x.astype(np.float64), 3, 2, 1)
    np.testing.assert_array_equal(ref.avg_pool2d(x, 3, 2, 1), want)
    t = np.transpose(x.astype(np.float64), (0, 1, 3, 2)).copy().transpose(0, 1, 3, 2)
    np.testing.assert_array_equal(ref.avg_pool2d(t, 3, 2, 1), want)


# ---------------------------------------------------------------- against torch


def _t(a):
    import torch

    return torch.from_numpy(np.ascontiguousarray(a))


@pytest.mark.parametrize("seed", range(3))
def test_max_forward_matches_torch(seed):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(100 + seed)
    for case in window_cases(100 + seed, 60, family="max", torch_rule=True):
        x = data(rng, case.shape, np.float64, special=True)
        want, want_i = torch.nn.functional.max_pool2d_with_indices(_t(x), *case.max_args)
        out, idx = ref.max_pool2d_with_indices(x, *case.max_args)
        assert np.array_equal(out, want.numpy(), equal_nan=True), case
        hit = idx != -1  # torch gives a bogus index where the window misses the plane
        assert np.array_equal(idx[hit], want_i.numpy()[hit]), case
        assert (want.numpy()[~hit] == -INF).all(), case


def test_several_nans_last_wins_like_torch():
    torch = pytest.importorskip("torch")
    x = np.zeros((1, 1, 3, 4), np.float32)
    bits = x.view(np.uint32)
    bits[0, 0, 0, 1], bits[0, 0, 1, 0], bits[0, 0, 2, 3] = 0x7FC00001, 0x7FC00002, 0x7FC00003
    x[0, 0, 2, 0] = 5
    want, want_i = torch.nn.functional.max_pool2d_with_indices(_t(x), (3, 4))
    out, idx = ref.max_pool2d_with_indices(x, (3, 4))
    assert want_i.item() == idx.item() == 11
    assert want.numpy().view(np.uint32).item() == 0x7FC00003  # torch returns that NaN
    assert np.isnan(out.item())


@pytest.mark.parametrize("seed", range(2))
def test_max_backward_matches_torch_autograd(seed):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(200 + seed)
    for case in window_cases(200 + seed, 50, family="max", torch_rule=True):
        x = data(rng, case.shape, np.float64, special=True)
        out, idx = ref.max_pool2d_with_indices(x, *case.max_args)
        if (idx == -1).any():
            continue  # torch's own backward writes out of bounds there
        g = rng.standard_normal(out.shape)
        xt = _t(x).requires_grad_()
        torch.nn.functional.max_pool2d(xt, *case.max_args).backward(_t(g))
        grad = ref.max_pool2d_with_indices_backward(g, x, idx, *case.max_args)
        np.testing.assert_allclose(grad, xt.grad.numpy(), rtol=1e-12, atol=1e-12,
                                   err_msg=str(case))


@pytest.mark.parametrize("seed", range(3))
def test_avg_forward_and_backward_match_torch(seed):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(300 + seed)
    for case in window_cases(300 + seed, 60, family="avg"):
        x = rng.standard_normal(case.shape)
        xt = _t(x).requires_grad_()
        want = torch.nn.functional.avg_pool2d(xt, *case.avg_args)
        out = ref.avg_pool2d(x, *case.avg_args)
        np.testing.assert_allclose(out, want.detach().numpy(), rtol=1e-12, atol=1e-12,
                                   err_msg=str(case))
        g = rng.standard_normal(out.shape)
        want.backward(_t(g))
        grad = ref.avg_pool2d_backward(g, x, *case.avg_args)
        np.testing.assert_allclose(grad, xt.grad.numpy(), rtol=1e-12, atol=1e-12,
                                   err_msg=str(case))


def test_adaptive_forward_and_backward_match_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(400)
    for shape, size in adaptive_cases(400, 120):
        x = rng.standard_normal(shape)
        xt = _t(x).requires_grad_()
        want = torch.nn.functional.adaptive_avg_pool2d(xt, size)
        out = ref.adaptive_avg_pool2d(x, size)
        assert_close(out, want.detach().numpy(), 1e-12, (shape, size))
        g = rng.standard_normal(out.shape)
        want.backward(_t(g))
        assert_close(ref.adaptive_avg_pool2d_backward(g, x), xt.grad.numpy(), 1e-12,
                     (shape, size))


def test_fixed_avg_divisor_is_every_windows_divisor():
    """shapes.avg_divisor, the divisor the host passes once for all windows, against the
    reference's divisor of each window: when it is not 0, every window has it."""
    from clpool import shapes

    fixed = 0
    for case in window_cases(3300, 300, family="avg"):
        k, s, p, ceil, include_pad, override = case.avg_args
        h, w = case.shape[-2:]
        win = shapes.window((h, w), k, s, p, 1, ceil, family="avg")
        got = shapes.avg_divisor((h, w), win, include_pad, shapes.divisor(override))
        _, _, cells = ref._avg_windows(case.shape, k, s, p, ceil, include_pad, override)
        if got:  # 0 is always allowed: each window then computes its own
            fixed += 1
            assert all(div == got for *_, div in cells), case
    assert fixed > 50
    win = shapes.window((112, 112), 3, 2, 1, 1, False, family="avg")
    assert shapes.avg_divisor((112, 112), win, True, 0) == 9
    assert shapes.avg_divisor((112, 112), win, False, 0) == 0  # edge windows count fewer
    win = shapes.window((5, 5), 2, 2, 0, 1, True, family="avg")  # the last window overhangs
    assert shapes.avg_divisor((5, 5), win, True, 0) == 0


def test_fixed_avg_divisor_of_a_volume_is_every_windows_divisor():
    """The same for 3-D windows: random volumes, windows, ceil mode and divisor rules
    against the reference's divisor of each window."""
    from clpool import shapes

    rng = np.random.default_rng(3301)
    fixed = varied = 0  # cases with one divisor found; cases whose windows' divisors differ
    while fixed < 40 or varied < 40:
        k = tuple(int(v) for v in rng.integers(1, 4, 3))
        s = tuple(int(v) for v in rng.integers(1, 4, 3))
        p = tuple(int(rng.integers(0, kk // 2 + 1)) for kk in k)
        dhw = tuple(int(rng.integers(kk, kk + 6)) for kk in k)
        ceil, include_pad = bool(rng.integers(2)), bool(rng.integers(2))
        override = int(rng.integers(1, 5)) if rng.random() < 0.1 else None
        win = shapes.window3d(dhw, k, s, p, 1, ceil, family="avg")
        got = shapes.avg_divisor(dhw, win, include_pad, shapes.divisor(override))
        _, cells = ref._avg3d_cells((1, 1, *dhw), k, s, p, ceil, include_pad, override)
        divisors = {div for *_, div in cells}
        if got:
            fixed += 1
            assert divisors == {got}, (dhw, k, s, p, ceil, include_pad, override)
        varied += len(divisors) > 1  # 0 is always allowed: each window computes its own


def test_scatter_backward_of_an_empty_output_is_zeros():
    """A plane of no elements (an output of size 0) scatters nothing: zeros of x's shape
    (reshape(-1, 0) cannot tell the planes, so _flat must not infer them)."""
    x = np.ones((1, 2, 3, 3))
    empty = np.zeros((1, 2, 0, 2))
    for rank in (2, 3):
        shape = x.shape if rank == 2 else (1, *x.shape)
        g = empty if rank == 2 else empty[None]
        got = ref.adaptive_max_pool_backward(g, x.reshape(shape), g.astype(np.int64), rank)
        assert got.shape == shape and not got.any()
