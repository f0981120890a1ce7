"""Adaptive max pooling in 1-D, 2-D and 3-D and its backward ops against PyTorch CPU and
the float64 reference: random sweeps (down- and upsampling, cells that do not divide the
input, None entries), NaN, ties and -inf, float16/32/64, int32 and int64 indices, unbatched
and empty inputs, device arrays, argument errors under each op's label, and clpool.torch's
functions, modules and gradcheck."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest
from pool_cases import check_argument_error, check_error, data, same_bits, scrambled

import clpool
from clpool import adaptive_max, policy
from clpool import reference as ref
from clpool.errors import PoolArgumentError

torch = pytest.importorskip("torch")
F = torch.nn.functional
aten = torch.ops.aten

FORWARD = {1: clpool.adaptive_max_pool1d, 2: clpool.adaptive_max_pool2d,
           3: clpool.adaptive_max_pool3d}  # fmt: skip
BACKWARD = {1: clpool.adaptive_max_pool1d_backward, 2: clpool.adaptive_max_pool2d_backward,
            3: clpool.adaptive_max_pool3d_backward}  # fmt: skip
TORCH = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}


def _cases(seed: int, count: int, rank: int, largest: int = 9) -> list[tuple[tuple, object]]:
    """(input shape, output_size): down- and upsampling, sizes that do not divide, None
    entries (not in 1-D: torch refuses them there), ints, unbatched inputs."""
    rng = np.random.default_rng(seed)
    found = []
    for _ in range(count):
        spatial = tuple(int(v) for v in rng.integers(1, largest + 1, rank))
        lead = (int(rng.integers(1, 3)), int(rng.integers(1, 4)))
        shape = (lead if rng.random() > 0.2 else lead[1:]) + spatial
        size: object = tuple(int(v) for v in rng.integers(1, largest + 3, rank))
        roll = rng.random()
        if roll < 0.15:
            size = int(rng.integers(1, largest + 2))
        elif roll < 0.3 and rank > 1:
            size = tuple(None if rng.random() < 0.5 else s for s in size)
        found.append((shape, size))
    return found


def _torch_backward(rank: int, g: np.ndarray, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """ATen's backward; in 1-D the 2-D op on (..., 1, L), as torch's autograd runs it."""
    g, x, idx = torch.from_numpy(g), torch.from_numpy(x), torch.from_numpy(idx)
    if rank == 1:
        return (
            aten.adaptive_max_pool2d_backward(g.unsqueeze(-2), x.unsqueeze(-2), idx.unsqueeze(-2))
            .squeeze(-2)
            .numpy()
        )
    op = aten.adaptive_max_pool2d_backward if rank == 2 else aten.adaptive_max_pool3d_backward
    return op(g, x, idx).numpy()


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_forward_and_backward_equal_torch_and_the_reference(device, rank):
    rng = np.random.default_rng(1600 + rank)
    for shape, size in _cases(1600 + rank, 25, rank):
        x = data(rng, shape, special=True)
        want, want_i = TORCH[rank](torch.from_numpy(x), size, return_indices=True)
        got, got_i = FORWARD[rank](x, size, return_indices=True)
        case = (shape, size)
        assert same_bits(got, want.numpy()) and same_bits(got_i, want_i.numpy()), case
        ref_v, ref_i = ref.adaptive_max_pool_nd(x, size, rank)
        assert np.array_equal(got, ref_v.astype(np.float32), equal_nan=True), case
        assert np.array_equal(got_i, ref_i), case
        assert same_bits(FORWARD[rank](x, size), got), case  # the values-only build
        g = rng.standard_normal(got.shape).astype(np.float32)
        back = BACKWARD[rank](g, x, got_i)
        assert same_bits(back, _torch_backward(rank, g, x, got_i)), case
        want_b = ref.adaptive_max_pool_backward(g, x, got_i, rank)
        np.testing.assert_allclose(back, want_b, rtol=1e-6, atol=1e-6, err_msg=str(case))
        assert same_bits(BACKWARD[rank](g, x, got_i), back), case  # run to run


def test_nan_ties_and_minus_inf_in_window_order(device):
    """The last NaN of a cell keeps its index, ties keep the first element, and a cell of
    -inf gives the index of its first element (ATen's CPU loop)."""
    nan, inf = np.nan, np.inf
    x = np.array([[[1, nan, 3, nan, 2, 5, 5, -inf, -inf, -inf]]], np.float32)
    v, i = clpool.adaptive_max_pool1d(x, 3, return_indices=True)  # cells 0-4, 3-7, 6-10
    assert np.array_equal(i, [[[3, 3, 6]]])
    assert np.isnan(v[0, 0, :2]).all() and v[0, 0, 2] == 5
    v, i = clpool.adaptive_max_pool1d(x[..., 7:], 2, return_indices=True)
    assert np.array_equal(i, [[[0, 1]]]) and (v == -inf).all()
    plane = np.array([[1, 7, 7], [7, nan, 0], [nan, 7, 7]], np.float32)[None]
    v, i = clpool.adaptive_max_pool2d(plane, (1, 1), return_indices=True)
    assert i.item() == 6 and np.isnan(v.item())
    v, i = clpool.adaptive_max_pool2d(np.nan_to_num(plane, nan=0), 1, return_indices=True)
    assert i.item() == 1 and v.item() == 7  # the first 7 in row-major order
    vol = np.zeros((1, 2, 2, 2), np.float32)
    vol[0, 1, 0, 0] = vol[0, 0, 1, 1] = 4
    v, i = clpool.adaptive_max_pool3d(vol, 1, return_indices=True)
    assert i.item() == 3  # (d, h, w) = (0, 1, 1) comes before (1, 0, 0)


@pytest.mark.parametrize("gpu", [False, True])
def test_cells_of_many_lanes_fold_as_atens_loop(device, build_options, gpu):
    """A CPU folds cells of 8 columns or more 4 columns at a time in 4 lanes (of 128 or more,
    or of 128 elements and a multiple of 16, 16 at a time in 16), then the lanes and the
    rest: the same values and indices as ATen's loop (and a GPU's), where ties, NaN and
    -inf fall in any lane, in the rest, or across rows: small integers (many ties), NaN,
    rows and whole cells of -inf; 1-D, 2-D and 3-D, float32 and float64."""
    rng = np.random.default_rng(41)
    dtypes = [np.float32] + ([np.float64] if clpool.discovery.has_fp64(device) else [])
    cases = [(1, (3, 5, 61), 4), (1, (2, 4, 40), 3), (2, (2, 3, 9, 25), (2, 3)),
             (3, (1, 2, 3, 5, 26), (2, 2, 3)), (1, (3, 5, 603), 4), (2, (2, 3, 9, 64), (2, 2)),
             (3, (1, 2, 3, 5, 270), (2, 2, 2))]  # fmt: skip
    with policy.use(gpu=gpu):
        for rank, shape, size in cases:
            for dtype in dtypes:
                x = rng.integers(0, 4, shape).astype(dtype)
                x[rng.random(shape) < 0.01] = np.nan
                if rank > 1:
                    x[..., 0, :] = -np.inf  # every plane's first row
                x[0, 0] = -np.inf  # a plane of -inf: every cell's first element
                want, want_i = TORCH[rank](torch.from_numpy(x), size, return_indices=True)
                for index in ("int64", "int32"):
                    got, got_i = FORWARD[rank](x, size, True, index_dtype=index)
                    assert same_bits(got, want.numpy()), (shape, dtype)
                    assert np.array_equal(got_i, want_i.numpy()), (shape, dtype, index)
        # a cell of two rows of 10: NaN in row 0's rest (column 8) and row 1's lane 1 (the
        # later wins); 5 in row 0's rest and row 1's lane 0 (the earlier wins); a tie of
        # lanes 2 and 1 (columns 2 and 5); a cell of -inf and one NaN
        x = np.zeros((1, 3, 2, 10), np.float32)
        x[0, 0, 0, 8] = x[0, 0, 1, 1] = np.nan
        x[0, 1, 0, 8] = x[0, 1, 1, 0] = 5
        x[0, 1, 0, 2] = x[0, 1, 0, 5] = 4
        x[0, 2] = -np.inf
        x[0, 2, 1, 6] = np.nan
        got, got_i = clpool.adaptive_max_pool2d(x, 1, True)
        want, want_i = F.adaptive_max_pool2d(torch.from_numpy(x), 1, return_indices=True)
        assert same_bits(got, want.numpy()) and np.array_equal(got_i, want_i.numpy())
        assert got_i.ravel().tolist() == [11, 8, 16]
    for lanes in (4, 16):
        built = any(f"-DCLPOOL_MAX_LANES={lanes}" in o for o in build_options)
        assert built == (not gpu), lanes


def test_overlapping_and_repeated_cells_add_in_output_order(device):
    """Upsampling puts an element in several cells, and non-divisible downsampling makes
    neighbouring cells share one: their gradients add up, in ATen's order, bit for bit."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 3, 5, 4)).astype(np.float32)
    for size in [(7, 11, 9), (2, 3, 3), (3, 5, 4)]:
        _, idx = clpool.adaptive_max_pool3d(x, size, return_indices=True)
        g = (rng.standard_normal(idx.shape) * 10.0 ** rng.integers(-3, 4, idx.shape)).astype(
            np.float32
        )
        got = clpool.adaptive_max_pool3d_backward(g, x, idx)
        assert same_bits(got, _torch_backward(3, g, x, idx)), size


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_float64_and_float16(device, monkeypatch, dtype):
    if dtype == np.float64 and not clpool.discovery.has_fp64(device):
        pytest.skip("no float64 on this device")
    monkeypatch.setenv("CLPOOL_FP16", "storage")
    rng = np.random.default_rng(11)
    for rank in (1, 2, 3):
        for shape, size in _cases(11 + rank, 6, rank):
            x = data(rng, shape, dtype, special=True)
            got, got_i = FORWARD[rank](x, size, return_indices=True)
            want, want_i = ref.adaptive_max_pool_nd(x, size, rank)
            # PoCL's vstore_half_rte gives NaN another payload (0x7fff for 0x7e00)
            assert np.array_equal(got, want.astype(dtype), equal_nan=True)
            assert got.dtype == dtype and np.array_equal(got_i, want_i)
            g = rng.standard_normal(got.shape).astype(dtype)
            back = BACKWARD[rank](g, x, got_i)
            assert back.dtype == dtype
            want_b = ref.adaptive_max_pool_backward(g.astype(np.float32), x, got_i, rank)
            # float16: the float32 sum rounded once; float64: ATen's own sums
            if dtype == np.float16:
                assert same_bits(back, want_b.astype(np.float32).astype(dtype)), (shape, size)
            else:
                assert same_bits(back, _torch_backward(rank, g, x, got_i)), (shape, size)


def test_int32_indices(device):
    x = data(np.random.default_rng(3), (2, 3, 4, 7, 6), special=True)
    v64, i64 = clpool.adaptive_max_pool3d(x, (3, 5, 4), return_indices=True)
    v32, i32 = clpool.adaptive_max_pool3d(x, (3, 5, 4), True, index_dtype="int32")
    assert i32.dtype == np.int32 and np.array_equal(i32, i64) and same_bits(v32, v64)
    g = np.random.default_rng(4).standard_normal(v64.shape).astype(np.float32)
    assert same_bits(clpool.adaptive_max_pool3d_backward(g, x, i32),
                     clpool.adaptive_max_pool3d_backward(g, x, i64))  # fmt: skip


def test_unbatched_empty_and_zero_sized_outputs(device):
    x = data(np.random.default_rng(5), (3, 5, 6))
    v, i = clpool.adaptive_max_pool2d(x, (2, 4), return_indices=True)
    bv, bi = clpool.adaptive_max_pool2d(x[None], (2, 4), return_indices=True)
    assert v.shape == (3, 2, 4) and same_bits(v, bv[0]) and same_bits(i, bi[0])
    empty = np.zeros((0, 2, 4, 5, 6), np.float32)
    v, i = clpool.adaptive_max_pool3d(empty, 2, return_indices=True)
    assert v.shape == i.shape == (0, 2, 2, 2, 2)
    assert clpool.adaptive_max_pool3d_backward(v, empty, i).shape == empty.shape
    for size, shape in [(0, (3, 0, 0)), ((0, 2), (3, 0, 2))]:
        v, i = clpool.adaptive_max_pool2d(x, size, return_indices=True)
        tv, ti = F.adaptive_max_pool2d(torch.from_numpy(x), size, return_indices=True)
        assert v.shape == i.shape == tuple(tv.shape) == shape
        grad = clpool.adaptive_max_pool2d_backward(v, x, i)
        assert same_bits(grad, np.zeros_like(x))


# (kernel, policy changes, output size): a GPU's scatter, every axis down or one up
OUTSIDE_KERNELS = [
    ("adaptive_max_pool_backward", dict(per_plane=False), 2),
    ("adaptive_max_pool_backward_plane", dict(per_plane=True), 2),
    ("adaptive_max_pool_scatter", dict(per_plane=False, gpu=True), 2),
    ("adaptive_max_pool_scatter", dict(per_plane=False, gpu=True), (2, 5)),
]


@pytest.mark.parametrize("kernel, changes, size", OUTSIDE_KERNELS)
@pytest.mark.parametrize("index", [np.int64, np.int32])
def test_an_index_outside_its_cell_is_ignored(device, launched, kernel, changes, size, index):
    """Each kernel (the gather, the CPU's plane per work-item, a GPU's scatter)
    adds a gradient only where its index names an element of its own cell: an index
    outside the plane, or outside its cell, adds nothing anywhere (the reference, which
    scatters, with those indices left out)."""
    x = np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4)
    _, idx = clpool.adaptive_max_pool2d(x, size, return_indices=True, index_dtype=index)
    g = np.ones(idx.shape, np.float32)
    bad = np.repeat(idx, 4, axis=1)  # four planes, for the per-plane kernel
    big = np.iinfo(index).max
    bad[0, :, 0, 0], bad[0, :, 0, 1], bad[0, :, 1, 0] = -1, 12, 11  # 11: not cell (1, 0)'s
    bad[0, 1, 0, 0], bad[0, 1, 0, 1] = big, -big
    ignored = bad.copy()
    ignored[0, :, 1, 0] = -1
    with policy.use(**changes):
        got = clpool.adaptive_max_pool2d_backward(
            np.repeat(g, 4, axis=1), np.repeat(x, 4, axis=1), bad
        )
    want = ref.adaptive_max_pool_backward(np.repeat(g, 4, axis=1), np.repeat(x, 4, axis=1),
                                          ignored, 2)  # fmt: skip
    assert same_bits(got, want.astype(np.float32)) and want.any()
    assert launched[-1][0] == kernel


def test_a_gpus_scatter_ignores_indices_of_the_next_cells_elements(device, launched):
    """Cells that overlap share some elements with the cells after them, not others: a
    cell's index that names one of the others (in the next cell only) lies outside its cell
    and adds nothing (the reference without it); so does one past the volume whose low 32
    bits name an element of the cell."""
    x = np.arange(27, dtype=np.float32).reshape(1, 1, 3, 3, 3)
    _, idx = clpool.adaptive_max_pool3d(x, 2, return_indices=True)
    bad = np.repeat(idx, 4, axis=1)
    # cell (0, 0, 0) spans [0, 2) on every axis: elements (2, 0, 0), (0, 2, 0), (0, 0, 2)
    bad[0, :, 0, 0, 0] = [18, 6, 2, 2**32]
    ignored = bad.copy()
    ignored[0, :, 0, 0, 0] = -1
    g = np.random.default_rng(78).standard_normal(bad.shape).astype(np.float32)
    x = np.repeat(x, 4, axis=1)
    with policy.use(per_plane=False, gpu=True):
        got = clpool.adaptive_max_pool3d_backward(g, x, bad)
    assert same_bits(got, ref.adaptive_max_pool_backward(g, x, ignored, 3).astype(np.float32))
    assert launched[-1][0] == "adaptive_max_pool_scatter"


def test_a_gpus_clear_stores_every_element_of_planes_past_one_work_group(launch_sizes):
    """A GPU's clear covers planes of more elements than a work-group's runs (1155 elements:
    the runs of two work-groups, the last one partial): grad_x given pre-filled with NaN
    holds ATen's result, NaN nowhere."""
    queue = clpool.default_queue()
    rng = np.random.default_rng(31)
    x = data(rng, (1, 2, 33, 35))
    _, idx = F.adaptive_max_pool2d(torch.from_numpy(x), (5, 4), return_indices=True)
    g = rng.standard_normal(idx.shape).astype(np.float32)
    want = aten.adaptive_max_pool2d_backward(torch.from_numpy(g), torch.from_numpy(x), idx)
    out = cla.to_device(queue, np.full(x.shape, np.nan, np.float32))
    with policy.use(per_plane=False, gpu=True):
        got = clpool.adaptive_max_pool2d_backward(g, cla.to_device(queue, x), idx.numpy(),
                                                  queue=queue, out=out)  # fmt: skip
    assert got is out and same_bits(out.get(), want.numpy())
    runs = -(-33 * 35 // adaptive_max.CLEAR_RUN)
    assert launch_sizes[-2][0] > runs > 64  # the clear's, in work-groups of 64 at most


# every axis downsampled by cells that do not divide it, so that neighbours share elements
SHARED = {1: [((2, 3, 90), 13), ((1, 2, 600), 49)], 2: [((2, 3, 13, 11), (5, 4))],
         3: [((2, 3, 16, 20, 21), (7, 6, 5)), ((3, 5, 7, 64), (5, 3, 4))]}  # fmt: skip


@pytest.mark.parametrize("per_plane, gpu", [(False, None), (True, None), (False, True)])
def test_every_backward_kernel_gives_atens_sums(device, launched, per_plane, gpu):
    """The gather (one work-item per input element), the CPU's plane per work-item and a
    GPU's kernels (the clear and scatter, or the gather where cells outnumber elements): bit
    for bit ATen's, in float32 and float64."""
    rng = np.random.default_rng(77)
    dtypes = [np.float32] + ([np.float64] if clpool.discovery.has_fp64(device) else [])
    with policy.use(per_plane=per_plane, gpu=gpu):
        for rank in (1, 2, 3):
            for shape, size in _cases(77 + rank, 8, rank, largest=7) + SHARED[rank]:
                for dtype in dtypes:
                    x = data(rng, shape, dtype, special=True)
                    _, idx = FORWARD[rank](x, size, return_indices=True)
                    g = rng.standard_normal(idx.shape) * 10.0 ** rng.integers(-3, 4, idx.shape)
                    g = g.astype(dtype)
                    got = BACKWARD[rank](g, x, idx)
                    assert same_bits(got, _torch_backward(rank, g, x, idx)), (shape, size)
    names = {name for name, _ in launched}
    assert ("adaptive_max_pool_backward_plane" in names) == per_plane
    assert ("adaptive_max_pool_scatter" in names) == bool(gpu)


def test_device_arrays_strided_queue_and_out(device):
    queue = clpool.default_queue()
    host = data(np.random.default_rng(9), (2, 6, 5, 4, 3), special=True)
    base = cla.to_device(queue, host)
    views = {"transposed": (base.transpose((0, 2, 1, 3, 4)), host.transpose(0, 2, 1, 3, 4)),
             "sliced": (base[:, 1::2, :, 1:], host[:, 1::2, :, 1:])}  # fmt: skip
    for name, (view, want_x) in views.items():
        want_x = np.ascontiguousarray(want_x)
        v, i = clpool.adaptive_max_pool3d(view, (2, 3, 2), return_indices=True)
        rv, ri = ref.adaptive_max_pool3d(want_x, (2, 3, 2))
        assert np.array_equal(v.get(), rv.astype(np.float32), equal_nan=True), name
        assert np.array_equal(i.get(), ri), name
        g = cla.to_device(queue, np.ones(v.shape, np.float32))
        got = clpool.adaptive_max_pool3d_backward(g, view, i).get()
        assert same_bits(got, ref.adaptive_max_pool_backward(g.get(), want_x, ri, 3).astype(
            np.float32)), name  # fmt: skip
    x = cla.to_device(queue, np.ascontiguousarray(host[0, :, 0]))
    out = (cla.empty(queue, (6, 2, 2), np.float32), cla.empty(queue, (6, 2, 2), np.int32))
    got = clpool.adaptive_max_pool2d(x, 2, True, index_dtype="int32", queue=queue, out=out)
    assert got[0] is out[0] and got[1] is out[1]
    want, want_i = ref.adaptive_max_pool2d(host[0, :, 0], 2)
    assert np.array_equal(out[1].get(), want_i)
    assert np.array_equal(out[0].get(), want.astype(np.float32), equal_nan=True)


def test_tensors_in_tensors_out(device):
    t = torch.from_numpy(data(np.random.default_rng(2), (2, 3, 6, 5)))
    v, i = clpool.adaptive_max_pool2d(t, 3, return_indices=True)
    assert isinstance(v, torch.Tensor) and i.dtype == torch.int64
    want, want_i = F.adaptive_max_pool2d(t, 3, return_indices=True)
    assert torch.equal(i, want_i) and same_bits(v.numpy(), want.numpy())
    last = t.contiguous(memory_format=torch.channels_last)
    v, i = clpool.adaptive_max_pool2d(last, 3, return_indices=True)
    want, want_i = F.adaptive_max_pool2d(last, 3, return_indices=True)
    assert v.is_contiguous(memory_format=torch.channels_last) and torch.equal(v, want)
    assert want.is_contiguous(memory_format=torch.channels_last) and torch.equal(i, want_i)


ERRORS = [
    ("adaptive_max_pool1d", lambda x: clpool.adaptive_max_pool1d(x[0], 2), "expected a 2-D"),
    ("adaptive_max_pool1d", lambda x: clpool.adaptive_max_pool1d(x[0, 0], (2, 2)),
     "output_size"),
    ("adaptive_max_pool2d", lambda x: clpool.adaptive_max_pool2d(x[0, 0, 0], 2), "expected a 3-D"),
    ("adaptive_max_pool2d", lambda x: clpool.adaptive_max_pool2d(x[0], (2, 3, 4)),
     "output_size"),
    ("adaptive_max_pool2d", lambda x: clpool.adaptive_max_pool2d(x[0], -1), "non-negative"),
    ("adaptive_max_pool2d", lambda x: clpool.adaptive_max_pool2d(x[0], 2.5), "output_size"),
    ("adaptive_max_pool2d", lambda x: clpool.adaptive_max_pool2d(x[:, :0, 0], 2), "non-zero"),
    ("adaptive_max_pool3d", lambda x: clpool.adaptive_max_pool3d(x[0, 0], 2), "expected a 4-D"),
    ("adaptive_max_pool3d", lambda x: clpool.adaptive_max_pool3d(x, 2, True, index_dtype="int16"),
     "index_dtype"),
]  # fmt: skip


@pytest.mark.parametrize(("label", "call", "reason"), ERRORS)
def test_argument_errors_name_the_op(device, label, call, reason):
    x = np.zeros((2, 3, 4, 5, 6), np.float32)
    check_argument_error(lambda: call(x), label, device)
    with pytest.raises(PoolArgumentError, match=reason):
        call(x)


def test_a_dtype_clpool_lacks_is_refused_under_the_ops_label(device):
    for rank, op in FORWARD.items():
        x = np.zeros((1, 2) + (3,) * rank, np.int32)
        with pytest.raises(clpool.UnsupportedDtypeError) as info:
            op(x, 2)
        assert isinstance(info.value, TypeError)
        check_error(info, f"adaptive_max_pool{rank}d", device, "int32")


def test_backward_argument_errors(device):
    x = np.zeros((2, 3, 5, 6), np.float32)
    v, i = clpool.adaptive_max_pool2d(x, (2, 3), return_indices=True)
    label = "adaptive_max_pool2d_backward"
    op = clpool.adaptive_max_pool2d_backward
    for call, reason in [
        (lambda: op(v, x, i[:, :, :1]), "indices must have shape"),
        (lambda: op(v[:1], x, i[:1]), "grad_output must have shape"),
        (lambda: op(v[0], x, i[0]), "dimensions"),
        (lambda: op(v, x, i.astype(np.float32)), "indices must be int64 or int32"),
        (lambda: op(v, x[..., :0], i), "non-zero"),
    ]:
        check_argument_error(call, label, device)
        with pytest.raises(PoolArgumentError, match=reason):
            call()
    with pytest.raises(PoolArgumentError) as info:
        op(v.astype(np.float64), x, i)
    check_error(info, label, device, "float32")
    assert "dtype" in info.value.reason
    x3 = np.zeros((2, 3, 4, 5, 6), np.float32)
    v3, i3 = clpool.adaptive_max_pool3d(x3, 2, return_indices=True)
    check_argument_error(lambda: clpool.adaptive_max_pool3d_backward(v3, x3, i3[..., :1]),
                         "adaptive_max_pool3d_backward", device)  # fmt: skip
    check_argument_error(lambda: clpool.adaptive_max_pool1d_backward(v3, x3, i3),
                         "adaptive_max_pool1d_backward", device)  # fmt: skip


def test_a_5d_device_view_of_any_strides_is_read_as_it_is(launched):
    """A view no copy of four axes could take: the forward's _strided kernel; the backward
    reads the view for its shape only."""
    queue = clpool.default_queue()
    rng = np.random.default_rng(23)
    base = cla.to_device(queue, rng.standard_normal((3, 4, 5, 6, 7)).astype(np.float32))
    view = base[::2, ::2, ::2, ::2, ::2]  # no two neighbouring axes merge
    host = base.get()[::2, ::2, ::2, ::2, ::2]
    v, i = clpool.adaptive_max_pool3d(view, (2, 1, 3), return_indices=True)
    rv, ri = ref.adaptive_max_pool3d(host, (2, 1, 3))
    assert same_bits(v.get(), rv.astype(np.float32)) and np.array_equal(i.get(), ri)
    g = rng.standard_normal(rv.shape).astype(np.float32)
    assert [name for name, _ in launched] == ["adaptive_max_pool3d_forward_strided"]
    got = clpool.adaptive_max_pool3d_backward(g, view, i).get()
    np.testing.assert_allclose(got, ref.adaptive_max_pool_backward(g, host, ri, 3), 1e-6, 1e-6)
    # the same sums in the same order as a contiguous input's
    assert same_bits(got, clpool.adaptive_max_pool3d_backward(g, np.ascontiguousarray(host), ri))


@pytest.mark.parametrize("gpu", [False, True])
def test_the_gather_reads_gradients_and_indices_of_any_strides(launched, gpu):
    """The backward's gather (a CPU's without a kernel per plane) and a GPU's clear and
    scatter read grad_output and indices as they lie: channels-last-3d, every
    other column of wider arrays, offsets, int32 indices, unbatched; no copy kernel, and
    ATen's bits."""
    queue = clpool.default_queue()
    rng = np.random.default_rng(29)

    def wide(a: np.ndarray) -> cla.Array:
        w = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
        w[..., ::2] = a
        return cla.to_device(queue, w)[..., ::2]

    def ndhwc(a: np.ndarray) -> cla.Array:
        moved = cla.to_device(queue, np.ascontiguousarray(np.moveaxis(a, -4, -1)))
        return moved.transpose((0, 4, 1, 2, 3)) if a.ndim == 5 else moved.transpose((3, 0, 1, 2))

    def offset(a: np.ndarray) -> cla.Array:
        return cla.to_device(queue, np.concatenate([a[:1], a]))[1:]

    for shape, size in (((2, 5, 5, 6, 7), (3, 4, 2)), ((3, 4, 9, 5), (4, 2, 7))):
        kernels = ["adaptive_max_pool_backward"]
        if gpu:
            kernels = ["adaptive_max_pool_clear", "adaptive_max_pool_scatter"]
        x = data(rng, shape, special=True)
        _, idx = F.adaptive_max_pool3d(torch.from_numpy(x), size, return_indices=True)
        idx = idx.numpy()
        g = rng.standard_normal(idx.shape).astype(np.float32)
        want = aten.adaptive_max_pool3d_backward(*map(torch.from_numpy, (g, x, idx))).numpy()
        views = [(wide, wide), (ndhwc, ndhwc), (ndhwc, wide), (cla.to_device, ndhwc)]
        views += [(offset, offset)] if len(shape) == 5 else []
        for as_grad, as_indices in views:
            for index in (idx, idx.astype(np.int32)):
                gv, iv = (as_grad(queue, g) if as_grad is cla.to_device else as_grad(g),
                          as_indices(index))  # fmt: skip
                launched.clear()
                with policy.use(gpu=gpu, per_plane=False):
                    got = clpool.adaptive_max_pool3d_backward(gv, x, iv).get()
                assert same_bits(got, want), (shape, as_grad, as_indices, index.dtype)
                assert [name for name, _ in launched] == kernels


def test_the_gathers_views_decide_64_bit_offsets_and_keep_packed_rows(monkeypatch,
                                                                      build_options):
    """How far a plane's view of grad_output or of the indices reaches (1 + its largest
    offset) is among the extents that decide 64-bit offsets in the gather: every 7th column
    of a wider array reaches 7 times further; and a GPU's gather (of more cells than
    elements: upsampling) of NDHWC views still stores its rows of the C-contiguous gradient
    packed."""
    from clpool import launch, plans

    extents = []
    specialize = plans.Planner.specialize
    monkeypatch.setattr(plans.Planner, "specialize", lambda self, name, ext, *a, **k: (
        extents.append(ext), specialize(self, name, ext, *a, **k))[1])  # fmt: skip
    queue = clpool.default_queue()
    x = data(np.random.default_rng(31), (2, 4, 3, 5, 8), special=True)
    _, idx = F.adaptive_max_pool3d(torch.from_numpy(x), (2, 3, 4), return_indices=True)
    g = np.ones(idx.shape, np.float32)
    wide = np.zeros(idx.shape[:-1] + (7 * idx.shape[-1],), np.int64)
    wide[..., ::7] = idx.numpy()
    iv = cla.to_device(queue, wide)[..., ::7]
    with policy.use(gpu=True, per_plane=False):
        got = clpool.adaptive_max_pool3d_backward(g, x, iv).get()
    assert same_bits(got, aten.adaptive_max_pool3d_backward(torch.from_numpy(g),
                                                            torch.from_numpy(x), idx).numpy())
    assert 1 + (2 - 1) * 3 * 28 + (3 - 1) * 28 + (4 - 1) * 7 in extents[-1]
    _, idx = F.adaptive_max_pool3d(torch.from_numpy(x), (4, 6, 8), return_indices=True)
    g = np.ones(idx.shape, np.float32)
    ndhwc = [launch.channels_last_array(queue, a) for a in (g, idx.numpy())]
    build_options.clear()
    with policy.use(gpu=True, per_plane=False):
        clpool.adaptive_max_pool3d_backward(*ndhwc[:1], x, *ndhwc[1:])
    assert any("-DCLPOOL_PACK=4" in options for options in build_options), build_options


# ---------------------------------------------------------------- clpool.torch


def test_torch_functions_and_modules(device):
    import clpool.torch as ct

    rng = np.random.default_rng(21)
    for rank, shape, size in [(1, (2, 3, 11), 4), (2, (2, 3, 7, 9), (None, 4)),
                              (3, (2, 2, 5, 4, 6), (2, 3, None))]:  # fmt: skip
        t = torch.from_numpy(data(rng, shape)).requires_grad_()
        fn = getattr(ct, f"adaptive_max_pool{rank}d")
        out, idx = fn(t, size, return_indices=True)
        want, want_i = TORCH[rank](t, size, return_indices=True)
        assert torch.equal(out, want) and torch.equal(idx, want_i)
        g = torch.from_numpy(rng.standard_normal(out.shape).astype(np.float32))
        (got_g,) = torch.autograd.grad(out, t, g)
        (want_g,) = torch.autograd.grad(want, t, g)
        assert torch.equal(got_g, want_g)
        module = getattr(ct, f"AdaptiveMaxPool{rank}d")(size, return_indices=True)
        twin = getattr(torch.nn, f"AdaptiveMaxPool{rank}d")(size, return_indices=True)
        assert repr(module) == repr(twin)
        assert (module.output_size, module.return_indices) == (twin.output_size, True)
        assert torch.equal(module(t)[1], want_i)
        plain = getattr(ct, f"AdaptiveMaxPool{rank}d")(size)
        assert torch.equal(plain(t), want) and not plain.return_indices


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_torch_gradcheck_float64(device, rank):
    if not clpool.discovery.has_fp64(device):
        pytest.skip("no float64 on this device")
    import clpool.torch as ct

    shape = {1: (2, 2, 7), 2: (1, 2, 5, 6), 3: (1, 2, 3, 4, 5)}[rank]
    size = {1: 3, 2: (3, 4), 3: (2, 3, 2)}[rank]
    # distinct values: the maximum of every cell is unique, so the function is smooth there
    x = torch.randperm(int(np.prod(shape)), dtype=torch.float64).reshape(shape) / 7
    fn = getattr(ct, f"adaptive_max_pool{rank}d")
    assert torch.autograd.gradcheck(lambda t: fn(t, size), (x.requires_grad_(),))


@pytest.mark.parametrize("rows, cols", [(1, 1), (2, 4), (3, 2), (8, 3), (16, 2)])
def test_gpu_geometry_gives_atens_results(device, launched, rows, cols):
    """The kernels as a GPU runs them: tiles of `rows` rows and `cols` columns (a last one
    cut short, cells changing within one, down- and upsampling),
    work-groups spanning several planes (an even number of them, as for a 1x1 output) or
    one (an odd number), and equal cells of a plane as max_pool2d's kernels (square cells
    of 2 and 4 built as constants): bit for bit ATen's forward and backward."""
    rng = np.random.default_rng(90 + rows + cols)
    cases = [(2, (4, 6, 5), 1), (2, (3, 7, 9), (4, 3)), (3, (8, 3, 5, 7), (2, 5, 3)),
             (1, (5, 11), 4), (2, (2, 3, 14, 14), 7), (2, (3, 16, 16), 4), (2, (2, 8, 12), (4, 3)),
             (1, (2, 3, 12), 3), (3, (2, 1, 6, 4), (1, 3, 2)), (2, (2, 3, 40, 9), (7, 3)),
             (2, (1, 2, 5, 6), (9, 13)), (3, (1, 2, 19, 4, 3), (5, 19, 2))]  # fmt: skip
    cases += [(2, shape, size) for shape, size in _cases(90 + rows, 6, 2)]
    with policy.use(gpu=True, rows=rows, cols=cols):
        for rank, shape, size in cases:
            x = data(rng, shape, special=True)
            want, want_i = TORCH[rank](torch.from_numpy(x), size, return_indices=True)
            got, got_i = FORWARD[rank](x, size, return_indices=True)
            assert same_bits(got, want.numpy()) and same_bits(got_i, want_i.numpy()), shape
            assert same_bits(FORWARD[rank](x, size), got), shape  # the values-only build
            g = rng.standard_normal(got.shape).astype(np.float32)
            back = BACKWARD[rank](g, x, got_i)
            assert same_bits(back, _torch_backward(rank, g, x, got_i)), (shape, size)
        # rows of cells [floor(5i/4), ceil(5(i+1)/4)), each index naming the element two
        # rows below its cell's first: outside its cell, so nothing is added (a row of a tile
        # must not look at the cells of the rows before it)
        below = (np.arange(16).reshape(1, 1, 4, 4) + 8).astype(np.int64)
        x, g = np.zeros((1, 1, 5, 4), np.float32), np.ones((1, 1, 4, 4), np.float32)
        assert same_bits(clpool.adaptive_max_pool2d_backward(g, x, below), x)
        # columns of cells [0, 3) and [2, 5), each index naming the column next to its
        # cell, in the same tile of columns: nothing is added
        beside = np.array([[[[3, 1]]]], np.int64)
        x, g = np.zeros((1, 1, 2, 5), np.float32), np.ones((1, 1, 1, 2), np.float32)
        assert same_bits(clpool.adaptive_max_pool2d_backward(g, x, beside), x)
    names = {name for name, _ in launched}
    assert {"adaptive_max_pool_forward", "adaptive_max_pool_backward", "max_pool2d_forward",
            "max_pool2d_backward"} <= names  # fmt: skip


def test_a_cpus_backward_of_equal_cells_is_max_pool2ds(device, launched):
    """On a CPU, equal cells of a plane take max_pool2d's per-plane backward, the forward
    the adaptive kernel: ATen's bits (rows of 16 cells or more too); with indices outside
    their cells, the gather's bits (nothing added for them)."""
    rng = np.random.default_rng(95)
    cases = [((2, 3, 14, 14), 7), ((1, 2, 8, 12), (4, 3)), ((1, 2, 6, 80), (3, 40)),
             ((2, 1, 4, 51), (2, 17))]  # fmt: skip
    for shape, size in cases:
        x = data(rng, shape, special=True)
        with policy.use(gpu=False, per_plane=True):
            v, i = clpool.adaptive_max_pool2d(x, size, return_indices=True)
            assert launched[-1][0] == "adaptive_max_pool_forward"
            g = rng.standard_normal(v.shape).astype(np.float32)
            got = clpool.adaptive_max_pool2d_backward(g, x, i)
            assert launched[-1][0] == "max_pool2d_backward_plane"
            assert same_bits(got, _torch_backward(2, g, x, i)), shape
            bad = scrambled(i, shape[-2] * shape[-1], rng)
            got = clpool.adaptive_max_pool2d_backward(g, x, bad)
        with policy.use(gpu=True, per_plane=False):
            want = clpool.adaptive_max_pool2d_backward(g, x, bad)
        assert launched[-1][0] == "max_pool2d_backward"
        assert same_bits(got, want), shape


@pytest.mark.parametrize("gpu", [False, True])
def test_cell_bounds_past_32_bits(device, gpu):
    """An axis of 70000 to 70001 cells and back: its bounds' numerators pass 2^32 (64-bit
    arithmetic there), as ATen's."""
    x = np.random.default_rng(3).standard_normal((1, 2, 70000)).astype(np.float32)
    with policy.use(gpu=gpu, rows=2):
        v, i = clpool.adaptive_max_pool1d(x, 70001, return_indices=True)
        want, want_i = F.adaptive_max_pool1d(torch.from_numpy(x), 70001, return_indices=True)
        assert same_bits(v, want.numpy()) and same_bits(i, want_i.numpy())
        back = clpool.adaptive_max_pool1d_backward(v, x, i)
        assert same_bits(back, _torch_backward(1, v, x, i))
        assert same_bits(
            clpool.adaptive_max_pool1d(v, 70000), F.adaptive_max_pool1d(want, 70000).numpy()
        )
