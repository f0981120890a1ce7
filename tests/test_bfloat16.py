"""bfloat16 storage computed in float32, every op forward and backward: max pooling (values
and indices) bit for bit against PyTorch CPU's bfloat16 result and the float32 computation
rounded once; averages and every backward equal to the float32 result rounded once (within
one unit where float32 sums in another order) and within check.TOLERANCE of the float64
reference; PyTorch's bfloat16 results within one unit (forward, float32 sums) or within
its own error (backward, bfloat16 sums). Rounding edge cases (ties to even, overflow to
inf, NaN, -inf, subnormals); numpy, pyopencl and torch inputs, clpool.torch's autograd;
bfloat16 refused with its remedy where ml_dtypes is missing. The 3-D ops, adaptive max
pooling and max unpooling the same way, where torch CPU allows: it has no bfloat16
avg_pool3d, and sums adaptive_avg_pool3d in bfloat16 (so those are held to its float32
result rounded once); unpooling copies bits, NaN payloads too, as torch's forward does."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pyopencl.array as cla
import pytest
from click.testing import CliRunner

import clpool
from clpool import check, discovery, policy
from clpool import reference as ref
from clpool.cli import main
from clpool.shapes import stored_channels_last

ml_dtypes = pytest.importorskip("ml_dtypes")
torch = pytest.importorskip("torch")
F = torch.nn.functional
BF16 = np.dtype(ml_dtypes.bfloat16)
TOL = check.TOLERANCE["bfloat16"]
QNAN = 0x7FC0  # c10::BFloat16's NaN: every NaN result


# ---------------------------------------------------------------- rounding oracle


def bits(a) -> np.ndarray:
    """The 16 bits of a bfloat16 array or tensor, as uint16."""
    if isinstance(a, torch.Tensor):
        return a.detach().contiguous().view(torch.int16).numpy().view(np.uint16)
    a = a.get() if isinstance(a, cla.Array) else np.asarray(a)
    assert a.dtype == BF16, a.dtype
    return np.ascontiguousarray(a).view(np.uint16)


def from_bits(b) -> np.ndarray:
    return np.asarray(b, np.uint16).view(BF16)


def rne(f) -> np.ndarray:
    """float32 values rounded to bfloat16, ties to even, NaN -> 0x7FC0: c10's
    round_to_nearest_even (torch/headeronly/util/BFloat16.h), written from its definition."""
    f = np.asarray(f, np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return from_bits(np.where(np.isnan(f), np.uint16(QNAN), r))


def tensor(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)


def ulps(a, b) -> np.ndarray:
    """|a - b| in bfloat16 units (a and b finite or inf; -0 and +0 equal)."""

    def order(x):
        x = bits(x).astype(np.int32)
        return np.where(x & 0x8000, -(x & 0x7FFF), x)

    return np.abs(order(a) - order(b))


def assert_rounded_once(got, f32, context="", allowed=0.02) -> None:
    """`got` is the float32 result `f32` (torch's float32 computation, which may sum in
    another order) rounded once: equal bits, except where the two float32 sums round
    differently, by one unit, on at most `allowed` of the elements."""
    want = rne(f32)
    g, w = bits(got), bits(want)
    nan = np.isnan(np.asarray(want, np.float32))
    assert np.array_equal(np.isnan(from_bits(g).astype(np.float32)), nan), context
    assert (g[nan] == QNAN).all(), context
    d = ulps(np.where(nan, 0, g).astype(np.uint16).view(BF16),
             np.where(nan, 0, w).astype(np.uint16).view(BF16))  # fmt: skip
    assert d.max(initial=0) <= 1, (context, d.max())
    assert (d > 0).mean() <= allowed if d.size else True, (context, (d > 0).mean())


def data(rng: np.random.Generator, shape, special: bool = False) -> np.ndarray:
    x = rng.standard_normal(shape) * 4
    if special:
        x = np.where(rng.random(shape) < 0.3, np.round(x), x)  # ties
        x[rng.random(shape) < 0.04] = np.nan
        x[rng.random(shape) < 0.04] = -np.inf
    return x.astype(BF16)


def test_oracle_is_c10s_rule():
    """rne agrees with ml_dtypes' float32 -> bfloat16 on every finite value and inf (a
    random sample and every boundary), and torch's pooling gives NaN as 0x7FC0."""
    rng = np.random.default_rng(1)
    u = rng.integers(0, 2**32, 200000, dtype=np.uint64).astype(np.uint32)
    edges = (np.arange(2**16, dtype=np.uint32) << 16) | np.uint32(0x8000)  # every tie
    f = np.concatenate([u, edges, edges - 1, edges + 1]).view(np.float32)
    f = f[~np.isnan(f)]
    assert np.array_equal(bits(rne(f)), bits(f.astype(BF16)))
    x = tensor(from_bits([0x7FC0, 0xFFC0, 0x7F81, 0xFFFF]).reshape(1, 1, 1, 4))
    assert (bits(F.max_pool2d(x, 1)) == QNAN).all()
    assert (bits(F.avg_pool2d(x, 1)) == QNAN).all()


# ---------------------------------------------------------------- the 2-D ops


CASES = [  # shape, kernel, stride, padding, dilation, ceil_mode
    ((2, 3, 9, 40), 3, 2, 1, 1, True),  # rows of 16+ outputs: the 16-lane CPU paths
    ((1, 2, 11, 37), (2, 3), (1, 2), (1, 1), (2, 1), False),
    ((2, 2, 7, 34), 2, 1, 0, 1, False),
    ((3, 6, 5), 3, 3, 1, 1, True),  # unbatched
]


def _max_case(rng, case):
    shape, k, s, p, d, ceil = case
    x = data(rng, shape, special=True)
    return x, (k, s, p, d, ceil)


def test_max_pool2d_is_bit_exact(path):
    rng = np.random.default_rng(10)
    for case in CASES:
        x, args = _max_case(rng, case)
        out, idx = clpool.max_pool2d_with_indices(x, *args)
        want, want_i = F.max_pool2d(tensor(x), *args, return_indices=True)
        assert np.array_equal(bits(out), bits(want)), case
        assert np.array_equal(idx, want_i.numpy()), case
        assert np.array_equal(bits(clpool.max_pool2d(x, *args)), bits(want)), case
        f32, f32_i = ref.max_pool2d_with_indices(x, *args)  # float64, then rounded once
        assert np.array_equal(bits(out), bits(rne(f32))) and np.array_equal(idx, f32_i), case


def test_max_pool2d_backward(path):
    rng = np.random.default_rng(11)
    for case in CASES:
        x, args = _max_case(rng, case)
        out, idx = clpool.max_pool2d_with_indices(x, *args)
        g = data(rng, out.shape)
        got = clpool.max_pool2d_with_indices_backward(g, x, *args, indices=idx)
        exact = ref.max_pool2d_with_indices_backward(g, x, idx, *args)
        assert_rounded_once(got, exact, case, allowed=0)  # float32 sums of bfloat16 are exact here
        t = tensor(x).requires_grad_()
        F.max_pool2d(t, *args).backward(tensor(g))
        _within_torchs_own_error(got, t.grad, exact, case)


def _within_torchs_own_error(got, torch_grad, exact, context) -> None:
    """|got - torch| <= |torch - exact| + TOL * max(|exact|, 1): torch's bfloat16 backward
    rounds at each addition, ours once."""
    t = torch_grad.float().numpy().astype(np.float64)
    g = np.asarray(got).astype(np.float64)
    room = np.abs(t - exact) + TOL * np.maximum(np.abs(exact), 1)
    assert (np.abs(g - t) <= room).all(), context


AVG_CASES = [  # shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    ((2, 3, 9, 40), 3, 2, 1, True, True, None),
    ((1, 2, 11, 37), (2, 3), (1, 2), (1, 1), False, False, None),
    ((2, 2, 7, 34), 2, 1, 0, False, True, 3),
    ((3, 6, 5), 3, 3, 1, True, False, None),
]


def test_avg_pool2d_and_backward(path):
    rng = np.random.default_rng(12)
    for case in AVG_CASES:
        shape, *args = case
        x = data(rng, shape)
        got = clpool.avg_pool2d(x, *args)
        xf = tensor(x).float().requires_grad_()
        f32 = F.avg_pool2d(xf, *args)
        assert_rounded_once(got, f32.detach().numpy(), case)
        check_close(got, ref.avg_pool2d(x, *args), case)
        t = tensor(x).requires_grad_()
        want = F.avg_pool2d(t, *args)
        assert ulps(got, want).max() <= 1, case
        g = data(rng, got.shape)
        back = clpool.avg_pool2d_backward(g, x, *args)
        f32.backward(tensor(g).float())
        assert_rounded_once(back, xf.grad.numpy(), case)
        exact = ref.avg_pool2d_backward(g, x, *args)
        check_close(back, exact, case)
        want.backward(tensor(g))
        _within_torchs_own_error(back, t.grad, exact, case)


def check_close(got, want, context) -> None:
    err = check.error(np.asarray(got).astype(np.float64), want)
    assert err <= TOL, (context, err)


@pytest.mark.parametrize("size", [1, (3, 7), (4, 5), (13, 9)])
def test_adaptive_avg_pool2d_and_backward(path, size):
    rng = np.random.default_rng(13)
    for shape in [(2, 3, 9, 40), (2, 2, 33, 17), (3, 7, 6)]:
        x = data(rng, shape)
        got = clpool.adaptive_avg_pool2d(x, size)
        xf = tensor(x).float().requires_grad_()
        f32 = F.adaptive_avg_pool2d(xf, size)
        assert_rounded_once(got, f32.detach().numpy(), (shape, size))
        check_close(got, ref.adaptive_avg_pool2d(x, size), (shape, size))
        t = tensor(x).requires_grad_()
        want = F.adaptive_avg_pool2d(t, size)
        assert ulps(got, want).max() <= 1, (shape, size)
        g = data(rng, got.shape)
        back = clpool.adaptive_avg_pool2d_backward(g, x)
        f32.backward(tensor(g).float())
        assert_rounded_once(back, xf.grad.numpy(), (shape, size))
        exact = ref.adaptive_avg_pool2d_backward(g, x)
        check_close(back, exact, (shape, size))
        want.backward(tensor(g))
        _within_torchs_own_error(back, t.grad, exact, (shape, size))


# ---------------------------------------------------------------- the 1-D ops


def test_1d_ops():
    rng = np.random.default_rng(14)
    for shape, k, s, p, d, ceil in [((2, 3, 40), 3, 2, 1, 2, True), ((3, 35), 4, 1, 2, 1, False)]:
        x = data(rng, shape, special=True)
        t = tensor(x).requires_grad_()
        out, idx = clpool.max_pool1d(x, k, s, p, d, ceil, return_indices=True)
        want, want_i = F.max_pool1d(t, k, s, p, d, ceil, return_indices=True)
        assert np.array_equal(bits(out), bits(want)) and np.array_equal(idx, want_i.numpy())
        g = data(rng, out.shape)
        back = clpool.max_pool1d_with_indices_backward(g, x, k, s, p, d, ceil, indices=idx)
        exact = ref.max_pool2d_with_indices_backward(
            g[..., None, :], x[..., None, :], idx[..., None, :], (1, k), (1, s), (0, p),
            (1, d), ceil,
        )[..., 0, :]  # fmt: skip
        assert_rounded_once(back, exact, shape, allowed=0)
        y = data(rng, shape)
        xf = tensor(y).float().requires_grad_()
        f32 = F.avg_pool1d(xf, k, s, k // 2, ceil, False)
        got = clpool.avg_pool1d(y, k, s, k // 2, ceil, False)
        assert_rounded_once(got, f32.detach().numpy(), shape)
        assert ulps(got, F.avg_pool1d(tensor(y), k, s, k // 2, ceil, False)).max() <= 1
        gy = data(rng, got.shape)
        f32.backward(tensor(gy).float())
        back = clpool.avg_pool1d_backward(gy, y, k, s, k // 2, ceil, False)
        assert_rounded_once(back, xf.grad.numpy(), shape)
        xf.grad = None
        f32 = F.adaptive_avg_pool1d(xf, 7)
        got = clpool.adaptive_avg_pool1d(y, 7)
        assert_rounded_once(got, f32.detach().numpy(), shape)
        ga = data(rng, got.shape)
        f32.backward(tensor(ga).float())
        assert_rounded_once(clpool.adaptive_avg_pool1d_backward(ga, y), xf.grad.numpy(), shape)


# ---------------------------------------------------------------- rounding edge cases


def _pairs(a: list[int], b: list[int]) -> np.ndarray:
    """bfloat16 rows [a_i, b_i] as a (1, 1, n, 2) input."""
    return from_bits(np.stack([a, b], -1).astype(np.uint16)).reshape(1, 1, len(a), 2)


def test_rounding_edges(path):
    """The mean (or, with divisor_override=1, the sum) of two bfloat16 values, exact in
    float32, rounded once."""
    one, next1, next2 = 0x3F80, 0x3F81, 0x3F82  # 1, 1 + 2^-7, 1 + 2^-6
    big = 0x7F7F  # the largest finite bfloat16
    cases = [
        # mean: (a, b) -> expected bits
        ((one, next1), one),  # tie between 1 (even) and 1 + 2^-7: to even, down
        ((next1, next2), next2),  # tie between 1 + 2^-7 and 1 + 2^-6 (even): up
        ((0xBF81, 0xBF82), 0xBF82),  # negative tie: to even, away from zero here
        ((one, 0x3F83), next2),  # 1 + 3 * 2^-8 again, from other inputs
        ((0x0001, 0x0002), 0x0002),  # subnormals: 1.5 units: tie to even
        ((0x0001, 0x0000), 0x0000),  # half the smallest subnormal: tie to even (zero)
        ((0x8001, 0x8002), 0x8002),
        ((0x7FC0, one), QNAN),  # NaN
        ((0xFFC0, one), QNAN),  # a negative NaN: the quiet NaN, as torch's
        ((0x7F81, one), QNAN),  # a NaN whose mantissa is not the quiet bit
        ((0xFF80, one), 0xFF80),  # -inf
        ((0xFF80, 0x7F80), QNAN),  # -inf + inf
        ((big, big), 0x7F80),  # the float32 sum overflows: inf, as torch's
    ]
    x = _pairs([a for (a, _), _ in cases], [b for (_, b), _ in cases])
    got = bits(clpool.avg_pool2d(x, (1, 2)))[0, 0, :, 0]
    want = np.array([w for _, w in cases], np.uint16)
    assert np.array_equal(got, want), [(hex(g), hex(w)) for g, w in zip(got, want, strict=True)]
    t = bits(F.avg_pool2d(tensor(x), (1, 2)))[0, 0, :, 0]
    assert np.array_equal(t, want)  # torch CPU agrees with every case
    # sums (divisor 1) past the largest bfloat16, finite in float32: big + 2^119 is the
    # tie above big (odd): inf; big + 1.5 * 2^118 lies below it: big; big + 1.5 * 2^119
    # above: inf; -big - 2^119: -inf
    s = _pairs([big, big, big, 0xFF7F], [0x7B00, 0x7AC0, 0x7B40, 0xFB00])
    got = bits(clpool.avg_pool2d(s, (1, 2), divisor_override=1))[0, 0, :, 0]
    assert [hex(v) for v in got] == ["0x7f80", "0x7f7f", "0x7f80", "0xff80"]
    t = bits(F.avg_pool2d(tensor(s), (1, 2), divisor_override=1))[0, 0, :, 0]
    assert np.array_equal(got, t)


def test_nan_and_minus_inf_in_max_pooling(path):
    x = from_bits([[0xFFC0, 0x3F80, 0xFF80, 0xFF80], [0x0001, 0x8001, 0xFF80, 0xFF80]])
    x = np.tile(x, (1, 10)).reshape(1, 1, 2, 40)  # 16-lane CPU rows
    out, idx = clpool.max_pool2d_with_indices(x, 2, 2)
    want, want_i = F.max_pool2d(tensor(x), 2, 2, return_indices=True)
    assert np.array_equal(bits(out), bits(want)) and np.array_equal(idx, want_i.numpy())
    assert list(bits(out)[0, 0, 0, :2]) == [QNAN, 0xFF80] and list(idx[0, 0, 0, :2]) == [0, 2]
    sub = from_bits([0x0001, 0x8001, 0x0000, 0x8000] * 10).reshape(1, 1, 1, 40)
    out, idx = clpool.max_pool2d_with_indices(sub, (1, 2), (1, 2))
    want, want_i = F.max_pool2d(tensor(sub), (1, 2), (1, 2), return_indices=True)
    assert np.array_equal(bits(out), bits(want)) and np.array_equal(idx, want_i.numpy())


# ---------------------------------------------------------------- inputs and outputs


def test_pyopencl_arrays_strided_too(device):
    queue = clpool.default_queue()
    rng = np.random.default_rng(15)
    host = data(rng, (2, 3, 8, 22), special=True)
    host[0, 0, 0, 1] = from_bits([0xFF81])[0]  # a negative NaN with a payload: 0x7FC0 out
    whole = cla.to_device(queue, host)
    view = whole[:, :, 1:, ::2]
    out, idx = clpool.max_pool2d_with_indices(view, 2, 1)
    want, want_i = F.max_pool2d(tensor(host[:, :, 1:, ::2]), 2, 1, return_indices=True)
    assert isinstance(out, cla.Array) and out.dtype == BF16
    assert np.array_equal(bits(out), bits(want)) and np.array_equal(idx.get(), want_i.numpy())
    avg = clpool.avg_pool2d(view, 3, 2, 1)
    assert np.array_equal(bits(avg), bits(clpool.avg_pool2d(host[:, :, 1:, ::2], 3, 2, 1)))


def test_channels_last_rows_of_16_channels():
    """A CPU's channels-last kernels with rows of 16 channels a lane (plane.h): max pooling
    bit for bit with its indices, the averages and gradients float32's rounded once."""
    rng = np.random.default_rng(19)
    x = stored_channels_last(data(rng, (2, 16, 7, 9), special=True))
    calm = stored_channels_last(data(rng, x.shape))
    with policy.use(gpu=False):
        out, idx = clpool.max_pool2d_with_indices(x, 3, 2, 1)
        want, want_i = F.max_pool2d(tensor(x), 3, 2, 1, return_indices=True)
        assert np.array_equal(bits(out), bits(want)) and np.array_equal(idx, want_i.numpy())
        g = stored_channels_last(data(rng, out.shape))
        got = clpool.max_pool2d_with_indices_backward(g, x, 3, 2, 1, indices=idx)
        exact = ref.max_pool2d_with_indices_backward(g, x, idx, 3, 2, 1)
        assert_rounded_once(got, exact, "max backward", allowed=0)
        avg = clpool.avg_pool2d(calm, 3, 2, 1)
        xf = tensor(calm).float().requires_grad_()
        f32 = F.avg_pool2d(xf, 3, 2, 1)
        assert_rounded_once(avg, f32.detach().numpy(), "avg")
        f32.backward(tensor(g).float())
        assert_rounded_once(clpool.avg_pool2d_backward(g, calm, 3, 2, 1), xf.grad.numpy())
    assert out.strides == stored_channels_last(np.asarray(out)).strides


def test_torch_tensors_through_the_core_ops():
    rng = np.random.default_rng(16)
    x = tensor(data(rng, (2, 3, 9, 20), special=True))
    out, idx = clpool.max_pool2d_with_indices(x, 3, 2, 1)
    want, want_i = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    assert out.dtype == torch.bfloat16 and idx.dtype == torch.int64
    assert torch.equal(out.view(torch.int16), want.view(torch.int16)) and torch.equal(idx, want_i)
    last = x.contiguous(memory_format=torch.channels_last)
    got = clpool.adaptive_avg_pool2d(last, (4, 5))
    assert got.dtype == torch.bfloat16 and got.is_contiguous(memory_format=torch.channels_last)
    assert ulps(got, F.adaptive_avg_pool2d(x, (4, 5))).max() <= 1
    got, idx = clpool.adaptive_max_pool2d(last, (4, 5), True)
    want, want_i = F.adaptive_max_pool2d(last, (4, 5), True)
    assert got.is_contiguous(memory_format=torch.channels_last) and torch.equal(idx, want_i)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    line = clpool.avg_pool1d(x[0], 3)
    assert line.dtype == torch.bfloat16 and ulps(line, F.avg_pool1d(x[0], 3)).max() <= 1


def _check_autograd(name: str, x, args: tuple, rng: np.random.Generator) -> None:
    """clpool.torch's `name` on bfloat16 `x`, its result and its gradient (of a random
    bfloat16 grad_output), is torch's float32 one rounded once."""
    import clpool.torch as ct

    mine, theirs = x.clone().requires_grad_(), x.clone().float().requires_grad_()
    out = getattr(ct, name)(mine, *args)
    f32 = getattr(F, name)(theirs, *args)
    assert out.dtype == torch.bfloat16
    assert_rounded_once(out, f32.detach().numpy(), name)
    g = tensor(data(rng, tuple(out.shape)))
    out.backward(g)
    f32.backward(g.float())
    assert mine.grad.dtype == torch.bfloat16
    assert_rounded_once(mine.grad, theirs.grad.numpy(), name)


def test_clpool_torch_autograd():
    rng = np.random.default_rng(17)
    x = tensor(data(rng, (2, 3, 9, 20)))
    for name, args in [("max_pool2d", (3, 2, 1)), ("avg_pool2d", (3, 2, 1)),
                       ("adaptive_avg_pool2d", ((4, 5),))]:  # fmt: skip
        _check_autograd(name, x, args, rng)


def test_without_ml_dtypes_bfloat16_is_refused_and_clpool_works():
    script = """
import sys
sys.modules["ml_dtypes"] = None  # as if not installed
import numpy as np, torch, clpool
assert clpool.max_pool2d(np.ones((1, 1, 2, 2), np.float32), 2)[0, 0, 0, 0] == 1
try:
    clpool.max_pool2d(torch.ones(1, 1, 2, 2, dtype=torch.bfloat16), 2)
except clpool.UnsupportedDtypeError as e:
    print(e)
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "clpool[bfloat16]" in run.stdout and "max_pool2d kernel failed" in run.stdout


# ---------------------------------------------------------------- CLI, probe, bench


def test_probe_and_devices_list_bfloat16(device):
    from clpool import capabilities

    assert "bfloat16" in capabilities.dtypes(device)
    result = CliRunner().invoke(main, ["devices", "--json", "--no-verify"])
    assert result.exit_code == 0, result.output
    assert all(d["bf16"] is True for d in json.loads(result.stdout))


def test_check_cli_bfloat16(device):
    result = CliRunner().invoke(main, ["check", "--dtype", "bfloat16", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["dtype"] == "bfloat16" and report["passed"]
    assert {r["tolerance"] for r in report["ops"]} == {TOL}
    new_ops = {f"{op}{n}d{b}" for op in ("adaptive_max_pool", "max_unpool") for n in (1, 2, 3)
               for b in ("", "_backward")}  # fmt: skip
    new_ops |= {"max_pool3d", "max_pool3d_with_indices", "max_pool3d_with_indices_backward",
                "avg_pool3d", "avg_pool3d_backward", "adaptive_avg_pool3d",
                "adaptive_avg_pool3d_backward"}  # fmt: skip
    assert new_ops <= {r["op"] for r in report["ops"]}


def test_bench_bfloat16(device):
    args = ["bench", "--shape", "1,2,8,8", "--op", "avg_pool2d", "--op", "max_pool2d"]
    args += ["--dtype", "bfloat16", "--json", "--min-time", "0.005", "--repeats", "1"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    assert {r["dtype"] for r in rows} == {"bfloat16"} and rows[0]["bytes"] == 2 * (128 + 32)


NEW_FAMILIES_KERNELS = {
    "max_pool3d_forward", "max_pool3d_backward", "avg_pool3d_forward", "avg_pool3d_backward",
    "adaptive_avg_pool3d_forward", "adaptive_avg_pool3d_backward", "adaptive_max_pool_forward",
    "adaptive_max_pool_backward", "max_unpool_clear", "max_unpool_claim", "max_unpool_scatter",
    "max_unpool_gather",
}  # fmt: skip


def test_bench_bfloat16_new_families(device):
    """The 3-D ops benchmark in bfloat16; PyTorch's columns are left out where torch CPU
    has no bfloat16 kernel (avg_pool3d; CUDA has one)."""
    args = ["bench", "--shape", "1,2,4,8,8", "--op", "avg_pool3d", "--op", "max_pool3d"]
    args += ["--dtype", "bfloat16", "--json", "--min-time", "0.002", "--repeats", "1"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    rows = {r["op"]: r for r in record["rows"]}
    assert {r["dtype"] for r in rows.values()} == {"bfloat16"}
    assert rows["max_pool3d"]["torch_wall_us"] > 0
    assert ("torch_wall_us" in rows["avg_pool3d"]) == (record["torch_device"] == "cuda")


def test_canary_runs_bfloat16(device, launched):
    """The canary's bfloat16 stages run every kernel, the 3-D, adaptive max and unpooling
    ones too (never a 16-bit backward per plane)."""
    from clpool import canary

    assert any(dt == BF16 for dt, *_ in canary.stages(device))
    with policy.use():
        canary.run(device, "bfloat16")
    assert discovery.select() is not None
    ran = {name for name, dtype in launched if dtype == BF16}
    assert ran >= NEW_FAMILIES_KERNELS, NEW_FAMILIES_KERNELS - ran
    assert not {name for name in ran if "backward" in name and name.endswith("_plane")}


def test_gpu_forms(build_options):
    """As planned for a GPU (on this device): rows loaded as vload4 chunks (LOAD4), loops
    unrolled, the adaptive band and global kernels."""
    rng = np.random.default_rng(18)
    x = data(rng, (2, 3, 36, 40), special=True)
    y = data(rng, (2, 3, 36, 40))
    with policy.use(gpu=True):
        out, idx = clpool.max_pool2d_with_indices(x, 3, 2, 1)
        avg = clpool.avg_pool2d(y, 3, 1, 1)
        cells = [clpool.adaptive_avg_pool2d(y, size) for size in (1, (2, 3), (5, 7))]
    want, want_i = F.max_pool2d(tensor(x), 3, 2, 1, return_indices=True)
    assert np.array_equal(bits(out), bits(want)) and np.array_equal(idx, want_i.numpy())
    f32 = tensor(y).float()
    assert_rounded_once(avg, F.avg_pool2d(f32, 3, 1, 1).numpy())
    for got, size in zip(cells, (1, (2, 3), (5, 7)), strict=True):
        assert_rounded_once(got, F.adaptive_avg_pool2d(f32, size).numpy(), size)
    assert any("-DCLPOOL_VEC4" in options for options in build_options)


# (shape, kernel, stride, padding, ceil_mode): rows of a multiple of 8 (16-byte loads)
# and of 4 (stores of 4), of 2 (stores of 2) and odd; rows and columns past the tiles
WIDE_CASES = [
    ((2, 3, 19, 48), 3, 2, 1, False),
    ((1, 2, 21, 44), 3, 2, 1, True),
    ((2, 2, 13, 42), 2, 2, 0, False),
    ((1, 3, 9, 37), 3, 2, 1, True),
    ((2, 3, 11, 40), 3, 1, 1, False),  # stride 1: its tiles (the average forward's 2 x 8)
    ((1, 2, 10, 37), 3, 1, 1, True),
]


def test_gpu_wide_forms(build_options):
    """As planned for a GPU with bfloat16's tiles: rows loaded 8 elements at a time
    (-DCLPOOL_VEC8) and tile rows stored 2 or 4 at a time (-DCLPOOL_PACK): the same bits
    as one element per work-item, and torch's (max values and indices, the reference's
    exact max backward, average pooling rounded once)."""
    rng = np.random.default_rng(19)
    for shape, k, s, p, ceil in WIDE_CASES:
        x = data(rng, shape, special=True)
        y = data(rng, shape)
        args = (k, s, p, 1, ceil)
        runs = []
        for tile in ({}, {"rows": 1, "cols": 1}):
            with policy.use(gpu=True, **tile):
                out, idx = clpool.max_pool2d_with_indices(x, *args)
                values = clpool.max_pool2d(x, *args)
                g = data(np.random.default_rng(20), out.shape)
                back = clpool.max_pool2d_with_indices_backward(g, x, *args, indices=idx)
                avg = clpool.avg_pool2d(y, k, s, p, ceil)
                avg_back = clpool.avg_pool2d_backward(g, y, k, s, p, ceil)
            runs.append([bits(a) for a in (values, back, avg, avg_back)])
        for wide, one in zip(*runs, strict=True):
            assert np.array_equal(wide, one), shape
        want, want_i = F.max_pool2d(tensor(x), *args, return_indices=True)
        assert np.array_equal(bits(values), bits(want)) and np.array_equal(idx, want_i.numpy())
        exact = ref.max_pool2d_with_indices_backward(g, x, idx, *args)
        assert_rounded_once(back, exact, shape, allowed=0)
        yf = tensor(y).float().requires_grad_()
        f32 = F.avg_pool2d(yf, k, s, p, ceil)
        assert_rounded_once(avg, f32.detach().numpy(), shape)
        f32.backward(tensor(g).float())
        assert_rounded_once(avg_back, yf.grad.numpy(), shape)
    built = " ".join(" ".join(options) for options in build_options)
    assert all(f in built for f in ("-DCLPOOL_VEC8", "-DCLPOOL_PACK=4", "-DCLPOOL_PACK=2"))


def test_a_gpus_stride_1_takes_bfloat16s_own_tile_before_stride_1s(device, build_options):
    """A tile tuned for stride 1 in bfloat16 comes before the stride-1 tile and the
    bfloat16 tile; without one, the stride-1 tile holds. avg_pool2d at k3 s1 builds with
    it (8 columns: 16-byte row loads) and rounds torch's float32 result once."""
    table = policy.current().tiles["GPU"]
    with policy.use(gpu=True):
        pol = policy.current()
        name = "avg_pool2d_forward"
        tile = table[f"{name} s1 bfloat16"]
        assert tile not in (table[f"{name} s1"], table[f"{name} bfloat16"])
        assert pol.tile(device, name, stride1=True, bfloat16=True) == tile
        assert pol.tile(device, name, stride1=True) == table[f"{name} s1"]
        assert pol.tile(device, name, bfloat16=True) == table[f"{name} bfloat16"]
        values = "max_pool2d_values"
        assert f"{values} s1 bfloat16" not in table
        assert pol.tile(device, values, stride1=True, bfloat16=True) == table[f"{values} s1"]
        y = data(np.random.default_rng(21), (2, 3, 9, 48))
        build_options.clear()
        avg = clpool.avg_pool2d(y, 3, 1, 1)
    assert_rounded_once(avg, F.avg_pool2d(tensor(y).float(), 3, 1, 1).numpy())
    rows, cols = tile
    assert any(
        f"-DCLPOOL_ROWS={rows}" in o and f"-DCLPOOL_COLS={cols}" in o and "-DCLPOOL_VEC8" in o
        for o in build_options
    )


def test_gpu_wide_adaptive_backward():
    """Equal adaptive cells (the average pooling backward) with bfloat16's GPU tile."""
    rng = np.random.default_rng(21)
    x = data(rng, (2, 3, 32, 48))
    g = data(rng, (2, 3, 2, 3))
    with policy.use(gpu=True):
        got = clpool.adaptive_avg_pool2d_backward(g, x)
    xf = tensor(x).float().requires_grad_()
    F.adaptive_avg_pool2d(xf, (2, 3)).backward(tensor(g).float())
    assert_rounded_once(got, xf.grad.numpy())


def test_gpu_adaptive_backward_of_unequal_cells_in_tiles(build_options):
    """Unequal adaptive cells with a GPU's tiles of rows and columns, each row's columns
    stored packed (-DCLPOOL_PACK=2 or 4 where they divide the row) or one by one (a last
    tile cut short): the bits of one element per work-item, rounded once from torch's
    float32 gradient."""
    rng = np.random.default_rng(22)
    for shape, size in [((2, 3, 13, 12), (5, 4)), ((1, 2, 9, 10), (4, 3)), ((1, 1, 7, 9), 2)]:
        x, g = data(rng, shape), None
        runs = []
        for tile in ({"rows": 1, "cols": 1}, {"rows": 16, "cols": 2}, {"rows": 3, "cols": 4}):
            if g is None:
                g = data(rng, clpool.adaptive_avg_pool2d(x, size).shape)
            with policy.use(gpu=True, **tile):
                runs.append(bits(clpool.adaptive_avg_pool2d_backward(g, x)))
        assert all(np.array_equal(r, runs[0]) for r in runs), shape
        xf = tensor(x).float().requires_grad_()
        F.adaptive_avg_pool2d(xf, size).backward(tensor(g).float())
        assert_rounded_once(runs[0].view(x.dtype), xf.grad.numpy(), shape)
    built = [" ".join(o) for o in build_options]
    assert any("-DCLPOOL_PACK=4" in b and "-DCLPOOL_COLS=4" in b for b in built)
    assert any("-DCLPOOL_PACK=2" in b and "-DCLPOOL_COLS=2" in b for b in built)


# ---------------------------------------------------------------- the 3-D ops


CASES_3D = [  # shape, kernel, stride, padding, dilation, ceil_mode
    ((2, 2, 5, 6, 20), 3, 2, 1, 1, True),
    ((1, 3, 4, 7, 9), (2, 3, 2), (1, 2, 1), (1, 1, 0), (2, 1, 1), False),
    ((2, 4, 5, 6), 2, 1, 0, 1, True),  # unbatched
]

AVG_CASES_3D = [  # shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor
    ((2, 2, 5, 6, 20), 3, 2, 1, True, True, None),
    ((2, 2, 5, 6, 20), 3, 2, 1, True, False, None),
    ((1, 3, 4, 7, 9), (2, 3, 2), (1, 2, 1), (1, 1, 0), False, True, 5),
    ((2, 4, 5, 6), 2, 1, 0, False, False, None),  # unbatched
]


def test_max_pool3d_is_bit_exact_and_backward():
    rng = np.random.default_rng(20)
    for case in CASES_3D:
        shape, *args = case
        x = data(rng, shape, special=True)
        out, idx = clpool.max_pool3d_with_indices(x, *args)
        t = tensor(x).requires_grad_()
        want, want_i = F.max_pool3d(t, *args, return_indices=True)
        assert np.array_equal(bits(out), bits(want)), case
        assert np.array_equal(idx, want_i.numpy()), case
        assert np.array_equal(bits(clpool.max_pool3d(x, *args)), bits(want)), case
        f32, f32_i = ref.max_pool3d_with_indices(x, *args)
        assert np.array_equal(bits(out), bits(rne(f32))) and np.array_equal(idx, f32_i), case
        g = data(rng, out.shape)
        got = clpool.max_pool3d_with_indices_backward(g, x, *args, indices=idx)
        exact = ref.max_pool3d_with_indices_backward(g, x, idx, *args)
        assert_rounded_once(got, exact, case, allowed=0)
        want.backward(tensor(g))
        _within_torchs_own_error(got, t.grad, exact, case)


def _average_and_backward(
    got, back, x, g, op, args, exact, exact_back, context, torch_bf16: bool | str = True
) -> None:
    """An average `got` and its gradient `back` (of `g`) against torch's `op` on x: its
    float32 computation rounded once, its bfloat16 one (where torch CPU has one) within one
    unit (forward, summed in float32) or within its own error (backward, and a forward
    that torch sums in bfloat16: torch_bf16="sums"), and the float64 reference within
    check.TOLERANCE."""
    xf = tensor(x).float().requires_grad_()
    f32 = op(xf, *args)
    assert_rounded_once(got, f32.detach().numpy(), context)
    check_close(got, exact, context)
    f32.backward(tensor(g).float())
    assert_rounded_once(back, xf.grad.numpy(), context)
    check_close(back, exact_back, context)
    if torch_bf16:
        t = tensor(x).requires_grad_()
        want = op(t, *args)
        if torch_bf16 == "sums":
            _within_torchs_own_error(got, want.detach(), exact, context)
        else:
            assert ulps(got, want).max() <= 1, context
        want.backward(tensor(g))
        _within_torchs_own_error(back, t.grad, exact_back, context)


def test_avg_pool3d_and_backward():
    rng = np.random.default_rng(21)
    for case in AVG_CASES_3D:
        shape, *args = case
        x = data(rng, shape)
        got = clpool.avg_pool3d(x, *args)
        g = data(rng, got.shape)
        back = clpool.avg_pool3d_backward(g, x, *args)
        exact, exact_back = ref.avg_pool3d(x, *args), ref.avg_pool3d_backward(g, x, *args)
        # torch CPU has no bfloat16 avg_pool3d ("avg_pool3d_out_frame" not implemented)
        _average_and_backward(got, back, x, g, F.avg_pool3d, args, exact, exact_back, case,
                              torch_bf16=False)  # fmt: skip


@pytest.mark.parametrize("size", [1, (3, 4, 2), (7, 9, 5)])
def test_adaptive_avg_pool3d_and_backward(size):
    rng = np.random.default_rng(22)
    for shape in [(2, 2, 5, 6, 20), (3, 4, 7, 6)]:
        x = data(rng, shape)
        got = clpool.adaptive_avg_pool3d(x, size)
        g = data(rng, got.shape)
        back = clpool.adaptive_avg_pool3d_backward(g, x)
        exact = ref.adaptive_avg_pool3d(x, size)
        exact_back = ref.adaptive_avg_pool3d_backward(g, x)
        args = (size,)
        _average_and_backward(got, back, x, g, F.adaptive_avg_pool3d, args, exact, exact_back,
                              (shape, size), torch_bf16="sums")  # fmt: skip


# ---------------------------------------------------------------- adaptive max pooling


ADAPTIVE_MAX_CASES = [  # rank, shape, output_size: down- and upsampling, overlapping cells
    (1, (2, 3, 40), 13),
    (1, (3, 9), 20),
    (2, (2, 3, 10, 37), (4, 11)),
    (2, (3, 7, 6), (None, 13)),
    (2, (2, 3, 5, 8), (7, 12)),  # upsampling rows of 8: a GPU's gather stores them packed
    (3, (2, 2, 5, 6, 20), (2, 4, 7)),
    (3, (2, 3, 4, 5), (5, 2, 7)),
]


@pytest.mark.parametrize(
    "planned", [{"per_plane": False}, {"per_plane": True}, {"gpu": True, "rows": 3, "cols": 4}]
)
def test_adaptive_max_pool_is_bit_exact_and_backward(planned, build_options, device):
    """Values and indices bit for bit; the backward rounded once, also where the CPU's
    plane per work-item kernel would be chosen for float32 (it adds in memory), and with a
    GPU's tiles of columns, stored packed where they divide the row (the gather's, of more
    cells than elements: a GPU scatters fewer)."""
    rng = np.random.default_rng(23)
    for rank, shape, size in ADAPTIVE_MAX_CASES:
        context = (rank, shape, size)
        forward = getattr(clpool, f"adaptive_max_pool{rank}d")
        x = data(rng, shape, special=True)
        with policy.use(**planned):
            out, idx = forward(x, size, True)
            g = data(rng, out.shape)
            got = getattr(clpool, f"adaptive_max_pool{rank}d_backward")(g, x, idx)
            values = forward(x, size)
        t = tensor(x).requires_grad_()
        want, want_i = getattr(F, f"adaptive_max_pool{rank}d")(t, size, True)
        assert np.array_equal(bits(out), bits(want)), context
        assert np.array_equal(idx, want_i.numpy()), context
        assert np.array_equal(bits(values), bits(want)), context
        f32, f32_i = ref.adaptive_max_pool_nd(x, size, rank)
        assert np.array_equal(bits(out), bits(rne(f32))) and np.array_equal(idx, f32_i), context
        exact = ref.adaptive_max_pool_backward(g, x, idx, rank)
        assert_rounded_once(got, exact, context, allowed=0)
        want.backward(tensor(g))
        _within_torchs_own_error(got, t.grad, exact, context)
    packed = any("-DCLPOOL_PACK=4" in " ".join(o) for o in build_options)
    with policy.use(**planned) as chosen:
        assert packed == chosen.on_gpu(device)


@pytest.mark.parametrize("per_plane", [False, True])
def test_adaptive_max_pool_backward_rounds_once(per_plane):
    """An element that is the maximum of four overlapping cells gets 1 + 3 * 2^-8 (1.5
    units above 1), rounded once: 1 + 2^-6, where rounding at each addition (a tie to
    even, down, each time) would leave 1."""
    x = np.zeros((1, 1, 5, 5), BF16)
    x[0, 0, 2, 2] = 1  # rows and columns 1..2 and 2..3 of cells (1, 1) to (2, 2)
    g = from_bits([0x3B80] * 16).reshape(1, 1, 4, 4)  # 2^-8
    g[0, 0, 1, 1] = 1  # the first of the four in output order
    with policy.use(per_plane=per_plane):
        _, idx = clpool.adaptive_max_pool2d(x, 4, True)
        got = clpool.adaptive_max_pool2d_backward(g, x, idx)
    assert list(idx[0, 0, 1:3, 1:3].ravel()) == [12] * 4
    assert hex(bits(got)[0, 0, 2, 2]) == "0x3f82", hex(bits(got)[0, 0, 2, 2])


# ---------------------------------------------------------------- max unpooling


UNPOOL_CASES = [  # rank, shape, kernel, stride, padding, output_size
    (1, (2, 3, 20), 2, None, 0, None),
    (1, (3, 17), 3, 2, 1, (34,)),
    (2, (2, 3, 5, 20), 3, 2, 1, (9, 40)),
    (2, (3, 4, 6), (2, 3), None, 0, None),
    (3, (2, 2, 3, 4, 10), 2, None, 0, None),
    (3, (2, 3, 3, 4), 3, 2, 1, (5, 6, 8)),
]


def _unpool_case(rng, case):
    """x (NaN, -inf, ties, bfloat16 subnormals and -0) and its indices: max pooling's of
    an input of the output's size where the windows allow, else random ones that
    collide (the later input wins)."""
    rank, shape, k, s, p, size = case
    x = data(rng, shape, special=True)
    x.flat[:4] = from_bits([0x0001, 0x8001, 0x8000, 0xFFC1])  # NaN: its bits copied
    out = ref.max_unpool(x, np.zeros(shape, np.int64), rank, k, s, p, size).shape
    plane = int(np.prod(out[-rank:]))
    return x, rng.integers(0, max(1, plane // 3), shape), (k, s, p, size)


def _copied(got, exact, context) -> None:
    """`got` is the float64 reference rounded once, but for NaN, whose bits a copy keeps."""
    nan = np.isnan(exact)
    assert np.array_equal(np.isnan(np.asarray(got, np.float32)), nan), context
    assert np.array_equal(bits(got)[~nan], bits(rne(exact))[~nan]), context


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")  # NaN payloads
@pytest.mark.usefixtures("torch_one_thread")
def test_max_unpool_is_bit_exact_and_backward():
    rng = np.random.default_rng(24)
    for case in UNPOOL_CASES:
        rank = case[0]
        x, idx, args = _unpool_case(rng, case)
        got = getattr(clpool, f"max_unpool{rank}d")(x, idx, *args)
        t = tensor(x).requires_grad_()
        want = getattr(F, f"max_unpool{rank}d")(t, torch.from_numpy(idx), *args)
        assert np.array_equal(bits(got), bits(want)), case
        _copied(got, ref.max_unpool(x, idx, rank, *args), case)
        g = data(rng, got.shape, special=True)
        g.flat[-3:] = from_bits([0x7F81, 0xFFC0, 0x8001])
        back = getattr(clpool, f"max_unpool{rank}d_backward")(g, x, idx, *args)
        _copied(back, ref.max_unpool_backward(g, x, idx, rank), case)
        want.backward(tensor(g))
        theirs = t.grad.float().numpy()  # NaN as 0xFFFF: torch's gradient is no bit copy
        nan = np.isnan(theirs)
        assert np.array_equal(np.isnan(np.asarray(back, np.float32)), nan), case
        assert np.array_equal(bits(back)[~nan], bits(t.grad)[~nan]), case


@pytest.mark.usefixtures("torch_one_thread")
def test_nan_payloads_in_the_new_families():
    """Max pooling gives every NaN as 0x7FC0 (the float32 result rounded once), as torch's
    max_pool3d and adaptive_max_pool1d/2d do; torch's adaptive_max_pool3d alone copies the
    NaN's bits (a known difference, ours is its rounding rule). Unpooling copies them, as
    torch's max_unpool."""
    x = from_bits([0xFFC1, 0x3F80, 0x7F81, 0x0001]).reshape(1, 1, 1, 1, 4)
    t = tensor(x)
    assert list(bits(clpool.max_pool3d(x, (1, 1, 2))).ravel()) == [QNAN] * 2
    assert list(bits(F.max_pool3d(t, (1, 1, 2))).ravel()) == [QNAN] * 2
    for rank in (1, 2, 3):
        got = getattr(clpool, f"adaptive_max_pool{rank}d")(x.reshape(x.shape[3 - rank :]), 2)
        assert list(bits(got).ravel()[:2]) == [QNAN] * 2, rank
    assert list(bits(F.adaptive_max_pool2d(t[0], (1, 2))).ravel()) == [QNAN] * 2
    assert list(bits(F.adaptive_max_pool3d(t, (1, 1, 2))).ravel()) == [0xFFC1, 0x7F81]
    idx = np.array([0, 3, 4, 7]).reshape(1, 1, 4)
    got = clpool.max_unpool1d(x.reshape(1, 1, 4), idx, 2)
    assert list(bits(got).ravel()[[0, 3, 4, 7]]) == [0xFFC1, 0x3F80, 0x7F81, 0x0001]
    assert np.array_equal(bits(got), bits(F.max_unpool1d(t.reshape(1, 1, 4), torch.tensor(idx), 2)))


# ---------------------------------------------------------------- the new families' inputs


@pytest.mark.usefixtures("torch_one_thread")  # the unpooling's colliding indices
def test_new_families_take_pyopencl_arrays_strided_too(device):
    queue = clpool.default_queue()
    rng = np.random.default_rng(25)
    host = data(rng, (2, 3, 4, 6, 12), special=True)
    view = cla.to_device(queue, host)[:, :, :, 1:, ::2]  # copied to a contiguous buffer
    part = np.ascontiguousarray(host[:, :, :, 1:, ::2])
    whole = cla.to_device(queue, host)
    runs = [
        (lambda a: clpool.max_pool3d_with_indices(a, 2, 1, 1), F.max_pool3d, (2, 1, 1)),
        (lambda a: clpool.avg_pool3d(a, 3, 2, 1), None, None),
        (lambda a: clpool.adaptive_avg_pool3d(a, (3, 2, 4)), None, None),
        (lambda a: clpool.adaptive_max_pool3d(a, (3, 2, 4), True), None, None),
    ]
    for run, op, args in runs:
        for dev, host_x in ((view, part), (whole, host)):
            got = run(dev)
            want = run(host_x)
            for g, w in zip(got if isinstance(got, tuple) else (got,),
                            want if isinstance(want, tuple) else (want,), strict=True):  # fmt: skip
                assert isinstance(g, cla.Array)
                assert np.array_equal(g.get().view(np.uint16), np.asarray(w).view(np.uint16))
        if op is not None:
            out, idx = run(view)
            t_out, t_idx = op(tensor(part), *args, return_indices=True)
            assert np.array_equal(bits(out), bits(t_out)) and np.array_equal(idx.get(), t_idx)
    x = data(rng, (2, 3, 40), special=True)
    idx = rng.integers(0, 30, x.shape)
    got = clpool.max_unpool1d(cla.to_device(queue, x), cla.to_device(queue, idx), 2)
    assert isinstance(got, cla.Array) and got.dtype == BF16
    want = F.max_unpool1d(tensor(x), torch.from_numpy(idx), 2)
    assert np.array_equal(bits(got), bits(want))


def test_new_families_take_torch_tensors():
    rng = np.random.default_rng(26)
    x = tensor(data(rng, (2, 3, 5, 6, 8), special=True))
    out, idx = clpool.max_pool3d_with_indices(x, 3, 2, 1)
    want, want_i = F.max_pool3d(x, 3, 2, 1, return_indices=True)
    assert out.dtype == torch.bfloat16 and torch.equal(idx, want_i)
    assert torch.equal(out.view(torch.int16), want.view(torch.int16))
    got = clpool.avg_pool3d(x, 2, 1, 1, False, False)  # torch CPU has no bfloat16 one
    assert got.dtype == torch.bfloat16
    assert_rounded_once(got, F.avg_pool3d(x.float(), 2, 1, 1, False, False).numpy())
    got = clpool.adaptive_avg_pool3d(x, (2, 3, 5))  # torch CPU sums it in bfloat16
    assert got.dtype == torch.bfloat16
    assert_rounded_once(got, F.adaptive_avg_pool3d(x.float(), (2, 3, 5)).numpy())
    out, idx = clpool.adaptive_max_pool2d(x[0], (4, 5), True)
    want, want_i = F.adaptive_max_pool2d(x[0], (4, 5), True)
    assert out.dtype == torch.bfloat16 and torch.equal(idx, want_i)
    assert torch.equal(out.view(torch.int16), want.view(torch.int16))
    got = clpool.max_unpool2d(out, idx, 2, output_size=(8, 10))
    want = F.max_unpool2d(want, want_i, 2, output_size=(8, 10))
    assert got.dtype == torch.bfloat16 and np.array_equal(bits(got), bits(want))


def test_clpool_torch_autograd_new_families():
    import clpool.torch as ct

    rng = np.random.default_rng(27)
    x = tensor(data(rng, (2, 3, 5, 6, 8)))
    for name, args in [("max_pool3d", (3, 2, 1)), ("avg_pool3d", (3, 2, 1)),
                       ("adaptive_avg_pool3d", ((2, 4, 3),)),
                       ("adaptive_max_pool2d", ((4, 5),))]:  # fmt: skip
        _check_autograd(name, x[0] if name == "adaptive_max_pool2d" else x, args, rng)
    pooled, idx = F.max_pool2d(x[0], 2, return_indices=True)
    pooled = pooled.detach()
    mine, theirs = pooled.clone().requires_grad_(), pooled.float().requires_grad_()
    out = ct.max_unpool2d(mine, idx, 2, output_size=(6, 8))
    f32 = F.max_unpool2d(theirs, idx, 2, output_size=(6, 8))
    assert out.dtype == torch.bfloat16
    assert np.array_equal(bits(out), bits(rne(f32.detach().numpy())))
    g = tensor(data(rng, tuple(out.shape)))
    out.backward(g)
    f32.backward(g.float())
    assert np.array_equal(bits(mine.grad), bits(rne(theirs.grad.numpy())))
