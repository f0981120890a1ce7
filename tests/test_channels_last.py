"""Channels-last (NHWC) and other strided inputs of the 2-D ops: read through their strides
by the _strided kernels (no copy kernel), the results in the input's memory format, as
PyTorch CPU's (values, indices and strides)."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from pool_cases import assert_close, check_result, data, default_queue, results, same_bits  # noqa: E402

import clpool  # noqa: E402
import clpool.torch as ct  # noqa: E402
from clpool import launch, plans, policy, pool3d, quirks  # noqa: E402
from clpool import reference as ref  # noqa: E402
from clpool.shapes import stored_channels_last  # noqa: E402

CL = torch.channels_last
CL3D = torch.channels_last_3d
aten = torch.ops.aten

# name -> (clpool forward, torch forward), the same arguments: ceil mode, dilation,
# padding, count_include_pad, divisor_override, unequal adaptive cells, the global one.
FORWARD = {
    "max-ceil": (lambda a, **kw: clpool.max_pool2d_with_indices(a, 3, 2, 1, ceil_mode=True, **kw),
                 lambda t: F.max_pool2d(t, 3, 2, 1, ceil_mode=True, return_indices=True)),
    "max-dilated": (lambda a, **kw: clpool.max_pool2d_with_indices(a, (2, 3), (1, 2), 1, (2, 1),
                                                                   **kw),
                    lambda t: F.max_pool2d(t, (2, 3), (1, 2), 1, (2, 1), return_indices=True)),
    "max-values": (lambda a, **kw: clpool.max_pool2d(a, 2, 1, 1, **kw),
                   lambda t: F.max_pool2d(t, 2, 1, 1)),
    "avg-exclude-pad": (lambda a, **kw: clpool.avg_pool2d(a, 3, 2, 1, True, False, **kw),
                        lambda t: F.avg_pool2d(t, 3, 2, 1, True, False)),
    "avg-include-pad": (lambda a, **kw: clpool.avg_pool2d(a, 3, 2, 1, True, **kw),
                        lambda t: F.avg_pool2d(t, 3, 2, 1, True)),
    "avg-divisor": (lambda a, **kw: clpool.avg_pool2d(a, 2, 1, divisor_override=3, **kw),
                    lambda t: F.avg_pool2d(t, 2, 1, divisor_override=3)),
    "adaptive": (lambda a, **kw: clpool.adaptive_avg_pool2d(a, (5, 4), **kw),
                 lambda t: F.adaptive_avg_pool2d(t, (5, 4))),
    "adaptive-global": (lambda a, **kw: clpool.adaptive_avg_pool2d(a, 1, **kw),
                        lambda t: F.adaptive_avg_pool2d(t, 1)),
    "adaptive-max": (lambda a, **kw: clpool.adaptive_max_pool2d(a, (5, 4), True, **kw),
                     lambda t: F.adaptive_max_pool2d(t, (5, 4), True)),
    "adaptive-max-values": (lambda a, **kw: clpool.adaptive_max_pool2d(a, (5, 4), **kw),
                            lambda t: F.adaptive_max_pool2d(t, (5, 4))),
    # equal cells (1 x 3): max_pool2d's _strided kernel
    "adaptive-max-equal": (lambda a, **kw: clpool.adaptive_max_pool2d(a, (7, 3), True, **kw),
                           lambda t: F.adaptive_max_pool2d(t, (7, 3), True)),
}  # fmt: skip
# the _strided kernel each case's channels-last input runs
FORWARD_KERNEL = {"max": "max_pool2d", "avg": "avg_pool2d", "adaptive": "adaptive_avg_pool2d",
                  "adaptive-global": "adaptive_avg_pool2d", "adaptive-max": "adaptive_max_pool2d",
                  "adaptive-max-values": "adaptive_max_pool2d", "adaptive-max-equal": "max_pool2d"}
EXACT = ("max", "adaptive-max")  # the cases that give max pooling's bits
SHAPE = (2, 5, 7, 9)


def _tensor(seed: int, shape=SHAPE, dtype=np.float32, special=True, ties=False) -> torch.Tensor:
    """Random data (NaN and -inf with `special`; small integers, many ties, with `ties`)
    as a channels-last tensor."""
    rng = np.random.default_rng(seed)
    x = data(rng, shape, dtype, special)
    if ties:
        x = np.where(np.isfinite(x), rng.integers(-2, 3, shape), x).astype(dtype)
    return torch.from_numpy(x).contiguous(memory_format=CL)


def _nhwc_array(t: torch.Tensor) -> cla.Array:
    """Channels-last tensor `t` as a device Array with its strides (NHWC memory)."""
    return cla.to_device(default_queue(), t.permute(0, 2, 3, 1).numpy()).transpose((0, 3, 1, 2))


def _as(kind: str, t: torch.Tensor):
    """Tensor `t` as the input kind: a device Array, a numpy array or the tensor itself,
    each with `t`'s strides."""
    return {"array": _nhwc_array, "numpy": lambda t: t.numpy(), "tensor": lambda t: t}[kind](t)


# 8: 4 channels per work-item; 16, 32 and 272: a CPU's rows of 16 channels a lane
# (plane.h; 272: two runs of channels, of 8 and 9 sixteens)
@pytest.mark.parametrize("channels", [5, 8, 16, 32, 272])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("kind", ["array", "numpy", "tensor"])
@pytest.mark.parametrize("case", FORWARD)
def test_forward_channels_last_matches_torch(kind, case, ties, channels):
    ours, theirs = FORWARD[case]
    t = _tensor(7, (2, channels, 7, 9), ties=ties)
    got, want = results(ours(_as(kind, t))), results(theirs(t))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        check_result(g, w, exact=case.startswith(EXACT))


@pytest.mark.parametrize("gpu", [False, True])
@pytest.mark.parametrize("tile", [(2, 4), (3, 2)])
@pytest.mark.parametrize("case", [c for c in FORWARD if not c.startswith("adaptive")])
def test_channels_last_forward_tiles_match_torch(case, tile, gpu):
    """Work-items of a channels-last forward taking a tile of rows x pixels of outputs (a
    GPU's choice for stride 1): the same results, the partial tiles at the edges too."""
    ours, theirs = FORWARD[case]
    t = _tensor(8, (2, 8, 10, 11), ties=True)
    with policy.use(gpu=gpu, nhwc=tile):
        got, want = results(ours(_nhwc_array(t))), results(theirs(t))
    for g, w in zip(got, want, strict=True):
        check_result(g, w, exact=case.startswith("max"))


def test_a_gpus_channels_last_max_of_stride_1_tiles_its_values_but_not_with_indices(
    build_options,
):
    """A GPU's channels-last max forward of stride 1 takes 2 x 4 outputs a work-item for its
    values, one with its indices (policy.nhwc_tile: on an H100, k3 s1 of [128,64,128,128]
    with indices took 1,042 us in 2 x 4 tiles, 831 one by one), with PyTorch's results."""
    t = _tensor(9, (2, 8, 10, 11), ties=True)
    with policy.use(gpu=True, per_plane=False):
        for with_indices, tiled in ((False, True), (True, False)):
            build_options.clear()
            op = clpool.max_pool2d_with_indices if with_indices else clpool.max_pool2d
            got = results(op(_nhwc_array(t), 3, 1, 1))
            want = results(F.max_pool2d(t, 3, 1, 1, return_indices=with_indices))
            for g, w in zip(got, want, strict=True):
                check_result(g, w, exact=True)
            tile = "-DCLPOOL_CL_ROWS=2 -DCLPOOL_CL_PIX=4"
            assert any(tile in " ".join(o) for o in build_options) == tiled, with_indices
            assert any("-DCLPOOL_CL_ROWS=" in " ".join(o) for o in build_options) == tiled


AVG_BACKWARD_WINDOWS = [(3, 2, 1, True, False, None), (2, 1, 1, False, True, None),
                        (3, 1, 0, False, True, None), (3, 2, 1, False, True, 5)]


@pytest.mark.parametrize("gpu", [False, True])
@pytest.mark.parametrize("tile", [(1, 1), (2, 2), (2, 3), (3, 2)])
def test_channels_last_avg_backward_tiles_give_the_contiguous_bits(tile, gpu, build_options):
    """Work-items of the channels-last avg backward taking a tile of rows x pixels of
    gradients (a GPU's choice): each window's share added in output order, so the
    contiguous kernels' bits, the partial tiles at the edges too."""
    rng = np.random.default_rng(12)
    x = data(rng, (2, 8, 10, 11))
    for args in AVG_BACKWARD_WINDOWS:
        shape = F.avg_pool2d(torch.from_numpy(x), *args).shape
        g = data(rng, tuple(shape))
        want = clpool.avg_pool2d_backward(g, x, *args)
        g_cl = torch.from_numpy(g).contiguous(memory_format=CL)
        x_cl = torch.from_numpy(x).contiguous(memory_format=CL)
        with policy.use(gpu=gpu, nhwc=tile):
            got = clpool.avg_pool2d_backward(_nhwc_array(g_cl), _nhwc_array(x_cl), *args)
        assert same_bits(np.ascontiguousarray(launch.to_host(got)), want), args
    rows, pixels = tile
    assert any(f"-DCLPOOL_CL_ROWS={rows}" in o and f"-DCLPOOL_CL_PIX={pixels}" in o
               for o in build_options) or tile == (1, 1)


MAX_BACKWARD_WINDOWS = [(3, 2, 1, 1, True), (2, 1, 1, 2, False), (3, 1, 1, 1, False),
                        (2, 2, 0, 1, False)]


@pytest.mark.parametrize("gpu", [False, True])
@pytest.mark.parametrize("tile", [(1, 1), (2, 2), (2, 3), (3, 2)])
def test_channels_last_max_backward_tiles_give_the_contiguous_bits(tile, gpu, build_options):
    """The channels-last max backward's tiles: the contiguous kernels' bits, ties, NaN,
    dilation and indices outside their windows (ignored) included."""
    rng = np.random.default_rng(13)
    x = data(rng, (2, 8, 10, 11), special=True)
    for args in MAX_BACKWARD_WINDOWS:
        _, idx = clpool.max_pool2d_with_indices(x, *args)
        idx.reshape(-1)[rng.random(idx.size) < 0.1] = 0  # named by windows that miss it
        g = data(rng, idx.shape)
        want = clpool.max_pool2d_with_indices_backward(g, x, *args, indices=idx)
        g_cl, x_cl, i_cl = (torch.from_numpy(a).contiguous(memory_format=CL) for a in (g, x, idx))
        with policy.use(gpu=gpu, nhwc=tile):
            got = clpool.max_pool2d_with_indices_backward(
                _nhwc_array(g_cl), _nhwc_array(x_cl), *args, indices=_nhwc_array(i_cl))
        assert same_bits(np.ascontiguousarray(launch.to_host(got)), want), args
    rows, pixels = tile
    assert any(f"-DCLPOOL_CL_ROWS={rows}" in o and f"-DCLPOOL_CL_PIX={pixels}" in o
               for o in build_options) or tile == (1, 1)


def _backward_cases(t: torch.Tensor, rng: np.random.Generator):
    """(name, clpool backward of (grad, x, indices), ATen's backward, grad_output shape
    donor): the three backward ops, in the forward's arguments."""
    _, idx = F.max_pool2d(t, 3, 2, 1, ceil_mode=True, return_indices=True)
    avg = F.avg_pool2d(t, 3, 2, 1, True, False)
    ada = F.adaptive_avg_pool2d(t, (5, 4))
    _, ada_idx = F.adaptive_max_pool2d(t, (5, 4), True)
    _, equal_idx = F.adaptive_max_pool2d(t, (7, 3), True)  # equal cells: max_pool2d's kernel
    return [
        ("max", idx.shape,
         lambda g, x, i: clpool.max_pool2d_with_indices_backward(g, x, 3, 2, 1, 1, True, i),
         lambda g, x, i: aten.max_pool2d_with_indices_backward(g, x, [3, 3], [2, 2], [1, 1],
                                                                [1, 1], True, i), idx),
        ("avg", avg.shape,
         lambda g, x, i: clpool.avg_pool2d_backward(g, x, 3, 2, 1, True, False),
         lambda g, x, i: aten.avg_pool2d_backward(g, x, [3, 3], [2, 2], [1, 1], True, False,
                                                  None), None),
        ("adaptive", ada.shape,
         lambda g, x, i: clpool.adaptive_avg_pool2d_backward(g, x),
         lambda g, x, i: aten._adaptive_avg_pool2d_backward(g, x), None),
        ("adaptive-max", ada_idx.shape, clpool.adaptive_max_pool2d_backward,
         aten.adaptive_max_pool2d_backward, ada_idx),
        ("adaptive-max-equal", equal_idx.shape, clpool.adaptive_max_pool2d_backward,
         aten.adaptive_max_pool2d_backward, equal_idx),
    ]  # fmt: skip


@pytest.mark.parametrize("channels", [5, 8, 16, 32, 272])  # as the forward's
@pytest.mark.parametrize("kind", ["array", "numpy", "tensor"])
@pytest.mark.parametrize("formats", ["cl-cl", "cl-grad", "cl-input"])
def test_backward_channels_last_matches_aten(kind, formats, channels):
    """grad_input follows the forward input's memory format, whatever grad_output's (and
    the indices') is, as ATen's backward ops do."""
    rng = np.random.default_rng(11)
    t = _tensor(8, (2, channels, 7, 9), ties=True)
    for name, shape, ours, theirs, idx in _backward_cases(t, rng):
        g = torch.from_numpy(data(rng, tuple(shape)))
        g, x = g.contiguous(memory_format=CL), t
        if formats == "cl-grad":
            x = t.contiguous()
        elif formats == "cl-input":
            g = g.contiguous()
        i = idx if idx is None or formats != "cl-input" else idx.contiguous()
        want = theirs(g, x, i)
        arrays = [None if a is None else (_as(kind, a) if not a.is_contiguous() else
                  (cla.to_device(default_queue(), a.numpy()) if kind == "array" else
                   _as(kind, a))) for a in (g, x, i)]  # fmt: skip
        check_result(ours(*arrays), want, exact=name.startswith(EXACT))


@pytest.mark.parametrize(
    "module, reference",
    [
        (ct.MaxPool2d(3, 2, 1, ceil_mode=True), torch.nn.MaxPool2d(3, 2, 1, ceil_mode=True)),
        (ct.AvgPool2d(3, 2, 1, count_include_pad=False),
         torch.nn.AvgPool2d(3, 2, 1, count_include_pad=False)),
        (ct.AdaptiveAvgPool2d((5, 4)), torch.nn.AdaptiveAvgPool2d((5, 4))),
        (ct.AdaptiveMaxPool2d((5, 4)), torch.nn.AdaptiveMaxPool2d((5, 4))),
    ],
)  # fmt: skip
def test_torch_modules_keep_channels_last_forward_and_backward(module, reference):
    t = _tensor(9, (2, 8, 7, 9), special=False)
    ours, theirs = t.clone().requires_grad_(), t.clone().requires_grad_()
    y, want = module(ours), reference(theirs)
    grad = torch.from_numpy(data(np.random.default_rng(3), tuple(want.shape)))
    y.backward(grad)
    want.backward(grad)
    assert y.is_contiguous(memory_format=CL) and not y.is_contiguous()
    assert y.stride() == want.stride() and ours.grad.stride() == theirs.grad.stride()
    assert_close(y.detach(), want.detach())
    assert_close(ours.grad, theirs.grad)


def _views(base: np.ndarray):
    """(name, device view, the same view on the host): strides other than channels-last."""
    on_device = cla.to_device(default_queue(), base)
    host_nhwc = stored_channels_last(base)
    nhwc = cla.to_device(default_queue(), host_nhwc.transpose(0, 2, 3, 1)).transpose((0, 3, 1, 2))
    return [
        ("transposed-hw", on_device.transpose((0, 1, 3, 2)), base.transpose(0, 1, 3, 2)),
        ("sliced-channels-nhwc", nhwc[:, 1:4], host_nhwc[:, 1:4]),
        ("offset", on_device[1:, 1:, 2:, 1:], base[1:, 1:, 2:, 1:]),
        ("every-other-column", on_device[:, :, :, ::2], base[:, :, :, ::2]),
        ("unbatched-hwc", nhwc[1], host_nhwc[1]),
    ]


@pytest.mark.parametrize("host", [False, True])
@pytest.mark.parametrize(
    "case", ["max-ceil", "max-dilated", "avg-exclude-pad", "adaptive", "adaptive-max"]
)
def test_other_strides_match_the_contiguous_result(case, host):
    """Any strides and offsets: the result equals that of the same values C-contiguous,
    and its memory format is torch's (channels-last only for a channels-last view), for
    device views and for the same views on the host (numpy); max
    pooling bit for bit, averages within float32's tolerance (the contiguous kernels add in
    another order)."""
    ours, theirs = FORWARD[case]
    base = data(np.random.default_rng(5), (2, 5, 8, 9), special=True)
    for name, view, on_host in _views(base):
        want = results(ours(np.ascontiguousarray(on_host)))
        got = results(ours(on_host if host else view))
        torch_strides = results(theirs(torch.from_numpy(on_host)))[0].stride()
        for g, w in zip(got, want, strict=True):
            assert tuple(s // g.dtype.itemsize for s in g.strides) == torch_strides, name
            got_host = np.ascontiguousarray(g if host else launch.to_host(g))
            if case.startswith(EXACT):
                assert same_bits(got_host, w), name
            else:
                assert_close(got_host, w, context=name)


def test_strided_backward_inputs_match_the_contiguous_result():
    """grad_output and indices of any strides (every other column of wider arrays)."""
    q = default_queue()
    x = data(np.random.default_rng(6), (2, 3, 6, 7), special=True)
    _, idx = clpool.max_pool2d_with_indices(x, 2, 1, 1, ceil_mode=True, index_dtype="int32")
    g = data(np.random.default_rng(7), idx.shape)

    def wide(a):
        w = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
        w[..., ::2] = a
        return cla.to_device(q, w)[..., ::2]

    args = (2, 1, 1, 1, True)
    got = clpool.max_pool2d_with_indices_backward(wide(g), x, *args, indices=wide(idx))
    want = clpool.max_pool2d_with_indices_backward(g, x, *args, indices=idx)
    assert same_bits(got.get(), want)
    got = clpool.avg_pool2d_backward(wide(g), x, 2, 1, 1, True, False)
    assert same_bits(got.get(), clpool.avg_pool2d_backward(g, x, 2, 1, 1, True, False))
    _, idx = clpool.adaptive_max_pool2d(x, g.shape[-2:], True, index_dtype="int32")  # overlap
    got = clpool.adaptive_max_pool2d_backward(wide(g), x, wide(idx))
    assert same_bits(got.get(), clpool.adaptive_max_pool2d_backward(g, x, idx))


@pytest.mark.parametrize("case", FORWARD)
def test_a_channels_last_array_launches_only_the_op_kernel_planned_once(
    case, launched, enqueued, monkeypatch
):
    """No copy kernel: exactly the op's _strided kernel (in the plan, and as enqueued),
    planned at the first call and reused by the next."""
    planned = []
    step = plans.Planner.step_strided
    monkeypatch.setattr(
        plans.Planner, "step_strided", lambda p, name, *a, **k: (planned.append(name),
                                                                  step(p, name, *a, **k))
    )  # fmt: skip
    x = _nhwc_array(_tensor(12, special=False))
    ours = FORWARD[case][0]
    first, second = results(ours(x)), results(ours(x))
    family = FORWARD_KERNEL[case if case in FORWARD_KERNEL else case.split("-")[0]]
    kernel = f"{family}_forward_strided"
    if case == "adaptive-global" and policy.current().on_gpu(x.queue.device):
        kernel = "adaptive_avg_pool2d_global_strided"  # a GPU's work-groups of slices
    assert [name for name, _ in launched] == [kernel] * 2
    assert enqueued == [kernel] * 2
    assert planned == [kernel]
    assert all(a.strides == b.strides for a, b in zip(first, second, strict=True))


def test_backward_kernels_launched_for_channels_last_arrays(launched, enqueued):
    t = _tensor(13, special=False)
    rng = np.random.default_rng(1)
    for _name, shape, ours, _, idx in _backward_cases(t, rng):
        g = _nhwc_array(torch.from_numpy(data(rng, tuple(shape))).contiguous(memory_format=CL))
        ours(g, _nhwc_array(t), None if idx is None else _nhwc_array(idx))
    want = [
        "max_pool2d_backward_strided",
        "avg_pool2d_backward_strided",
        "adaptive_avg_pool2d_backward_strided",
        "adaptive_max_pool2d_backward_strided",
        "max_pool2d_backward_strided",  # equal cells
    ]
    assert [name for name, _ in launched] == want and enqueued == want


@pytest.mark.parametrize("channels", [8, 32, 272])
def test_a_cpu_takes_rows_of_16_channels_where_they_divide_c(channels, launch_sizes):
    """On a CPU the max, average and adaptive ops' _strided kernels run one
    work-item per row of an image (16 channels a lane, plane.h, in runs of up to 256) where
    16 divides C; else 4 channels of a pixel."""
    sizes = launch_sizes
    t = _tensor(18, (2, channels, 7, 9), special=False)
    g = torch.from_numpy(data(np.random.default_rng(4), (2, channels, 4, 5)))
    g = _nhwc_array(g.contiguous(memory_format=CL))
    x = _nhwc_array(t)
    with policy.use(gpu=False):
        _, idx = clpool.max_pool2d_with_indices(x, 3, 2, 1)
        clpool.max_pool2d_with_indices_backward(g, x, 3, 2, 1, indices=idx)
        clpool.avg_pool2d(x, 3, 2, 1)
        clpool.avg_pool2d_backward(g, x, 3, 2, 1)
        clpool.adaptive_avg_pool2d(x, (4, 5))
        clpool.adaptive_avg_pool2d_backward(g, x)
        _, idx = clpool.adaptive_max_pool2d(x, (4, 5), True)
        clpool.adaptive_max_pool2d_backward(g, x, idx)
        clpool.adaptive_avg_pool2d(x, 1)  # a 1 x 1 output: C-contiguous too
    rows = [2 * 4, 2 * 7] * 4  # the outputs' rows, the inputs' rows
    if channels % 16 == 0:
        assert sizes == [(-(-channels // 256), 1, r) for r in [*rows, 2]]
    else:
        assert [s[2] for s in sizes[:-1]] == rows
        assert all(s[0] >= channels // 4 for s in sizes[:-1])


@pytest.mark.parametrize("channels", [3, 40])
def test_global_average_on_a_gpu_runs_work_groups_of_channels_by_row_slices(channels, launched):
    """A GPU's global average of a channels-last (or any strided) input: the work-group
    kernel, its slices of rows added in local memory."""
    with policy.use(gpu=True):
        t = _tensor(17, (2, channels, 9, 5), special=False)
        want = F.adaptive_avg_pool2d(t, 1)
        check_result(clpool.adaptive_avg_pool2d(_nhwc_array(t), 1), want, False)
        view = _nhwc_array(t)[:, :, 1:, ::2]
        want = F.adaptive_avg_pool2d(t[:, :, 1:, ::2], 1)
        check_result(clpool.adaptive_avg_pool2d(view, 1), want, False)
    assert [name for name, _ in launched] == ["adaptive_avg_pool2d_global_strided"] * 2


@pytest.mark.parametrize("channels", [8, 16])
@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_float16_and_float64_channels_last(dtype, channels):
    with policy.use(fp16_storage=True):
        t = _tensor(14, (2, channels, 7, 9), dtype=dtype)
        for case in ("max-ceil", "avg-include-pad", "adaptive", "adaptive-max"):
            ours, theirs = FORWARD[case]
            for g, w in zip(results(ours(t.numpy())), results(theirs(t)), strict=True):
                g = torch.from_numpy(g)
                assert g.dtype == w.dtype and g.stride() == w.stride()
                if case.startswith(EXACT):  # NaN payloads aside (vstore_half's)
                    assert np.array_equal(g.numpy(), w.numpy(), equal_nan=True)
                else:
                    assert_close(g, w, 1e-3 if dtype == np.float16 else 1e-12)


# (clpool forward, torch forward, clpool backward, ATen backward) of the ops with indices
WITH_INDICES = [
    (lambda a, **kw: clpool.max_pool2d_with_indices(a, 3, 2, 1, 2, **kw),
     lambda t: F.max_pool2d(t, 3, 2, 1, 2, return_indices=True),
     lambda g, x, i: clpool.max_pool2d_with_indices_backward(g, x, 3, 2, 1, 2, False, i),
     lambda g, x, i: aten.max_pool2d_with_indices_backward(g, x, [3, 3], [2, 2], [1, 1],
                                                            [2, 2], False, i)),
    (lambda a, **kw: clpool.adaptive_max_pool2d(a, (4, 5), True, **kw),
     lambda t: F.adaptive_max_pool2d(t, (4, 5), True),
     clpool.adaptive_max_pool2d_backward, aten.adaptive_max_pool2d_backward),
]  # fmt: skip


@pytest.mark.parametrize("channels", [5, 8, 16])
@pytest.mark.parametrize("op", range(len(WITH_INDICES)))
def test_int32_indices_channels_last_forward_and_backward(op, channels):
    forward, torch_forward, backward, aten_backward = WITH_INDICES[op]
    t = _tensor(15, (2, channels, 7, 9))
    values, idx = forward(t.numpy(), index_dtype="int32")
    want, want_idx = torch_forward(t)
    assert idx.dtype == np.int32 and idx.strides == tuple(4 * s for s in want_idx.stride())
    assert np.array_equal(idx, want_idx.numpy())
    g = torch.from_numpy(data(np.random.default_rng(2), tuple(want.shape)))
    g = g.contiguous(memory_format=CL)
    got = backward(g.numpy(), t.numpy(), idx)
    check_result(got, aten_backward(g, t, want_idx), exact=True)


@pytest.mark.parametrize("channels", [3, 4, 16])
def test_windows_of_minus_infinity_and_nan_channels_last(channels):
    """Windows whose every tap is -inf take the index of their first tap inside the plane;
    a NaN wins with its index (the last NaN), in each channel on its own."""
    x = np.full((1, channels, 5, 6), -np.inf, np.float32)
    x[0, 0, 1, 1] = x[0, -1, 3, 4] = np.nan
    x[0, -1, 3, 5] = np.nan
    x[0, 1 % channels, 2, 2] = 7.0
    t = torch.from_numpy(x).contiguous(memory_format=CL)
    for args in ((3, 2, 1), (2, 1, 1)):
        got = clpool.max_pool2d_with_indices(t.numpy(), *args)
        want = F.max_pool2d(t, *args, return_indices=True)
        for g, w in zip(got, want, strict=True):
            check_result(g, w, exact=True)
    for size in ((2, 4), (5, 3), 1):  # adaptive max: unequal cells, equal ones, the plane
        got = clpool.adaptive_max_pool2d(t.numpy(), size, True)
        want = F.adaptive_max_pool2d(t, size, True)
        for g, w in zip(got, want, strict=True):
            check_result(g, w, exact=True)


def test_out_must_have_the_results_strides():
    t = _tensor(16, special=False)
    x = _nhwc_array(t)
    want = F.avg_pool2d(t, 2)
    out = _nhwc_array(want * 0)
    assert clpool.avg_pool2d(x, 2, out=out) is out
    check_result(out, want, exact=False)
    with pytest.raises(clpool.PoolArgumentError, match="channels-last"):
        clpool.avg_pool2d(x, 2, out=cla.empty(default_queue(), tuple(want.shape), np.float32))


# Ops with no channels-last kernels of their own: their inputs go to the device
# C-contiguous, whatever their layout (a channels-last numpy input once went up as NHWC
# bytes and was read as NCHW).
OTHERS = {
    "max_unpool2d": (lambda a: clpool.max_unpool2d(a, _unpool_indices(), 2),
                     lambda t: F.max_unpool2d(t, torch.from_numpy(_unpool_indices()), 2)),
}  # fmt: skip


def _unpool_indices() -> np.ndarray:
    """Distinct indices of max_pool2d k2 over (14, 18) planes, for SHAPE's inputs."""
    rng = np.random.default_rng(5)
    plane = 14 * 18
    return np.stack([rng.permutation(plane)[: 7 * 9] for _ in range(10)]).reshape(SHAPE)


@pytest.mark.parametrize("name", OTHERS)
def test_ops_without_nhwc_kernels_take_channels_last_host_inputs(name):
    ours, theirs = OTHERS[name]
    t = _tensor(31, special=False)
    want = theirs(t)
    for given in (t, t.numpy()):
        got = ours(given)
        for g, w in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,), strict=True):  # fmt: skip
            np.testing.assert_array_equal(np.asarray(g), w.numpy())


@pytest.mark.parametrize("gpu", [True, False])
def test_a_3d_backward_into_a_contiguous_gradient_walks_its_rows(gpu, launch_sizes):
    """avg_pool3d_backward and adaptive_avg_pool3d_backward of NDHWC arrays return a
    C-contiguous gradient (as ATen's): the work-items walk its W (dimension 0), so that the
    writes of the largest array are coalesced (walking the channels, the H100 took 715 us
    for 54 us from NCDHW): the _strided kernels', and a GPU's avg_pool3d_backward the
    NCDHW tile's (W, H, the volumes' depths); the reference's results."""
    sizes = launch_sizes
    rng = np.random.default_rng(31)
    n, c, d, h, w = 2, 6, 5, 6, 33  # C % 4 != 0: no CPU rows of 16 channels, no local tile
    x = stored_channels_last(data(rng, (n, c, d, h, w)))
    g = stored_channels_last(data(rng, (n, c, 3, 3, 17)))
    with policy.use(gpu=gpu, per_plane=False):  # (a CPU's adaptive backward per volume: not)
        got = clpool.avg_pool3d_backward(g, x, 3, 2, 1)
        got_adaptive = clpool.adaptive_avg_pool3d_backward(g, x)
    assert_close(got, ref.avg_pool3d_backward(g, x, 3, 2, 1))
    assert_close(got_adaptive, ref.adaptive_avg_pool3d_backward(g, x))
    assert got.flags.c_contiguous and got_adaptive.flags.c_contiguous
    assert len(sizes) == 2, sizes
    avg, adaptive = sizes
    assert adaptive[0] >= w and adaptive[2] == n * c * d, sizes
    assert avg == adaptive if not gpu else avg[2] % (n * c) == 0 and avg[2] <= n * c * d, sizes


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("c, w", [(8, 33), (68, 8), (4, 3)])
def test_a_gpus_ndhwc_average_stores_through_a_tile(dtype, c, w, launch_sizes):
    """On a GPU, avg_pool3d, adaptive_avg_pool3d and adaptive_avg_pool3d_backward of NDHWC
    arrays (4 dividing C) into their C-contiguous results run work-groups of up to
    pool3d.TILE, 4 channels a work-item, no more than C and W need, and store through local
    memory (avg_pool3d_backward: the NCDHW tile, the gradient read through its strides):
    PyTorch CPU's bits for tiles that the channels and W fill, half fill and overfill,
    views with offsets, overlapping windows, padding, ceil mode, count_include_pad off, a
    divisor override and unequal cells; the adaptive backward's last rows of a work-item
    past H (their tile's barriers reached all the same)."""
    sizes = launch_sizes
    rng = np.random.default_rng(4000 + c + w)
    full = torch.from_numpy(data(rng, (2, c, 5, 6, w + 2), dtype)).contiguous(memory_format=CL3D)
    x = full[..., 1:-1]  # an offset, and strides that are not dense
    xa = launch.channels_last_array(default_queue(), full.numpy())[..., 1:-1]
    tx = min(pool3d.TILE[0], 1 << (c // 4 - 1).bit_length())  # work-items along C
    avg = [(3, 2, 1), (2, 1, 0, True, True, 5), ((1, 2, 1), (1, 1, 2), (0, 1, 0), True, False)]
    cases = [("avg_pool3d", args) for args in avg]
    cases += [("adaptive_avg_pool3d", (size,)) for size in [(3, 3, 5), (5, 4, w + 3)]]
    for name, args in cases:
        xt = x.detach().clone().requires_grad_()
        y = getattr(F, name)(xt, *args)
        g = torch.from_numpy(data(rng, tuple(y.shape), dtype)).contiguous(memory_format=CL3D)
        y.backward(g)
        backward_args = args if name == "avg_pool3d" else ()
        with policy.use(gpu=True):
            got = getattr(clpool, name)(xa, *args).get()
            got_grad = getattr(clpool, f"{name}_backward")(g.numpy(), x.numpy(), *backward_args)
        assert got.flags.c_contiguous and same_bits(got, np.ascontiguousarray(y.detach())), args
        assert got_grad.flags.c_contiguous and same_bits(got_grad, xt.grad.numpy()), args
        # the adaptive backward's work-items take rows (policy.nhwc_tile's "adaptive3d")
        with policy.use(gpu=True) as pol:
            rows = (1, pol.nhwc_tile(default_queue().device, "adaptive3d", False, backward=True)[0])
        tiled = [y.shape, x.shape]
        for i, ((n, _, d, h, w_), size, r) in enumerate(zip(tiled, sizes[-2:], rows, strict=True)):
            ty = min(128 // tx, 1 << (w_ - 1).bit_length())  # along W
            if i and name == "avg_pool3d":  # avg_pool3d_backward's NCDHW tile: the volumes' depths
                assert size[2] % (n * c) == 0 and size[2] <= n * c * d, args
            else:
                assert size == (-(-c // (4 * tx)) * tx, -(-w_ // ty) * ty, n * d * -(-h // r)), args


def test_a_gpu_without_room_for_the_tile_walks_as_before(launch_sizes, monkeypatch):
    """Where the built kernel (or the policy) takes fewer work-items in a group than the
    tile needs, the NDHWC average ops walk as they did without one: the reference's
    results, the tile's options dropped."""
    monkeypatch.setattr(plans.Planner, "group_size", lambda self, name, want: want // 2)
    rng = np.random.default_rng(41)
    x = stored_channels_last(data(rng, (2, 8, 5, 6, 9)))
    g = stored_channels_last(data(rng, (2, 8, 3, 3, 5)))
    with policy.use(gpu=True):
        assert_close(clpool.avg_pool3d(x, 3, 2, 1), ref.avg_pool3d(x, 3, 2, 1))
        assert_close(clpool.adaptive_avg_pool3d_backward(g, x),
                     ref.adaptive_avg_pool3d_backward(g, x))  # fmt: skip
    forward, backward = launch_sizes
    # a channel a work-item (the tile's 4: 2 along C), then W first over (n, c, d) rows
    assert forward[0] == 8 and backward[0] >= 9 and backward[2] == 2 * 8 * 5, launch_sizes


@pytest.mark.parametrize("w", [16, 37, 50])
def test_a_cpus_ndhwc_average_forward_stores_whole_runs_of_16(w, launch_sizes):
    """On a CPU, avg_pool3d of an NDHWC input (an output row a work-item, 16 channels a
    lane) into its C-contiguous output keeps each row's whole runs of 16 outputs and
    stores them as one vector per channel, the rest one by one: PyTorch CPU's bits, signed
    zeros included, for rows of one, two and three runs with a partial one, windows
    overlapping, padding, ceil mode, count_include_pad off and a divisor override."""
    sizes = launch_sizes
    rng = np.random.default_rng(3800 + w)
    host = data(rng, (2, 32, 3, 4, w))
    host[0, :, :2, :2] = -0.0  # windows of -0 alone average to +0, as PyTorch's
    host[1, :, :2, :2, :2] = 0.0
    host[1, :, 0, 0, 0] = -(2.0**-149)  # and so does a quotient that underflows to -0
    x = torch.from_numpy(host).contiguous(memory_format=CL3D)
    rows = "-DCLPOOL_NO_LANES16" not in quirks.options(clpool.default_queue().device)
    cases = [(3, 1, 1), (3, 2, 1), (2, 1, 1, True, False), (2, 1, 0, True, True, 5)]
    for args in [*cases, ((1, 2, 3), (1, 1, 2), (0, 1, 1))]:
        with policy.use(gpu=False):
            got = clpool.avg_pool3d(x.numpy(), *args)
        want = F.avg_pool3d(x, *args).numpy()
        assert got.flags.c_contiguous and same_bits(got, np.ascontiguousarray(want)), args
        n, _, od, oh, _ = want.shape
        assert not rows or sizes.pop() == (1, 1, n * od * oh), args  # channels, rows


@pytest.mark.parametrize("w", [16, 37, 50])
def test_a_cpus_ndhwc_average_backward_stores_whole_runs_of_16(w):
    """On a CPU, avg_pool3d_backward of NDHWC arrays (16 channels a lane) into its
    C-contiguous gradient keeps each row's whole runs of 16 elements and stores them as one
    vector per channel, the rest one by one: PyTorch CPU's bits for rows of one, two and
    three runs with a partial one, windows overlapping, padding, ceil mode and a divisor
    override."""
    rng = np.random.default_rng(3700 + w)
    x = torch.from_numpy(data(rng, (2, 32, 3, 4, w))).contiguous(memory_format=CL3D)
    for args in [(3, 2, 1), (2, 1, 0, True, True, 5), ((1, 2, 3), (1, 1, 2), (0, 1, 1))]:
        xt = x.detach().clone().requires_grad_()
        y = F.avg_pool3d(xt, *args)
        g = torch.from_numpy(data(rng, tuple(y.shape))).contiguous(memory_format=CL3D)
        y.backward(g)
        with policy.use(gpu=False):
            got = clpool.avg_pool3d_backward(g.numpy(), x.numpy(), *args)
        want = xt.grad.numpy()
        assert got.flags.c_contiguous and same_bits(got, np.ascontiguousarray(want)), args
