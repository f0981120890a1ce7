"""Max unpooling in 1-D, 2-D and 3-D and its gradient against PyTorch CPU and the float64
reference: indices from max_pool*d and hand-made ones with duplicates (the later input
wins), output_size's forms and errors, indices outside the output (host: refused before
launch; device: flagged, nothing written outside), dtypes, unbatched and empty batches,
bit-identical runs, and clpool.torch's functions and modules; which path a call takes
(the window gather, one work-item per plane, the fallback for indices outside their
windows) and that each gives the same bits."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest
from pool_cases import check_argument_error, check_error, same_bits

import clpool
from clpool import policy, unpool
from clpool import reference as ref
from clpool.errors import PoolArgumentError

torch = pytest.importorskip("torch")
F = torch.nn.functional

POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
pytestmark = pytest.mark.usefixtures("torch_one_thread")  # torch's CPU unpool: conftest
UNPOOL = {1: F.max_unpool1d, 2: F.max_unpool2d, 3: F.max_unpool3d}
OURS = {1: clpool.max_unpool1d, 2: clpool.max_unpool2d, 3: clpool.max_unpool3d}
BACKWARD = {1: clpool.max_unpool1d_backward, 2: clpool.max_unpool2d_backward,
            3: clpool.max_unpool3d_backward}  # fmt: skip


def _pooled(rng, spatial: int, batched: bool = True):
    """(x, pooled, indices, kernel, stride, padding) from torch's max_pool with indices."""
    sides = {1: (5, 30), 2: (3, 12), 3: (2, 7)}[spatial]
    size = tuple(int(v) for v in rng.integers(*sides, spatial))
    k = int(rng.integers(1, 4))
    s = int(rng.integers(1, 4))
    p = int(rng.integers(0, k // 2 + 1))
    size = tuple(max(v, k) for v in size)
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 4)), *size)
    x = torch.from_numpy(rng.standard_normal(shape if batched else shape[1:]).astype(np.float32))
    y, i = POOL[spatial](x, k, s, p, return_indices=True)
    return x, y, i, k, s, p


@pytest.mark.parametrize("spatial", [1, 2, 3])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_after_max_pool_equals_torch(spatial, index_dtype):
    rng = np.random.default_rng(spatial)
    for case in range(6):
        x, y, i, k, s, p = _pooled(rng, spatial, batched=case % 3 != 2)
        # the input's own size (strictly inside the allowed range) and the default
        for size in (x.shape[-spatial:], None):
            try:
                want = UNPOOL[spatial](y, i, k, s, p, output_size=size)
            except RuntimeError:  # the default size can be too small for torch's indices
                continue
            got = OURS[spatial](y, i.to(index_dtype), k, s, p, output_size=size)
            assert got.dtype == want.dtype and torch.equal(got, want), (x.shape, k, s, p, size)


def _duplicates(rng, spatial: int, shape, out_sizes, dtype=np.float32):
    """x and hand-made int64 indices naming few outputs, so that many collide."""
    x = rng.standard_normal(shape).astype(dtype)
    span = max(1, int(np.prod(out_sizes)) // 4)
    return x, rng.integers(0, span, shape).astype(np.int64)


@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_duplicates_the_later_input_wins_as_torch(spatial):
    rng = np.random.default_rng(10 + spatial)
    shape = (2, 3, *([4, 3, 5][:spatial]))
    sizes = tuple(v * 2 for v in shape[2:])
    x, i = _duplicates(rng, spatial, shape, sizes)
    want = ref.max_unpool(x, i, spatial, 2)
    np.testing.assert_array_equal(OURS[spatial](x, i, 2), want)
    np.testing.assert_array_equal(OURS[spatial](x, i.astype(np.int32), 2), want)
    _agrees_with_torch((want, UNPOOL[spatial](torch.from_numpy(x), torch.from_numpy(i), 2)))


def _agrees_with_torch(*compared: tuple) -> None:
    """Each (reference result, torch's) pair agrees, unless this torch's CPU max_unpool
    lets an earlier input win where two name one output (some versions do): then skip."""
    for want, theirs in compared:
        if not np.array_equal(theirs.numpy(), want):
            pytest.skip(f"torch {torch.__version__}'s CPU max_unpool lets an earlier input win")


def _window_cases(spatial: int):
    """(x, indices, k, s, p, output size) with k > s, each index inside its own input's
    window, many naming one output (inputs whose windows overlap)."""
    rng = np.random.default_rng(60 + spatial)
    for k, s, p in ((3, 1, 1), (3, 2, 1), (2, 1, 0), (4, 2, 2)):
        sizes = tuple(int(v) for v in rng.integers(2, 6, spatial))
        out_sizes = tuple((v - 1) * s + k - 2 * p for v in sizes)
        shape = (2, 2, *sizes)
        at = []  # per axis, an output in each input's window (clipped to the output)
        for axis, (n, o) in enumerate(zip(sizes, out_sizes, strict=True)):
            start = (np.arange(n) * s - p).reshape((n,) + (1,) * (spatial - axis - 1))
            lo, hi = np.maximum(start, 0), np.minimum(start + k, o)
            at.append(lo + rng.integers(0, 1 << 20, shape) % (hi - lo))
        flat = np.ravel_multi_index(tuple(at), out_sizes)
        x = rng.standard_normal(shape).astype(np.float32)
        yield x, flat.astype(np.int64), k, s, p, out_sizes


@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_overlapping_windows_the_later_input_wins_on_the_fast_path(spatial, launched, fast):
    """Indices inside their windows take the window gather, which must walk an output's
    inputs from the latest; the same indices shuffled (most outside their windows) take
    clear, claim and scatter."""
    rng = np.random.default_rng(80 + spatial)
    compared = []
    for x, i, k, s, p, size in _window_cases(spatial):
        assert len(np.unique(i)) < i.size  # collisions
        shuffled = rng.permutation(i.ravel()).reshape(i.shape)
        for indices, kernels in zip((i, shuffled), fast, strict=True):
            want = ref.max_unpool(x, indices, spatial, k, s, p, size).astype(np.float32)
            for kind in (np.int64, np.int32):
                launched.clear()
                assert same_bits(OURS[spatial](x, indices.astype(kind), k, s, p, size), want)
                assert [name for name, _ in launched] == kernels, (k, s, p)
            theirs = UNPOOL[spatial](torch.from_numpy(x), torch.from_numpy(indices), k, s, p, size)
            compared.append((want, theirs))
    _agrees_with_torch(*compared)


FAST = ["max_unpool_window"]
GENERAL = ["max_unpool_clear", "max_unpool_claim", "max_unpool_scatter"]
PLANE = ["max_unpool_plane"]


def _as_launched(kernels: list[str], spatial: int, k, s, p) -> list[str]:
    """The kernels of a fast-path list that a call of (spatial, k, s, p) launches: the
    window gather of tiling windows (kernel = stride, no padding) is max_unpool_tile."""
    tiles = k == s and p == 0
    return [("max_unpool_tile" if n == "max_unpool_window" and tiles else n) for n in kernels]


@pytest.fixture(params=["window", "plane"])
def fast(request) -> Iterator[tuple[list[str], list[str]]]:
    """Under the window gather (a GPU's) or one work-item per plane (a CPU's): the kernels
    indices inside their windows launch, and those others launch."""
    from clpool import policy

    with policy.use(per_plane=request.param == "plane"):
        yield (FAST, FAST + GENERAL) if request.param == "window" else (PLANE, PLANE)


@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_max_pool_indices_take_the_fast_path(spatial, launched, device, fast):
    rng = np.random.default_rng(70 + spatial)
    queue = clpool.default_queue(device)
    for _ in range(4):
        x, y, i, k, s, p = _pooled(rng, spatial)
        size = x.shape[-spatial:]
        want = UNPOOL[spatial](y, i, k, s, p, output_size=size).numpy()
        for yy, ii in _host_and_device(queue, y, i):
            launched.clear()
            got = OURS[spatial](yy, ii, k, s, p, size)
            got = got.get() if isinstance(got, cla.Array) else got.numpy()
            kernels = _as_launched(fast[0], spatial, k, s, p)
            assert same_bits(got, want) and [n for n, _ in launched] == kernels, (k, s, p)


def test_an_index_outside_its_window_falls_back(launched, device, fast):
    """One index outside its input's window (inside the output): the gather flags it and
    clear, claim and scatter rewrite the whole output, on host and device inputs (one
    work-item per plane needs no second pass)."""
    rng = np.random.default_rng(8)
    queue = clpool.default_queue(device)
    x, y, i = _pooled_k2(rng)
    compared = []
    for where in ((0, 0, 0, 0), (1, 2, 3, 4), (1, 2, -1, -1)):  # first, middle, last input
        bad = i.clone()
        bad[where] = i[0, 0, 2, 2]  # another window's output
        want = ref.max_unpool(y.numpy(), bad.numpy(), 2, 2, 2, 0, x.shape[-2:])
        want = want.astype(np.float32)
        for yy, ii in _host_and_device(queue, y, bad):
            launched.clear()
            got = clpool.max_unpool2d(yy, ii, 2, 2, 0, x.shape[-2:])
            got = got.get() if isinstance(got, cla.Array) else got.numpy()
            kernels = _as_launched(fast[1], 2, 2, 2, 0)
            assert same_bits(got, want) and [n for n, _ in launched] == kernels, where
        compared.append((want, F.max_unpool2d(y, bad, 2, 2, 0, x.shape[-2:])))
    _agrees_with_torch(*compared)


def _tiling_cases(spatial: int):
    """(x, indices, k, output size, bad) for windows tiling the output (kernel = stride, no
    padding): each index inside its own window, clipped to an output smaller than the
    default, equal to it or larger (outputs in no window); and `bad` copies of the
    indices with one index moved inside the plane but outside its window (another
    window's output, an output in no window, past a clipped window's last column, which
    is the next row's first, or past a clipped window's last row in a depth, which is the
    next depth's first row)."""
    rng = np.random.default_rng(90 + spatial)
    uneven = {2: [(2, 3)], 3: [(3, 2, 2)]}.get(spatial, [])  # a window of unequal sides
    for k in [(2,), (3,), *uneven]:
        ks = k * spatial if len(k) == 1 else k
        sizes = tuple(int(v) for v in rng.integers(2, 5, spatial))
        for extra in (-1, 0, 1):
            out = tuple(n * kk + extra for n, kk in zip(sizes, ks, strict=True))
            shape = (2, 3, *sizes)
            at = []
            for axis, (n, kk, o) in enumerate(zip(sizes, ks, out, strict=True)):
                start = (np.arange(n) * kk).reshape((n,) + (1,) * (spatial - axis - 1))
                span = np.minimum(start + kk, o) - start  # the window, clipped
                at.append(start + rng.integers(0, 1 << 20, shape) % span)
            idx = np.ravel_multi_index(tuple(at), out)
            bad = []
            other = idx.copy()
            other[1, 2, ..., -1] = idx[0, 0].flat[0]  # the first window's output
            bad.append(other)
            if extra > 0:  # the last output, in no window
                nowhere = idx.copy()
                nowhere[0, 1].flat[-1] = int(np.prod(out)) - 1
                bad.append(nowhere)
            if extra < 0 and spatial > 1:  # one past the first row's last column
                wrap = idx.copy()
                wrap[(1, 0) + (0,) * (spatial - 1) + (-1,)] = out[-1]
                bad.append(wrap)
            if extra < 0 and spatial == 3:  # one past the first depth's last row
                wrap = idx.copy()
                wrap[1, 0, 0, -1, 0] = out[1] * out[2]
                bad.append(wrap)
            x = rng.standard_normal(shape).astype(np.float32)
            yield x, idx.astype(np.int64), k if len(k) == 1 else ks, out, bad


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_tiling_windows_take_the_tile_path(spatial, rows, launched, device):
    """Windows tiling the output: max_unpool_tile writes each output from its owner (on
    device indices, int64 and int32, with 1 or 3 rows of owners per work-item); an index
    outside its window inside the plane falls back to clear, claim and scatter."""
    from clpool import policy

    queue = clpool.default_queue(device)
    tile = ["max_unpool_tile"]
    compared = []
    with policy.use(per_plane=False, rows=rows):
        for x, idx, k, out, bad in _tiling_cases(spatial):
            kk = k[0] if len(k) == 1 else k
            for indices, kernels in ((idx, tile), *((b, tile + GENERAL) for b in bad)):
                want = ref.max_unpool(x, indices, spatial, kk, kk, 0, out).astype(np.float32)
                for kind in (np.int64, np.int32):
                    launched.clear()
                    xd, idd = cla.to_device(queue, x), cla.to_device(queue, indices.astype(kind))
                    got = OURS[spatial](xd, idd, kk, kk, 0, out).get()
                    assert same_bits(got, want), (k, out, kind)
                    assert [n for n, _ in launched] == kernels, (k, out)
                theirs = UNPOOL[spatial](torch.from_numpy(x), torch.from_numpy(indices), kk,
                                         kk, 0, out)  # fmt: skip
                compared.append((want, theirs))
    _agrees_with_torch(*compared)


def _host_and_device(queue, *tensors) -> tuple[tuple, tuple]:
    """The tensors as they are, and as device arrays on `queue`."""
    return tensors, tuple(cla.to_device(queue, t.numpy()) for t in tensors)


def _pooled_k2(rng):
    x = torch.from_numpy(rng.standard_normal((2, 3, 8, 10)).astype(np.float32))
    return (x, *F.max_pool2d(x, 2, 2, return_indices=True))


def test_an_index_outside_the_output_is_flagged_by_the_fast_path(launched, device, fast):
    """A device index outside the output, the others inside their windows: the fast
    path's flag raises, with no fallback."""
    queue = clpool.default_queue(device)
    x, y, i = _pooled_k2(np.random.default_rng(9))
    for bad_index in (-1, 80, 2**40):
        bad = i.clone()
        bad[1, 2, 3, 4] = bad_index
        launched.clear()
        with pytest.raises(PoolArgumentError, match="invalid max index") as info:
            clpool.max_unpool2d(*_host_and_device(queue, y, bad)[1], 2)
        check_error(info, "max_unpool2d", device, "float32")
        assert [n for n, _ in launched] == _as_launched(fast[0], 2, 2, 2, 0)


def test_the_later_of_two_named_in_reverse_order_wins():
    """Input 1 then 0 name one output: input 1 is later in input order than 0 whatever
    their values or order of arrival."""
    x = np.array([[[5.0, 7.0, 9.0, 1.0]]], np.float32)
    i = np.array([[[3, 3, 0, 3]]], np.int64)
    np.testing.assert_array_equal(clpool.max_unpool1d(x, i, 2), [[[9, 0, 0, 1, 0, 0, 0, 0]]])


def test_device_arrays_and_bit_identical_runs(device):
    rng = np.random.default_rng(3)
    queue = clpool.default_queue(device)
    x, i = _duplicates(rng, 2, (3, 4, 16, 16), (32, 32))
    xd, idd = cla.to_device(queue, x), cla.to_device(queue, i)
    first = clpool.max_unpool2d(xd, idd, 2)
    assert isinstance(first, cla.Array) and first.queue == queue
    want = ref.max_unpool(x, i, 2, 2).astype(x.dtype)  # the later input wins
    runs = [first.get()] + [clpool.max_unpool2d(xd, idd, 2).get() for _ in range(3)]
    assert all(same_bits(r, want) for r in runs)
    theirs = F.max_unpool2d(torch.from_numpy(x), torch.from_numpy(i), 2).numpy()
    if not same_bits(theirs, want):  # as in test_duplicates_the_later_input_wins_as_torch
        pytest.skip(f"torch {torch.__version__}'s CPU max_unpool lets an earlier input win")


@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_against_the_reference(spatial):
    rng = np.random.default_rng(20 + spatial)
    for _ in range(4):
        x, y, i, k, s, p = _pooled(rng, spatial)
        size = x.shape[-spatial:]
        want = ref.max_unpool(y.numpy(), i.numpy(), spatial, k, s, p, size)
        np.testing.assert_array_equal(OURS[spatial](y.numpy(), i.numpy(), k, s, p, size), want)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_dtypes(dtype, device, monkeypatch):
    from clpool.plans import dtype_problem

    monkeypatch.setenv("CLPOOL_FP16", "storage")
    if dtype_problem(np.dtype(dtype), device):
        pytest.skip(f"the device lacks {np.dtype(dtype).name}")
    rng = np.random.default_rng(4)
    x, i = _duplicates(rng, 2, (2, 3, 5, 6), (10, 12), dtype)
    got = clpool.max_unpool2d(x, i, 2)
    want = F.max_unpool2d(torch.from_numpy(x), torch.from_numpy(i), 2).numpy()
    assert same_bits(got, want)
    g = rng.standard_normal(want.shape).astype(dtype)
    assert same_bits(clpool.max_unpool2d_backward(g, x, i, 2), ref.max_unpool_backward(
        g, x, i, 2).astype(dtype))  # fmt: skip


def test_output_size_forms():
    x = np.ones((2, 3, 4, 4), np.float32)
    i = np.zeros((2, 3, 4, 4), np.int64)
    # default (4 - 1) * 2 + 2 = 8: sizes strictly between 6 and 10, with or without (N, C)
    for size in [(7, 9), [2, 3, 9, 7], torch.Size([7, 7])]:
        got = clpool.max_unpool2d(x, i, 2, output_size=size)
        assert got.shape == F.max_unpool2d(torch.from_numpy(x), torch.from_numpy(i), 2,
                                           output_size=size).shape  # fmt: skip
    assert clpool.max_unpool2d(x[0], i[0], 2).shape == (3, 8, 8)
    assert clpool.max_unpool1d(x[0, 0], i[0, 0], 3, stride=1, padding=1).shape == (4, 4)
    assert clpool.max_unpool3d(x, i, (1, 2, 2), output_size=(3, 8, 9)).shape == (2, 3, 8, 9)


@pytest.mark.parametrize("size, why", [
    ((6, 8), "dim 0 must be between 6 and 10"),
    ((8, 10), "dim 1 must be between 6 and 10"),
    ((8,), "2 or 4 elements"),
    ((1, 8, 8), "2 or 4 elements"),
    (8, "sequence"),
    ((8.0, 8), "ints"),
])  # fmt: skip
def test_output_size_errors(size, why, device):
    x = np.ones((2, 3, 4, 4), np.float32)
    i = np.zeros((2, 3, 4, 4), np.int64)
    with pytest.raises(PoolArgumentError, match=why) as info:
        clpool.max_unpool2d(x, i, 2, output_size=size)
    check_error(info, "max_unpool2d", device, "float32")
    if not isinstance(size, int) and float not in map(type, size):
        with pytest.raises((ValueError, RuntimeError)):
            F.max_unpool2d(torch.from_numpy(x), torch.from_numpy(i), 2, output_size=size)


def test_aten_checks(device):
    x = np.ones((1, 2, 3, 3), np.float32)
    i = np.zeros((1, 2, 3, 3), np.int64)
    two, three = clpool.max_unpool2d, clpool.max_unpool3d
    bad = [
        (two, x, i[..., :2], 2, {}),  # indices of another shape
        (two, x[0, 0], i[0, 0], 2, {}),  # rank
        (two, x[:, :0], i[:, :0], 2, {}),  # empty channel dimension
        (two, x, i.astype(np.float32), 2, {}),  # indices' dtype
        (three, x[None], i[None], 2, {"stride": 0}),  # 3-D stride
        (three, x[None], i[None], 1, {"padding": (2, 0, 0)}),  # size -2
    ]
    for op, a, b, k, kw in bad:
        check_argument_error(lambda: op(a, b, k, **kw), op.__name__, device)  # noqa: B023


def test_empty_batch_and_empty_output():
    x = np.ones((0, 2, 3, 3), np.float32)
    assert clpool.max_unpool2d(x, x.astype(np.int64), 2).shape == (0, 2, 6, 6)
    # an output of no elements: nothing to name, no error (as ATen)
    y = np.ones((1, 2, 1, 3), np.float32)
    got = clpool.max_unpool2d(y, np.full(y.shape, 5, np.int64), (2, 2), padding=(1, 0))
    assert got.shape == (1, 2, 0, 6)


@pytest.mark.parametrize("bad_index", [-1, 16])
def test_host_indices_outside_the_output_are_refused_before_launch(bad_index, launched, device):
    x = np.ones((2, 2, 2, 2), np.float32)
    i = np.zeros((2, 2, 2, 2), np.int64)
    i[1, 1, 1, 0] = bad_index
    for indices in (i, torch.from_numpy(i), i.astype(np.int32)):
        with pytest.raises(PoolArgumentError, match=f"invalid max index: {bad_index} .*4x4"):
            clpool.max_unpool2d(x, indices, 2)
    assert launched == []
    with pytest.raises(RuntimeError, match=f"invalid max index: {bad_index}"):
        F.max_unpool2d(torch.from_numpy(x), torch.from_numpy(i), 2)


def test_device_indices_outside_are_flagged_and_nothing_is_written_outside(device):
    queue = clpool.default_queue(device)
    rng = np.random.default_rng(5)
    shape, out_shape = (2, 3, 4, 4), (2, 3, 8, 8)
    x = rng.standard_normal(shape).astype(np.float32) + 10  # never 0
    i = rng.integers(0, 64, shape).astype(np.int64)
    i[0, 0, 0, :2] = (-1, 64)  # before plane 0, past plane 0 (into plane 1)
    i[1, 2, 3, 3] = 64  # past the last plane
    guard = 256
    nbytes = (int(np.prod(out_shape)) + guard) * 4
    buf = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, nbytes)
    cl.enqueue_fill_buffer(queue, buf, np.float32(-7), 0, nbytes).wait()
    out = cla.Array(queue, out_shape, np.float32, data=buf)
    with pytest.raises(PoolArgumentError, match="invalid max index") as info:
        clpool.max_unpool2d(cla.to_device(queue, x), cla.to_device(queue, i), 2, out=out)
    check_error(info, "max_unpool2d", device, "float32")
    whole = np.empty(int(np.prod(out_shape)) + guard, np.float32)
    cl.enqueue_copy(queue, whole, buf).wait()
    assert (whole[-guard:] == -7).all()
    # the valid indices are written as without the bad ones
    keep = (i >= 0) & (i < 64)
    want = np.zeros((6, 64), np.float32)
    for plane, pos in zip(*np.nonzero(keep.reshape(6, 16)), strict=True):
        want[plane, i.reshape(6, 16)[plane, pos]] = x.reshape(6, 16)[plane, pos]
    np.testing.assert_array_equal(whole[: want.size].reshape(want.shape), want)
    # the flag is cleared by the next call
    i[keep == 0] = 0
    clpool.max_unpool2d(cla.to_device(queue, x), cla.to_device(queue, i), 2, out=out)


@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_gradient_is_torch_autograds(spatial):
    rng = np.random.default_rng(30 + spatial)
    x, y, i, k, s, p = _pooled(rng, spatial)
    shape = y.shape
    y = y.clone().requires_grad_()
    _, dup = _duplicates(rng, spatial, shape, x.shape[-spatial:])  # duplicates included
    for indices in (i, torch.from_numpy(dup)):
        size = x.shape[-spatial:]
        out = UNPOOL[spatial](y, indices, k, s, p, output_size=size)
        g = torch.randn(out.shape, dtype=torch.float32)
        (want,) = torch.autograd.grad(out, y, g)
        got = BACKWARD[spatial](g, y.detach(), indices, k, s, p, size)
        assert torch.equal(got, want)
        twice = BACKWARD[spatial](g, y.detach(), indices.int(), k, s, p, size)
        assert torch.equal(twice, want)


def test_backward_checks_grad_output(device):
    x = np.ones((1, 2, 3, 3), np.float32)
    i = np.zeros((1, 2, 3, 3), np.int64)
    g = np.ones((1, 2, 6, 6), np.float32)
    label = "max_unpool2d_backward"
    check_argument_error(lambda: clpool.max_unpool2d_backward(g[..., :5], x, i, 2), label, device)
    check_argument_error(lambda: clpool.max_unpool2d_backward(g[0], x, i, 2), label, device)
    with pytest.raises(PoolArgumentError):
        clpool.max_unpool2d_backward(g.astype(np.float64), x, i, 2)


# ---------------------------------------------------------------- clpool.torch


@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_torch_functions_and_modules(spatial):
    import clpool.torch as ct

    rng = np.random.default_rng(40 + spatial)
    x, y, i, k, s, p = _pooled(rng, spatial)
    size = x.shape
    ours = getattr(ct, f"max_unpool{spatial}d")
    module = getattr(ct, f"MaxUnpool{spatial}d")(k, s, p)
    theirs = getattr(torch.nn, f"MaxUnpool{spatial}d")(k, s, p)
    assert repr(module) == repr(theirs)
    want = theirs(y, i, output_size=size)
    assert torch.equal(module(y, i, output_size=size), want)
    a = y.clone().requires_grad_()
    b = y.clone().requires_grad_()
    out = ours(a, i, k, s, p, size)
    assert torch.equal(out, want)
    g = torch.randn(out.shape)
    out.backward(g)
    UNPOOL[spatial](b, i, k, s, p, size).backward(g)
    assert torch.equal(a.grad, b.grad)


@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_torch_gradcheck_float64(spatial, device):
    import clpool.torch as ct
    from clpool.plans import dtype_problem

    if dtype_problem(np.dtype(np.float64), device):
        pytest.skip("the device lacks float64")
    rng = np.random.default_rng(50 + spatial)
    shape = (1, 2, *([3, 2, 2][:spatial]))
    y = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    # distinct indices: where two name one output, the earlier input's true derivative is
    # 0 but torch's (and clpool's) gradient is the gather
    plane = int(np.prod(shape[2:]))
    i = np.stack([rng.permutation(plane * 2**spatial)[:plane] for _ in range(2)])
    i = i.reshape(shape)
    fn = getattr(ct, f"max_unpool{spatial}d")
    assert torch.autograd.gradcheck(lambda t: fn(t, torch.from_numpy(i), 2), (y,))


def test_many_work_groups_naming_one_output_the_last_input_wins(device):
    """Every input of a long row names the same four outputs: work-groups on other threads
    or compute units race for them, and the owner map still lets the last input win."""
    queue = clpool.default_queue(device)
    x = np.arange(1, 2**18 + 1, dtype=np.float32).reshape(1, 1, -1)
    i = np.tile(np.arange(4), 2**16).reshape(x.shape)
    xd, idd = cla.to_device(queue, x), cla.to_device(queue, i)
    for _ in range(5):
        got = clpool.max_unpool1d(xd, idd, 1).get()
        np.testing.assert_array_equal(got[0, 0, :4], x[0, 0, -4:])


def test_backward_gives_zero_for_an_index_outside_the_output(device):
    queue = clpool.default_queue(device)
    x = np.ones((1, 1, 4), np.float32)
    i = np.array([[[0, 8, -1, 7]]], np.int64)
    g = np.arange(1, 9, dtype=np.float32).reshape(1, 1, 8)
    want = [[[1, 0, 0, 8]]]
    np.testing.assert_array_equal(clpool.max_unpool1d_backward(g, x, i, 2), want)
    on_device = clpool.max_unpool1d_backward(g, x, cla.to_device(queue, i), 2)
    np.testing.assert_array_equal(on_device.get(), want)


@pytest.mark.parametrize("index", [np.int64, np.int32])
@pytest.mark.parametrize("gpu", [False, True])
def test_the_backward_gathers_runs_of_positions_and_the_rest(
    device, index, gpu, build_options, local_sizes
):
    """A CPU's work-item copies unpool.GATHER_RUN positions of a plane, the last one the
    rest, in work-groups along one plane (a GPU's one position): planes of two full runs
    and a remainder, an index outside the output in a run and in the remainder (0 there),
    against the reference, as planned for a CPU and for a GPU."""
    run = unpool.GATHER_RUN
    positions = 2 * run + 3
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, positions)).astype(np.float32)
    i = rng.integers(0, 2 * positions, x.shape).astype(index)
    i[0, 1, run + 1], i[1, 2, 2 * run + 2], i[1, 0, 0] = 2 * positions, -1, 2 * positions + 9
    g = rng.standard_normal((2, 3, 2 * positions)).astype(np.float32)
    with policy.use(gpu=gpu):
        got = clpool.max_unpool1d_backward(g, x, i, 2)
    inside = (i >= 0) & (i < 2 * positions)
    want = np.where(inside, np.take_along_axis(g, np.where(inside, i, 0), -1), 0)
    assert same_bits(got, want) and not inside.all()
    option = f"-DCLPOOL_GATHER_RUN={run}"
    assert any(option in o for o in build_options) != gpu, build_options
    local = local_sizes[-1]
    assert (local[1:] == (1, 1) and local[0] > 1) != gpu, local_sizes


def test_queue_out_and_strided_device_arrays(device):
    queue = clpool.default_queue(device)
    rng = np.random.default_rng(6)
    x, i = _duplicates(rng, 2, (2, 3, 4, 4), (8, 8))
    want = F.max_unpool2d(torch.from_numpy(x), torch.from_numpy(i), 2).numpy()
    got = clpool.max_unpool2d(x, i, 2, queue=queue)
    assert isinstance(got, cla.Array) and same_bits(got.get(), want)
    out = cla.empty(queue, want.shape, np.float32)
    assert clpool.max_unpool2d(x, i, 2, out=out) is out and same_bits(out.get(), want)
    # a strided device input (a transposed view) is copied to a dense one first
    xt = cla.to_device(queue, np.ascontiguousarray(x.transpose(0, 1, 3, 2))).transpose(
        (0, 1, 3, 2))  # fmt: skip
    assert same_bits(clpool.max_unpool2d(xt, cla.to_device(queue, i), 2).get(), want)
    for kind in (np.int64, np.int32):  # strided indices: copied as indices, not as floats
        it = cla.to_device(queue, np.ascontiguousarray(i.transpose(0, 1, 3, 2).astype(kind)))
        it = it.transpose((0, 1, 3, 2))
        assert same_bits(clpool.max_unpool2d(x, it, 2).get(), want)
        g = np.random.default_rng(7).standard_normal(want.shape).astype(np.float32)
        got = clpool.max_unpool2d_backward(g, x, it, 2)
        assert same_bits(got.get(), ref.max_unpool_backward(g, x, i, 2).astype(np.float32))
    x5 = cla.to_device(queue, np.ones((1, 2, 2, 2, 2), np.float32)).transpose((0, 1, 4, 3, 2))
    with pytest.raises(PoolArgumentError, match="contiguous"):
        clpool.max_unpool3d(x5, cla.zeros(queue, x5.shape, np.int64), 2)


def test_bad_dtypes_and_sizes_are_refused(device):
    i = np.zeros((1, 1, 2, 2), np.int64)
    for bad in (np.zeros((1, 1, 2, 2), np.int32), np.zeros((1, 1, 2, 2), "U1")):
        with pytest.raises(clpool.UnsupportedDtypeError):
            clpool.max_unpool2d(bad, i, 2)
    with pytest.raises(PoolArgumentError, match="largest allocation"):  # (2^30 + 2)^2 floats
        clpool.max_unpool2d(np.zeros((1, 1, 2, 2), np.float32), i, 2, stride=2**30)


def test_a_stride_of_zero_takes_the_general_path(launched):
    """1-D and 2-D unpooling take stride 0 (as ATen does): no window gather divides by it."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
    i = rng.integers(0, 2, x.shape)
    for stride in (0, (1, 0)):
        want = F.max_unpool2d(torch.from_numpy(x), torch.from_numpy(i), 2, stride).numpy()
        launched.clear()
        assert same_bits(clpool.max_unpool2d(x, i, 2, stride), want)
        assert [n for n, _ in launched] == GENERAL


def test_bfloat16_on_every_path(fast):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    for x, i, k, s, p, size in _window_cases(2):
        x = x.astype(ml_dtypes.bfloat16)
        for indices in (i, i[..., ::-1].copy()):  # the fast path, and outside the windows
            want = ref.max_unpool(x.astype(np.float32), indices, 2, k, s, p, size)
            got = clpool.max_unpool2d(x, indices, k, s, p, size)
            assert got.dtype == x.dtype and same_bits(got, want.astype(ml_dtypes.bfloat16))


def _channels_last(spatial: int, t):
    """`t` with its channels innermost: torch's channels_last or channels_last_3d; for 1-D
    an (N, L, C) tensor seen as (N, C, L)."""
    if spatial == 1:
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    return t.contiguous(memory_format={2: torch.channels_last, 3: torch.channels_last_3d}[spatial])


def _channels_last_cases(spatial: int):
    """(x, indices, k, s, p, output size): max_pool's, of 5 and of 19 channels (a CPU's
    rows take 16 of them at a time, then the rest one by one), windows that tile an output
    larger than they cover, overlapping windows, and the last two's indices
    moved outside their windows."""
    rng = np.random.default_rng(90 + spatial)
    for _ in range(3):
        x, y, i, k, s, p = _pooled(rng, spatial)
        yield y, i, k, s, p, x.shape[-spatial:]
    for channels in (5, 19):
        x = rng.standard_normal((2, channels, *(5, 7, 3)[:spatial])).astype(np.float32)
        y, i = POOL[spatial](torch.from_numpy(x), 2, 2, return_indices=True)
        yield y, i, 2, 2, 0, x.shape[-spatial:]
        moved = i.clone()  # outside their windows: in the first 16 channels only
        moved[:, :16] = i[:, :16].flip(-1)
        yield y, moved, 2, 2, 0, x.shape[-spatial:]
    for x, i, k, s, p, size in _window_cases(spatial):
        shuffled = rng.permutation(i.ravel()).reshape(i.shape)
        for indices in (i, shuffled):
            yield torch.from_numpy(x), torch.from_numpy(indices), k, s, p, size


@pytest.mark.parametrize("gpu", [False, True])
@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_channels_last_inputs_are_read_as_they_lie(
    spatial, gpu, launched, local_sizes, device, monkeypatch
):
    """Values or indices (or both) channels-last, as tensors, numpy and device arrays, as a
    CPU and a GPU plan them: the reference's values in torch's memory format (the input's
    for 2-D, else C-contiguous), and no copy kernel; the gradient too, from channels-last
    gradients. A GPU's work-groups take neighbouring planes where the output is
    channels-last; a CPU's channels-last tiles take its rows kernel."""
    from clpool import launch, policy

    local, built = local_sizes, []
    run = launch.run

    def spy(plan, *a):
        built.extend((s.name, _options(s.kernel)) for s in plan.steps)
        return run(plan, *a)

    monkeypatch.setattr(launch, "run", spy)
    queue = clpool.default_queue(device)
    rng = np.random.default_rng(95 + spatial)
    with policy.use(gpu=gpu):
        for y, i, k, s, p, size in _channels_last_cases(spatial):
            want = ref.max_unpool(y.numpy(), i.numpy(), spatial, k, s, p, size).astype(np.float32)
            g = torch.from_numpy(rng.standard_normal(want.shape).astype(np.float32))
            want_grad = ref.max_unpool_backward(g.numpy(), y.numpy(), i.numpy(), spatial)
            for yy, ii in ((_channels_last(spatial, y), i), (y, _channels_last(spatial, i)),
                           (_channels_last(spatial, y), _channels_last(spatial, i))):  # fmt: skip
                theirs = UNPOOL[spatial](yy, ii, k, s, p, size)
                launched.clear(), local.clear()
                got = OURS[spatial](yy, ii, k, s, p, size)
                assert same_bits(got.numpy(), want) and got.stride() == theirs.stride(), (k, s, p)
                on_device = [launch.channels_last_array(queue, t.numpy()) if t is not u
                             else cla.to_device(queue, t.numpy())
                             for t, u in ((yy, y), (ii, i))]  # fmt: skip
                got_d = OURS[spatial](*on_device, k, s, p, size)
                assert same_bits(launch.to_host(got_d), want)
                assert got_d.strides == tuple(v * 4 for v in theirs.stride())
                last = spatial == 2 and yy is not y
                if last and gpu:
                    planes = y.shape[0] * y.shape[1]
                    assert {sizes[:2] for sizes in local} == {(1, 1)}
                    assert {sizes[2] for sizes in local} == {min(planes & -planes, 64)}
                rows = last and ii is not i and not gpu and k == s and not p
                assert _tiles_rows(launched) == rows, (k, s, p, y.shape, [n for n, _ in launched])
                for gg in (g, _channels_last(spatial, g)):
                    built.clear()
                    grad = BACKWARD[spatial](gg, yy, ii, k, s, p, size)
                    assert same_bits(grad.numpy(), want_grad.astype(np.float32))
                    # a CPU's gather runs along the channels of channels-last indices (a
                    # 1-D tensor goes up C-contiguous)
                    inner = not gpu and ii is not i and y.shape[1] > 1 and spatial > 1
                    (options,) = [o for name, o in built if name == "max_unpool_gather"]
                    assert ("-DCLPOOL_CHANNELS_INNER" in options) == inner, options
                names = [name for name, _ in launched]
                assert not any(n.startswith("clpool_contiguous") for n in names), names


def _options(kernel: cl.Kernel) -> str:
    """The build options of `kernel`'s program."""
    program = kernel.get_info(cl.kernel_info.PROGRAM)
    return program.get_build_info(program.devices[0], cl.program_build_info.OPTIONS)


def _tiles_rows(launched) -> bool:
    return any(name == "max_unpool_tile_rows" for name, _ in launched)


@pytest.mark.parametrize("channel", [2, 17])
def test_a_cpus_channels_last_tiles_take_an_index_past_the_last_column_as_outside(channel):
    """Output width 5 from windows of 2 on 3 columns: the last window's second column lies
    past the row, so its index 5 names the next row's first element, in another window."""
    from clpool import policy

    y = torch.from_numpy(np.random.default_rng(13).standard_normal((1, 19, 2, 3)).astype("f4"))
    corners = torch.tensor([[0, 2, 4], [10, 12, 14]])  # each window's first element
    i = corners.expand(1, 19, 2, 3).clone()
    i[0, channel, 0, 2] = 5
    y, i = (t.contiguous(memory_format=torch.channels_last) for t in (y, i))
    with policy.use(gpu=False):
        got = clpool.max_unpool2d(y, i, 2, output_size=(4, 5))
    assert same_bits(got.numpy(), F.max_unpool2d(y, i, 2, output_size=(4, 5)).numpy())


@pytest.mark.parametrize("channel, channels", [(2, 4), (2, 19), (17, 19)])
@pytest.mark.parametrize("bad", [-1, 16])
def test_a_cpus_channels_last_tiles_flag_an_index_outside_the_output(
    bad, channel, channels, launched, device
):
    """In the channels a CPU's rows check one by one and in those it checks 16 at a time."""
    from clpool import launch, policy

    queue = clpool.default_queue(device)
    rng = np.random.default_rng(12)
    x = torch.from_numpy(rng.standard_normal((1, channels, 4, 4)).astype("f4"))
    y, i = F.max_pool2d(x, 2, return_indices=True)
    i[0, channel, 1, 0] = bad
    y, i = (launch.channels_last_array(queue, t.numpy()) for t in (y, i))
    with policy.use(gpu=False), pytest.raises(PoolArgumentError, match="invalid max index"):
        clpool.max_unpool2d(y, i, 2)
    assert [name for name, _ in launched] == ["max_unpool_tile_rows"]  # no fallback
