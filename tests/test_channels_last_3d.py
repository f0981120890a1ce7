"""Channels-last-3d (NDHWC) and other strided inputs of the 3-D ops: read through their
strides by the 3-D _strided kernels (no copy kernel), the results in PyTorch CPU's memory
format (max_pool3d keeps channels_last_3d, its backward follows the forward input, the
average ops give C-contiguous results), with PyTorch's values and indices."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from pool_cases import (  # noqa: E402
    assert_close,
    check_result,
    data,
    default_queue,
    results,
    same_bits,
    scrambled,
    wrapped,
)

import clpool  # noqa: E402
import clpool.torch as ct  # noqa: E402
from clpool import policy  # noqa: E402
from clpool import reference as ref  # noqa: E402
from clpool.shapes import stored_channels_last  # noqa: E402

CL3 = torch.channels_last_3d
aten = torch.ops.aten
TOL = {torch.float32: 1e-5, torch.float64: 1e-12}

# name -> (clpool forward, torch forward), the same arguments: ceil mode, dilation,
# padding, count_include_pad, divisor_override, unequal adaptive cells.
FORWARD = {
    "max-ceil": (lambda a, **kw: clpool.max_pool3d_with_indices(a, 3, 2, 1, ceil_mode=True, **kw),
                 lambda t: F.max_pool3d(t, 3, 2, 1, ceil_mode=True, return_indices=True)),
    "max-dilated": (lambda a, **kw: clpool.max_pool3d_with_indices(a, (2, 2, 3), (1, 2, 2), 1,
                                                                   (1, 2, 1), **kw),
                    lambda t: F.max_pool3d(t, (2, 2, 3), (1, 2, 2), 1, (1, 2, 1),
                                           return_indices=True)),
    "max-values": (lambda a, **kw: clpool.max_pool3d(a, 2, 1, 1, **kw),
                   lambda t: F.max_pool3d(t, 2, 1, 1)),
    "avg-exclude-pad": (lambda a, **kw: clpool.avg_pool3d(a, 3, 2, 1, True, False, **kw),
                        lambda t: F.avg_pool3d(t, 3, 2, 1, True, False)),
    "avg-divisor": (lambda a, **kw: clpool.avg_pool3d(a, 2, 1, 1, divisor_override=3, **kw),
                    lambda t: F.avg_pool3d(t, 2, 1, 1, divisor_override=3)),
    "adaptive": (lambda a, **kw: clpool.adaptive_avg_pool3d(a, (3, 5, 4), **kw),
                 lambda t: F.adaptive_avg_pool3d(t, (3, 5, 4))),
    "max-adaptive": (lambda a, **kw: clpool.adaptive_max_pool3d(a, (3, 5, 4), True, **kw),
                     lambda t: F.adaptive_max_pool3d(t, (3, 5, 4), return_indices=True)),
    # a result of one element per channel: channels contiguous there too (4 per work-item)
    "adaptive-global": (lambda a, **kw: clpool.adaptive_avg_pool3d(a, 1, **kw),
                        lambda t: F.adaptive_avg_pool3d(t, 1)),
}  # fmt: skip
SHAPE = (2, 5, 4, 6, 7)


def _tensor(seed: int, shape=SHAPE, dtype=np.float32, special=True) -> torch.Tensor:
    """Random data (ties, NaN and -inf with `special`) as a channels_last_3d tensor."""
    x = data(np.random.default_rng(seed), shape, dtype, special)
    return torch.from_numpy(x).contiguous(memory_format=CL3)


def _ndhwc_array(t: torch.Tensor) -> cla.Array:
    """Channels-last-3d tensor `t` as a device Array with its strides (NDHWC memory)."""
    ndhwc = t.permute(0, 2, 3, 4, 1).numpy()
    return cla.to_device(default_queue(), ndhwc).transpose((0, 4, 1, 2, 3))


def _as(kind: str, t: torch.Tensor):
    """Tensor `t` as the input kind, with `t`'s strides: a device Array (a C-contiguous one
    for a C-contiguous `t`), a numpy array or the tensor itself."""
    if kind == "array":
        return cla.to_device(default_queue(), t.numpy()) if t.is_contiguous() else _ndhwc_array(t)
    return t.numpy() if kind == "numpy" else t


def _check(got, want: torch.Tensor, exact: bool) -> None:
    check_result(got, want, exact, TOL.get(want.dtype, 1e-5))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
# 8: 4 channels per work-item; 16 and 272: a CPU's rows of 16 channels (max pooling; 272: two
# runs of channels)
@pytest.mark.parametrize("channels", [5, 8, 16, 272])
@pytest.mark.parametrize("kind", ["array", "numpy", "tensor"])
@pytest.mark.parametrize("case", FORWARD)
def test_forward_channels_last_3d_matches_torch(case, kind, channels, dtype):
    ours, theirs = FORWARD[case]
    t = _tensor(7, (2, channels, 4, 6, 7), dtype)
    got, want = results(ours(_as(kind, t))), results(theirs(t))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        _check(g, w, exact=case.startswith("max"))


def _backward_cases(t: torch.Tensor):
    """(name, clpool backward of (grad, x, indices), ATen's, grad_output shape, indices):
    the four backward ops, in the forward's arguments."""
    _, idx = F.max_pool3d(t, 3, 2, 1, (1, 1, 2), True, return_indices=True)
    avg = F.avg_pool3d(t, 3, 2, 1, True, False)
    ada = F.adaptive_avg_pool3d(t, (3, 5, 4))
    _, ada_idx = F.adaptive_max_pool3d(t, (3, 5, 4), return_indices=True)
    return [
        ("max",
         lambda g, x, i: clpool.max_pool3d_with_indices_backward(g, x, 3, 2, 1, (1, 1, 2), True,
                                                                 i),
         lambda g, x, i: aten.max_pool3d_with_indices_backward(g, x, [3] * 3, [2] * 3, [1] * 3,
                                                                [1, 1, 2], True, i),
         idx.shape, idx),
        ("avg", lambda g, x, i: clpool.avg_pool3d_backward(g, x, 3, 2, 1, True, False),
         lambda g, x, i: aten.avg_pool3d_backward(g, x, [3] * 3, [2] * 3, [1] * 3, True, False,
                                                  None), avg.shape, None),
        ("adaptive", lambda g, x, i: clpool.adaptive_avg_pool3d_backward(g, x),
         lambda g, x, i: aten._adaptive_avg_pool3d_backward(g, x), ada.shape, None),
        ("max-adaptive", lambda g, x, i: clpool.adaptive_max_pool3d_backward(g, x, i),
         lambda g, x, i: aten.adaptive_max_pool3d_backward(g, x, i), ada.shape, ada_idx),
    ]  # fmt: skip


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("channels", [5, 8, 16, 272])  # as the forward's
@pytest.mark.parametrize("kind", ["array", "numpy", "tensor"])
@pytest.mark.parametrize("formats", ["cl-cl", "cl-grad", "cl-input"])
def test_backward_channels_last_3d_matches_aten(formats, kind, channels, dtype):
    """grad_input in ATen's memory format (max: the forward input's; the averages:
    C-contiguous), whatever grad_output's and the indices' are."""
    t = _tensor(8, (2, channels, 5, 6, 7), dtype)
    rng = np.random.default_rng(11)
    for name, ours, theirs, shape, idx in _backward_cases(t):
        g = torch.from_numpy(data(rng, tuple(shape), dtype)).contiguous(memory_format=CL3)
        x = t.contiguous() if formats == "cl-grad" else t
        if formats == "cl-input":
            g = g.contiguous()
        i = idx if idx is None or formats != "cl-input" else idx.contiguous()
        want = theirs(g, x, i)
        got = ours(*(None if a is None else _as(kind, a) for a in (g, x, i)))
        _check(got, want, exact=name.startswith("max"))


def _views(base: np.ndarray):
    """(name, device view, the same view on the host): strides other than dense NDHWC."""
    on_device = cla.to_device(default_queue(), base)
    host_ndhwc = stored_channels_last(base)
    ndhwc = cla.to_device(default_queue(), host_ndhwc.transpose(0, 2, 3, 4, 1))
    ndhwc = ndhwc.transpose((0, 4, 1, 2, 3))
    return [
        ("transposed-hw", on_device.transpose((0, 1, 2, 4, 3)), base.transpose(0, 1, 2, 4, 3)),
        ("depth-last", on_device.transpose((0, 1, 3, 4, 2)), base.transpose(0, 1, 3, 4, 2)),
        ("sliced-channels-ndhwc", ndhwc[:, 1:4], host_ndhwc[:, 1:4]),
        ("offset", on_device[1:, 1:, 1:, 2:, 1:], base[1:, 1:, 1:, 2:, 1:]),
        ("every-other-column", on_device[:, :, :, :, ::2], base[:, :, :, :, ::2]),
        ("ndhwc-every-other-row", ndhwc[:, :, :, ::2], host_ndhwc[:, :, :, ::2]),
        ("unbatched-dhwc", ndhwc[1], host_ndhwc[1]),
        ("unbatched-dhwc-sliced-depth", ndhwc[1, :, 1:], host_ndhwc[1, :, 1:]),
    ]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", FORWARD)
def test_strided_device_views_match_torch(case, dtype):
    """Any strides and offsets of a device Array: torch's values, indices and memory
    format on the same view (a channels-last-3d view stays so for max pooling, an unbatched
    dense DHWC one too, as ATen's rule for 4-D input)."""
    ours, theirs = FORWARD[case]
    base = data(np.random.default_rng(5), (2, 6, 5, 8, 9), dtype, special=True)
    for name, view, on_host in _views(base):
        want = results(theirs(torch.from_numpy(on_host)))
        for g, w in zip(results(ours(view)), want, strict=True):
            try:
                _check(g, w, exact=case.startswith("max"))
            except AssertionError as e:
                raise AssertionError(name) from e


@pytest.mark.parametrize("case", ["max-ceil", "avg-exclude-pad", "adaptive"])
def test_strided_host_views_match_the_contiguous_result(case):
    """numpy views of any strides: the values of the same array C-contiguous, and the
    memory format torch gives such a 5-D view (unbatched host views go up C-contiguous)."""
    ours, theirs = FORWARD[case]
    base = data(np.random.default_rng(6), (2, 6, 5, 8, 9), special=True)
    for name, _, on_host in _views(base):
        if on_host.ndim == 4:
            continue
        want = results(ours(np.ascontiguousarray(on_host)))
        strides = results(theirs(torch.from_numpy(on_host)))[0].stride()
        for g, w in zip(results(ours(on_host)), want, strict=True):
            assert tuple(s // g.dtype.itemsize for s in g.strides) == strides, name
            if case.startswith("max"):
                assert same_bits(np.ascontiguousarray(g), w), name
            else:
                assert_close(g, w, context=name)


def test_strided_backward_inputs_match_torch():
    """grad_output and indices of any strides (every other column of wider arrays, int32
    indices) and an input view: ATen's gradients and memory format."""
    q = default_queue()
    x = torch.from_numpy(data(np.random.default_rng(6), (2, 3, 5, 6, 7), special=True))
    _, idx = F.max_pool3d(x, 2, 1, 1, ceil_mode=True, return_indices=True)
    g = torch.from_numpy(data(np.random.default_rng(7), tuple(idx.shape)))

    def wide(a: torch.Tensor) -> cla.Array:
        w = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.numpy().dtype)
        w[..., ::2] = a.numpy()
        return cla.to_device(q, w)[..., ::2]

    x_view = _ndhwc_array(x.contiguous(memory_format=CL3))
    got = clpool.max_pool3d_with_indices_backward(
        wide(g), x_view, 2, 1, 1, 1, True, indices=wide(idx.int())
    )
    want = aten.max_pool3d_with_indices_backward(
        g, x.contiguous(memory_format=CL3), [2] * 3, [1] * 3, [1] * 3, [1] * 3, True, idx
    )
    _check(got, want, exact=True)
    a = F.avg_pool3d(x, 2, 1, 1, True, False)
    ga = torch.from_numpy(data(np.random.default_rng(8), tuple(a.shape)))
    got = clpool.avg_pool3d_backward(wide(ga), x_view, 2, 1, 1, True, False)
    want = aten.avg_pool3d_backward(ga, x, [2] * 3, [1] * 3, [1] * 3, True, False, None)
    _check(got, want, exact=False)


@pytest.mark.parametrize("per_plane", [False, True])
@pytest.mark.parametrize("kind", ["array", "numpy"])
def test_a_channels_last_3d_input_launches_only_the_op_kernels(kind, per_plane, launched,
                                                               enqueued):
    """No copy kernel: each op enqueues exactly its _strided kernel, forward and backward
    (adaptive average pooling's per volume, and adaptive max pooling's gather, read
    grad_output and indices through their strides too; adaptive max pooling's per plane
    copies device arrays), for a channels_last_3d device Array or numpy array (uploaded as its own
    bytes)."""
    t = _tensor(12, special=False)
    x = _as(kind, t)
    with policy.use(per_plane=per_plane):
        for case in ("max-ceil", "max-values", "avg-exclude-pad", "adaptive", "max-adaptive"):
            FORWARD[case][0](x)
        rng = np.random.default_rng(1)
        for _, ours, _, shape, idx in _backward_cases(t):
            g = torch.from_numpy(data(rng, tuple(shape))).contiguous(memory_format=CL3)
            ours(_as(kind, g), x, None if idx is None else _as(kind, idx))
    want = ["max_pool3d_forward_strided"] * 2 + [
        "avg_pool3d_forward_strided",
        "adaptive_avg_pool3d_forward_strided",
        "adaptive_max_pool3d_forward_strided",
        "max_pool3d_backward_strided",
        "avg_pool3d_backward_strided",
        f"adaptive_avg_pool3d_backward_{'plane' if per_plane else 'strided'}",
    ]
    want.append(f"adaptive_max_pool_backward{'_plane' if per_plane else ''}")
    names = [name for name, _ in launched]
    copies = [name for name in names if name.startswith("clpool_contiguous")]
    assert [name for name in names if name not in copies] == want
    # a per-plane kernel's device views copied, its numpy arrays uploaded C-contiguous
    assert bool(copies) == (per_plane and kind == "array")
    assert names[-len(copies) - 1 :] == copies + want[-1:]
    assert enqueued == names


@pytest.mark.parametrize("kind", ["array", "numpy"])
def test_a_contiguous_gradient_of_a_channels_last_input_runs_the_contiguous_kernels(
    kind, launched
):
    """The 3-D average backward ops read grad_output alone (the input gives its shape) and
    give C-contiguous results, as ATen's: autograd's C-contiguous grad_output of a
    channels_last_3d input runs the contiguous kernels, not the _strided ones."""
    t = _tensor(19, (2, 16, 4, 6, 7), special=False)
    rng = np.random.default_rng(2)
    g = torch.from_numpy(data(rng, tuple(F.avg_pool3d(t, 2, 1, 1).shape)))
    got = clpool.avg_pool3d_backward(_as(kind, g), _as(kind, t), 2, 1, 1)
    _check(got, aten.avg_pool3d_backward(g, t, [2] * 3, [1] * 3, [1] * 3, False, True, None),
           exact=False)  # fmt: skip
    g = torch.from_numpy(data(rng, (2, 16, 3, 5, 4)))
    got = clpool.adaptive_avg_pool3d_backward(_as(kind, g), _as(kind, t))
    _check(got, aten._adaptive_avg_pool3d_backward(g, t), exact=False)
    names = [name for name, _ in launched]
    assert len(names) == 2 and not any(n.endswith("_strided") for n in names), names


@pytest.mark.parametrize("channels", [8, 32, 272])
def test_a_cpu_takes_rows_of_16_channels_for_max_pooling(channels, launch_sizes):
    """On a CPU max_pool3d and its backward, and avg_pool3d_backward (whose gradient is
    C-contiguous), run one work-item per row of an image (16 channels a lane, in runs of
    up to 256) where 16 divides C; else 4 channels of a voxel (max pooling)."""
    sizes = launch_sizes
    x = _tensor(18, (2, channels, 4, 6, 7), special=False).numpy()
    with policy.use(gpu=False):
        out, idx = clpool.max_pool3d_with_indices(x, 3, 2, 1)
        clpool.max_pool3d_with_indices_backward(out, x, 3, 2, 1, indices=idx)
        clpool.avg_pool3d_backward(out, x, 3, 2, 1)
    rows = [2 * 2 * 3, 2 * 4 * 6, 2 * 4 * 6]  # the output's rows, the input's
    if channels % 16 == 0:
        assert sizes == [(-(-channels // 256), 1, r) for r in rows]
    else:
        assert [s[0] for s in sizes[:2]] == [channels // 4] * 2


# (channels, output size): cells overlapping, unequal, of 2 and of 3 (whose shares show the
# order of the divisions); growing; one
ADAPTIVE_BACKWARD = [(3, (3, 5, 4)), (16, (2, 2, 3)), (48, (7, 4, 11)), (16, (1, 1, 1))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["contiguous", "channels-last", "offset-view"])
@pytest.mark.parametrize("channels, size", ADAPTIVE_BACKWARD)
def test_a_cpus_adaptive_average_backward_gives_atens_bits(channels, size, layout, dtype,
                                                            launched, launch_sizes):
    """adaptive_avg_pool3d_backward on a CPU, per volume (grad_output read through its
    strides, each cell's share added to its elements) and not (an element of the gradient
    per work-item; of a channels-last gradient where 16 divides C, a row of an image, 16
    channels a lane): ATen's sums bit for bit, each element's shares in output order."""
    rng = np.random.default_rng(channels)
    x = data(rng, (2, channels, 5, 6, 7), dtype, False)
    base = data(rng, (3, channels + 1, *size), dtype, False)
    g = torch.from_numpy(base)[1:, 1:]
    g = g.contiguous() if layout == "contiguous" else g.contiguous(memory_format=CL3)
    arg = g.numpy()
    if layout == "offset-view":  # a device Array's view: read as it is
        arg = cla.to_device(default_queue(), base)[1:, 1:]
        g = torch.from_numpy(base)[1:, 1:]
    want = aten._adaptive_avg_pool3d_backward(g, torch.from_numpy(x)).numpy()
    for per_plane in (True, False):
        with policy.use(gpu=False, per_plane=per_plane):
            got = clpool.adaptive_avg_pool3d_backward(arg, x)
        assert same_bits(got if isinstance(got, np.ndarray) else got.get(), want)
        dense = layout != "offset-view" and g.is_contiguous()  # 1 x 1 x 1 cells: both
        way = "_plane" if per_plane else "" if dense else "_strided"
        assert launched[-1][0] == f"adaptive_avg_pool3d_backward{way}"
    rows16 = not dense and g.stride(1) == 1 and channels % 16 == 0
    assert (launch_sizes[-1] == (-(-channels // 256), 1, 2 * 5 * 6)) == rows16


@pytest.mark.parametrize("index", ["aten", "scrambled", "wrapped"])
@pytest.mark.parametrize("tile", [(1, 1), (2, 2), (3, 2), (1, 4)])
@pytest.mark.parametrize("channels", [8, 12])
def test_a_gpus_ndhwc_backward_tiles_give_the_references_results(channels, tile, index,
                                                                  launch_sizes):
    """On a GPU, max_pool3d_with_indices_backward of NDHWC arrays takes 4 channels of a
    tile of rows x pixels of a depth per work-item (each window reaching it loaded once),
    and adaptive_avg_pool3d_backward 4 channels of rows of them (stored through the local
    tile; ATen's bits), avg_pool3d_backward the NCDHW kernel's tile over (W, H, the
    volumes' depths), reading the gradient through its strides: the reference's results
    (max: ATen's bits; indices outside their windows, next to them and outside the volume
    match nothing, as in the NCDHW kernels), the tiles over the edges of H and W; the
    launches cover the rows by tiles."""
    rng = np.random.default_rng(channels)
    shape = (2, channels, 5, 7, 9)
    n, c, d, h, w = shape
    x = stored_channels_last(data(rng, shape, np.float64))
    window = (3, 2, 1, (1, 2, 1), True)
    out, idx = clpool.max_pool3d_with_indices(x, *window)
    if index == "scrambled":
        idx = stored_channels_last(scrambled(idx, d * h * w, rng))
    elif index == "wrapped":
        idx = stored_channels_last(wrapped(idx, (d, h, w), *window[:4], rng))
    g = stored_channels_last(data(rng, out.shape, np.float64))
    avg = (3, 2, 1, True, False)
    ga = stored_channels_last(data(rng, ref.avg_pool3d(x, *avg).shape, np.float64))
    cells = (3, 4, 5)  # overlapping along H (7 to 4) and W (9 to 5)
    gc = stored_channels_last(data(rng, (n, c, *cells), np.float64))
    with policy.use(gpu=True, nhwc=tile):
        got = clpool.max_pool3d_with_indices_backward(g, x, *window, indices=idx)
        got_avg = clpool.avg_pool3d_backward(ga, x, *avg)
        got_cells = clpool.adaptive_avg_pool3d_backward(gc, x)
    dense_g, dense_x, dense_i = (np.ascontiguousarray(a) for a in (g, x, idx))
    want = clpool.max_pool3d_with_indices_backward(dense_g, dense_x, *window, indices=dense_i)
    if index == "aten":
        want = ref.max_pool3d_with_indices_backward(g, x, idx, *window)
    np.testing.assert_array_equal(got, want)
    if index == "aten":
        t = torch.from_numpy
        aten_max = aten.max_pool3d_with_indices_backward(
            t(g), t(x), [3] * 3, [2] * 3, [1] * 3, [1, 2, 1], True, t(idx))
        assert same_bits(got, aten_max.numpy())
    assert_close(got_avg, ref.avg_pool3d_backward(ga, x, *avg), 1e-12)
    t = torch.from_numpy
    assert same_bits(got_cells, aten._adaptive_avg_pool3d_backward(t(gc), t(x)).numpy())
    max_size, avg_size, cells_size = launch_sizes[1:4]
    assert [max_size[2], cells_size[2]] == [n * d * -(-h // tile[0])] * 2
    assert avg_size[2] % (n * c) == 0 and avg_size[2] <= n * c * d


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_gpus_average_backward_tile_reads_any_gradient_through_its_strides(dtype, launched,
                                                                            build_options):
    """On a GPU, avg_pool3d_backward's NCDHW tile reads grad_output as it lies, no copy
    first (built with -DCLPOOL_GRAD_VIEW): channels-last, a device view with an offset and
    gaps along W and C, one with D and H swapped in memory, an unbatched channels-last
    device view; ATen's bits (count_include_pad off: the divisors differ at the edges),
    into a C-contiguous gradient."""
    rng = np.random.default_rng(5150)
    q = default_queue()
    x = data(rng, (2, 6, 5, 7, 9), dtype)
    window = (3, 2, 1, False, False)
    n, c, od, oh, ow = ref.avg_pool3d(x, *window).shape
    channels_last = stored_channels_last(data(rng, (n, c, od, oh, ow), dtype))
    wide = data(rng, (n, 2 * c, od, oh, 2 * ow + 1), dtype)
    swapped = data(rng, (n, c, oh, od, ow), dtype)
    ndhwc = data(rng, (2, od, oh, ow, c), dtype)
    grads = [  # (what clpool reads, its values on the host, the input)
        (channels_last, channels_last, x),
        (cla.to_device(q, wide)[:, 1::2, :, :, 1::2], wide[:, 1::2, :, :, 1::2], x),
        (cla.to_device(q, swapped).transpose((0, 1, 3, 2, 4)), swapped.transpose(0, 1, 3, 2, 4),
         x),
        # an unbatched channels-last device view
        (cla.to_device(q, ndhwc).transpose((0, 4, 1, 2, 3))[1], ndhwc[1].transpose(3, 0, 1, 2),
         x[0]),
    ]  # fmt: skip
    t = torch.from_numpy
    for g, host, xs in grads:
        want = aten.avg_pool3d_backward(t(host), t(xs), [3] * 3, [2] * 3, [1] * 3, False, False,
                                        None).numpy()  # fmt: skip
        with policy.use(gpu=True):
            got = clpool.avg_pool3d_backward(g, xs, *window)
        got = got.get() if isinstance(got, cla.Array) else got
        assert got.flags.c_contiguous and same_bits(got, want), g.strides
    assert {name for name, _ in launched} == {"avg_pool3d_backward"}, launched
    assert build_options and all("-DCLPOOL_GRAD_VIEW" in o for o in build_options)


def test_gpu_policy_and_constant_windows_give_the_sameresults():
    """The _strided kernels built as a GPU would build them, and with the window sizes as
    arguments: the same values and indices."""
    t = _tensor(13, (1, 8, 4, 5, 6))
    for gpu, specialize in ((True, True), (False, False)):
        with policy.use(gpu=gpu, specialize=specialize):
            for case in ("max-dilated", "avg-divisor"):
                ours, theirs = FORWARD[case]
                for g, w in zip(results(ours(t)), results(theirs(t)), strict=True):
                    _check(g, w, exact=case.startswith("max"))


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("channels", [3, 4, 16])
def test_windows_of_minus_infinity_and_nan_and_int32_indices(channels, index_dtype):
    """Windows whose every tap is -inf take the index of their first tap inside the volume;
    a NaN wins with its index (the last NaN); each channel on its own; int32 indices too,
    and their backward. The indices are torch's for the same values C-contiguous: torch
    2.13's channels-last CPU kernel leaves the depth out of such a window's index (it names
    an element of the first depth, outside the window: 3 where the contiguous kernel gives
    33, the window's first tap)."""
    x = np.full((1, channels, 4, 5, 6), -np.inf, np.float32)
    x[0, 0, 1, 1, 1] = x[0, -1, 2, 3, 4] = np.nan
    x[0, -1, 2, 3, 5] = np.nan
    x[0, 1 % channels, 2, 2, 2] = 7.0
    t = torch.from_numpy(x).contiguous(memory_format=CL3)
    for args in ((3, 2, 1), (2, 1, 1)):
        got = clpool.max_pool3d_with_indices(t.numpy(), *args, index_dtype=index_dtype)
        want = F.max_pool3d(t, *args, return_indices=True)
        first = F.max_pool3d(t.contiguous(), *args, return_indices=True)[1]
        want = (want[0], first.contiguous(memory_format=CL3))
        assert got[1].dtype == np.dtype(index_dtype)
        _check(got[0], want[0], exact=True)
        _check(got[1].astype(np.int64), want[1], exact=True)
        g = torch.ones(want[0].shape).contiguous(memory_format=CL3)
        back = clpool.max_pool3d_with_indices_backward(g.numpy(), t.numpy(), *args, indices=got[1])
        ref = aten.max_pool3d_with_indices_backward(
            g, t, [args[0]] * 3, [args[1]] * 3, [args[2]] * 3, [1] * 3, False, want[1]
        )
        _check(back, ref, exact=True)


@pytest.mark.parametrize("channels", [8, 16])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_channels_last_3d(dtype, channels):
    """16-bit storage: torch's float32 result rounded once (torch CPU has no 16-bit
    avg_pool3d), max pooling bit for bit, in torch's memory format."""
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")
    t = _tensor(14, (2, channels, 4, 5, 6), special=False).to(getattr(torch, dtype))
    with policy.use(fp16_storage=True):
        for case in ("max-ceil", "avg-exclude-pad", "adaptive"):
            ours, theirs = FORWARD[case]
            for g, w in zip(results(ours(t)), results(theirs(t.float())), strict=True):
                w = w.to(g.dtype) if w.is_floating_point() else w
                assert g.dtype == w.dtype and g.stride() == w.stride(), case
                if case.startswith("max"):
                    assert torch.equal(g, w), case
                else:
                    assert_close(g.double(), w.double(), 1e-2, case)


@pytest.mark.parametrize(
    "module, reference",
    [
        (ct.MaxPool3d(3, 2, 1, ceil_mode=True), torch.nn.MaxPool3d(3, 2, 1, ceil_mode=True)),
        (ct.AvgPool3d(3, 2, 1, count_include_pad=False),
         torch.nn.AvgPool3d(3, 2, 1, count_include_pad=False)),
        (ct.AdaptiveAvgPool3d((3, 5, 4)), torch.nn.AdaptiveAvgPool3d((3, 5, 4))),
    ],
)  # fmt: skip
def test_torch_modules_on_channels_last_3d_forward_and_backward(module, reference):
    """clpool.torch (the autograd path): torch's values, gradients and memory formats."""
    t = _tensor(9, (2, 8, 5, 6, 7), special=False)
    ours, theirs = t.clone().requires_grad_(), t.clone().requires_grad_()
    y, want = module(ours), reference(theirs)
    grad = torch.from_numpy(data(np.random.default_rng(3), tuple(want.shape)))
    y.backward(grad.contiguous(memory_format=CL3))
    want.backward(grad.contiguous(memory_format=CL3))
    assert y.stride() == want.stride() and ours.grad.stride() == theirs.grad.stride()
    assert_close(y.detach(), want.detach())
    assert_close(ours.grad, theirs.grad)


def test_torch_gradcheck_channels_last_3d_in_float64():
    x = torch.from_numpy(np.random.default_rng(4).standard_normal((1, 4, 3, 4, 5)))
    x = x.contiguous(memory_format=CL3).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: ct.max_pool3d(t, 2, 1, 1), (x,))
    assert torch.autograd.gradcheck(lambda t: ct.avg_pool3d(t, 3, 2, 1, True, False), (x,))
    assert torch.autograd.gradcheck(lambda t: ct.adaptive_avg_pool3d(t, (3, 2, 3)), (x,))


@pytest.mark.parametrize("per_plane", [False, True])
def test_the_canary_runs_every_3d_strided_kernel(per_plane, launched):
    """The canary's channels-last-3d calls: each 3-D _strided kernel, right (per volume:
    adaptive average pooling's backward by its _plane kernel, which reads grad_output
    through its strides)."""
    from clpool import canary, check

    rng = np.random.default_rng(10)
    x = rng.standard_normal(canary.SHAPE_3D).astype(np.float32)
    with policy.use(per_plane=per_plane):
        calls = canary._channels_last_3d_calls(
            x, lambda s: rng.standard_normal(s).astype(np.float32)
        )
        for what, got, want, exact in calls:
            err = check.error(np.asarray(got), want)
            assert err == 0 if exact else err <= 1e-5, what
    ran = {name for name, _ in launched}
    want = {f"{op}_{way}_strided" for op in ("max_pool3d", "avg_pool3d", "adaptive_avg_pool3d")
            for way in ("forward", "backward")}  # fmt: skip
    if per_plane:
        want = want - {"adaptive_avg_pool3d_backward_strided"} | {
            "adaptive_avg_pool3d_backward_plane"
        }
    assert ran == want


@pytest.mark.parametrize("kind", ["array", "tensor"])
def test_adaptive_max_cells_sharing_a_maximum_and_cells_of_minus_infinity(kind):
    """Overlapping cells (W 7 to 4) whose maximum is one element: its gradient is the sum of
    both, in output order; a cell of -inf only gives its first element's index."""
    t = _tensor(31, (2, 8, 3, 4, 7), special=False)
    t[..., 1] = 50.0 + t[..., 1]  # the maximum of cells 0 and 1 along W
    t[:, :, :2, :2, :] = -float("inf")  # cells of -inf only (D 3 to 2, H 4 to 2)
    got, got_i = clpool.adaptive_max_pool3d(_as(kind, t), (2, 2, 4), True)
    want, want_i = F.adaptive_max_pool3d(t, (2, 2, 4), return_indices=True)
    _check(got, want, exact=True)
    _check(got_i, want_i, exact=True)
    _check(clpool.adaptive_max_pool3d(_as(kind, t), (2, 2, 4)), want, exact=True)  # no indices
    g = torch.from_numpy(data(np.random.default_rng(3), tuple(want.shape))).contiguous(
        memory_format=CL3)  # fmt: skip
    got = clpool.adaptive_max_pool3d_backward(_as(kind, g), _as(kind, t), _as(kind, want_i))
    _check(got, aten.adaptive_max_pool3d_backward(g, t, want_i), exact=True)
