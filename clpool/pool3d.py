"""The 3-D pooling ops of torch.nn.functional and ATen over (N, C, D, H, W) or (C, D, H, W)
inputs, on the kernels of kernels_cl/pool3d.cl. Max pooling's indices are flat in the
unpadded volume: d * H * W + h * W + w."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import numpy.typing as npt
import pyopencl as cl

from . import kernels, plans, shapes
from .bfloat16 import is_bfloat16
from .errors import PoolArgumentError, Problem, Where, reporting
from .ops import (
    _backward_planner,
    _check_index_range,
    _given_index_bits,
    _index_bits,
    _run,
)
from .plans import Planner, Scalars
from .types import OptionalSize, Out, Size, Tensor

FAMILY = "pool3d"
# Output (forward) or input (backward) depths per work-item on a GPU, beside the policy's
# rows and columns of its tile, where the window sizes are constants (CLPOOL_3D_DEPTHS of
# kernels_cl/pool3d.cl): the fastest in sweeps on the H200 (k3 s2 p1 of [8,64,16,56,56]).
DEPTHS = {
    "max_pool3d_forward": 2,
    "max_pool3d_values": 2,
    "max_pool3d_backward": 2,
    "avg_pool3d_forward": 2,
    "avg_pool3d_backward": 2,
}
# A GPU's largest work-group (work-items along C, 4 channels each, by elements along W)
# for the _strided kernels whose views have their channels contiguous and whose result does
# not (CLPOOL_TILE3D_X/Y of kernels_cl/pool3d.cl): their results go out through local
# memory, W innermost.
TILE = (16, 8)
TILE_KERNELS = {"avg_pool3d_forward_strided", "adaptive_avg_pool3d_forward_strided"}
TILE_KERNELS |= {"adaptive_avg_pool3d_backward_strided"}


def _unbatched(shape: tuple[int, ...], ndim: int) -> tuple[int, ...]:
    """An output shape of (N, C, D, H, W) as the caller's input had it: 4-D input, no N."""
    return shape if ndim == 5 else shape[1:]


def _split(shape: tuple[int, ...]) -> tuple[int, int, tuple[int, ...]]:
    """(N, C, (D, H, W)) of an input; an unbatched one is seen as N = 1."""
    n, c, *dhw = shapes.split_batch_nd(shape, 3)
    return n, c, tuple(dhw)


def _volumes(
    p: Planner,
    dhw: tuple[int, ...],
    out: tuple[int, ...],
    spans: tuple[int, ...] = (),
    reach: int = 0,
) -> None:
    """64-bit offsets inside a volume where the input's or the output's has 2^31 elements
    or more, where the row and depth starts a window's `spans` (along D, H, W) reach past
    the input do (the per-volume max backward compares indices with them), or where a
    view's offsets inside a volume `reach` that far."""
    d, h, w = dhw
    starts = ((d + spans[0] - 2) * h * w, (h + spans[1] - 1) * w) if spans else ()
    if max(math.prod(dhw), math.prod(out), reach, *starts) >= 2**31:
        p.options += ("-DCLPOOL_LARGE_PLANE",)


def _specialize(
    p: Planner,
    rows: int,
    win: shapes.Window3d | None = None,
    tuned_as: str | None = None,
    dhw: tuple[int, ...] = (),
    planes: int | None = None,
    divisor: int = 0,
    row: int | None = None,
) -> int:
    """32-bit splits of the kernel's `rows` (dimension 2) below 2^32 of them, the window's
    sizes as compile-time constants where every one is small (never with
    CLPOOL_SPECIALIZE=0; on a GPU its loops unroll then), and the tile per work-item of a
    windowed kernel tuned as `tuned_as` on a volume `dhw` (kernels_cl/pool3d.cl), whose
    forwards then load rows as vectors where plans.row_vectors allows; returns the tile's
    depths. A kernel with a `_plane` twin runs one work-item per plane where the policy
    says so for its number of `planes` (p.by_plane: no tile): a forward's output planes
    (volume, depth), a backward's volumes. An average op's one `divisor` for every
    window (shapes.avg_divisor; 0: none) is a constant with the window's sizes. A tile
    stores rows of `row` elements (W of the output or the input) packed where
    Planner.pack_rows allows."""
    pol = p.policy
    backward = tuned_as is not None and "backward" in tuned_as
    p.by_plane = planes is not None and pol.by_plane(p.rt.device, p.dtype, planes, backward)
    if rows < 2**32:
        p.options += ("-DCLPOOL_ROWS32",)
    unrolled = False
    if win is not None and pol.specialize and max(win.k) <= pol.specialize_up_to:
        fields = (("K", win.k), ("S", win.s), ("P", win.p), ("D", win.d))
        p.options += tuple(
            f"-DCLPOOL_3D_{field}{axis}={v}"
            for field, values in fields
            for axis, v in zip("DHW", values, strict=True)
        )
        p.options += (f"-DCLPOOL_AVG_DIVISOR={divisor}",) if divisor else ()
        if p.gpu:
            unrolled = True
            p.options += ("-DCLPOOL_UNROLL",)
    # A tile's positions stay in 32 bits as the 2-D ones do (shapes.window's bound)
    if (
        win is None
        or tuned_as is None
        or p.by_plane
        or any(
            n + 2 * pad + (k - 1) * d + shapes.MAX_TILE * s >= 2**31
            for n, k, s, pad, d in zip(dhw, win.k, win.s, win.p, win.d, strict=True)
        )
    ):
        return 1
    p.rows, p.cols = pol.tile(p.rt.device, tuned_as)
    if row is not None:
        p.pack_rows(row)
    depths = DEPTHS.get(tuned_as, 1) if unrolled else 1
    if depths > 1:
        p.options += (f"-DCLPOOL_3D_DEPTHS={depths}",)
    # Read by the forwards only; a backward takes them too, so that it builds its forward's
    # program where their tiles and packed rows agree.
    if unrolled:
        p.options += plans.row_vectors(dhw[2], p.cols * win.s[2], is_bfloat16(p.dtype))
    return depths


def _axes(prefix: str, values: tuple[int, ...]) -> dict[str, int]:
    return {f"{prefix}{axis}": v for axis, v in zip("dhw", values, strict=True)}


def _shape_sizes(dhw: tuple[int, ...], out: tuple[int, ...]) -> Scalars:
    return dict(D=dhw[0], H=dhw[1], W=dhw[2], OD=out[0], OH=out[1], OW=out[2])


def _max_sizes(win: shapes.Window3d, dhw: tuple[int, ...]) -> Scalars:
    return {**_shape_sizes(dhw, win.out), **_axes("k", win.k), **_axes("s", win.s),
            **_axes("p", win.p), **_axes("d", win.d)}  # fmt: skip


def _avg_sizes(
    win: shapes.Window3d, dhw: tuple[int, ...], include_pad: bool, divisor: int
) -> Scalars:
    return {**_shape_sizes(dhw, win.out), **_axes("k", win.k), **_axes("s", win.s),
            **_axes("p", win.p), "count_include_pad": int(include_pad),
            "divisor_override": divisor}  # fmt: skip


def _channels_last(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether ATen's max_pool3d gives a channels-last-3d result for an input of `shape`
    and element `strides`: a 5-D one laid out so (shapes.channels_last_3d); an unbatched
    one that, seen as (1, C, D, H, W), is dense NDHWC memory and not C-contiguous."""
    if len(shape) == 5:
        return shapes.channels_last_3d(shape, strides)
    inner = (*shape[1:], shape[0]), (*strides[1:], strides[0])  # the channels innermost
    return not shapes.c_contiguous(shape, strides) and shapes.c_contiguous(*inner)


def _keep_format(p: Planner, last: bool) -> None:
    """Lay the call's outputs out with the channels innermost (channels-last-3d, or its
    unbatched view) where `last`, else leave them C-contiguous."""
    for i, spec in enumerate(p.outputs if last else ()):
        full = (1,) * (5 - len(spec.shape)) + spec.shape
        strides = plans.dense_strides(full, True)[5 - len(spec.shape) :]
        nbytes = tuple(s * spec.dtype.itemsize for s in strides)
        p.outputs[i] = dataclasses.replace(spec, strides=nbytes)


def _tile(p: Planner, name: str, c: int, w: int, channels: list[int]) -> tuple[int, int] | None:
    """The work-group (work-items along C by elements along W) in which _strided kernel
    `name` stores its results through local memory, on a GPU, for a kernel of TILE_KERNELS
    whose views have their `channels` (strides: the output's first) contiguous, 4 of them
    dividing C, and whose output has not: up to TILE, no larger than C / 4 and W need;
    None elsewhere, and where the built kernel takes fewer work-items in a group (or the
    policy's group is smaller)."""
    views_only = set(channels[1:]) == {1} and channels[0] != 1
    if not (p.gpu and name in TILE_KERNELS and c % 4 == 0 and views_only):
        return None
    x = min(TILE[0], plans.pow2_at_least(c // 4))
    y = min(math.prod(TILE) // x, plans.pow2_at_least(w))
    options = p.options
    p.options += (f"-DCLPOOL_TILE3D_X={x}", f"-DCLPOOL_TILE3D_Y={y}")
    if p.group_size(name, x * y) < x * y:
        p.options = options
        return None
    return x, y


AXES = ("sn", "sc", "sd", "sh", "sw")


def _view_strides(p: Planner, view: str, i: int, rank: int = 3) -> dict[str, int]:
    """Input i's element strides as the arguments of a 5-D view `view` (VIEW3D) of its
    batch and channel axes and its `rank` spatial ones: an axis it lacks of stride 0."""
    strides = p.strides[i]
    batch, spatial = strides[: len(strides) - rank], strides[len(strides) - rank :]
    padded = (0,) * (2 - len(batch)) + batch + (0,) * (3 - rank) + spatial
    return {f"{view}_{axis}": v for axis, v in zip(AXES, padded, strict=True)}


def _step_strided(
    p: Planner,
    name: str,
    views: dict[str, int],
    slots: dict[str, str] | None = None,
    tile: tuple[int, int] = (1, 1),
    **scalars: Any,
) -> None:
    """Launch 3-D _strided kernel `name` over the elements of the call's first output,
    reading input i through its strides as view `v` for each `v: i` of `views`: the
    work-items walk the channels innermost where the largest of them (a forward's input, a
    backward's gradient) has them contiguous, 4 channels each where all views and the
    output do and they divide C; on a CPU, for a kernel of plans.CPU_ROWS where 16 divides
    C and the views' channels are contiguous (and the output's, unless
    plans.CPU_ROWS_ANY_OUTPUT), a row of an image each, 16 channels a lane. A kernel that
    takes 4 channels of a `tile` of elements of a depth (rows, pixels along W: its
    CLPOOL_CL_ROWS and CLPOOL_CL_PIX) takes them where it takes 4 channels. On a GPU, in
    work-groups of _tile's, 4 channels each, their results stored through local memory W
    innermost, where it gives one (without it one side's accesses stay uncoalesced
    whichever it walks: avg_pool3d_backward of an NDHWC grad_output into its C-contiguous
    gradient took 715 us walking the channels on an H100, 778 us walking W on the H200,
    against about 50 us from NCDHW; BENCHMARKS.md. A GPU's avg_pool3d_backward now reads
    any gradient with the NCDHW tile: 129 -> 94 us on the H200)."""
    out = p.outputs[0]
    pad = (1,) * (5 - len(out.shape))
    n, c, d, h, w = pad + out.shape
    out_strides = (0,) * len(pad) + tuple(s // out.dtype.itemsize for s in out.strides)
    channels = [out_strides[1]]
    counts = [math.prod(out.shape)]
    for view, i in views.items():
        strides = _view_strides(p, view, i)
        scalars.update(strides)
        channels.append(strides[f"{view}_sc"])
        counts.append(math.prod(p.arrays[i].shape))
    scalars.update({f"{out.slot}_{axis}": v for axis, v in zip(AXES, out_strides, strict=True)})
    largest = max(counts)
    inner = c > 1 and 1 in (s for s, n_ in zip(channels, counts, strict=True) if n_ == largest)
    if tile != (1, 1):  # in the build whose work-group size _tile asks for
        p.options += (f"-DCLPOOL_CL_ROWS={tile[0]}", f"-DCLPOOL_CL_PIX={tile[1]}")
    group = _tile(p, name, c, w, channels)
    inner = inner or group is not None
    lanes = 4 if group or (inner and set(channels) == {1} and c % 4 == 0) else 1
    geometry = (c // lanes, w, n * d * h) if inner else (w, h, n * c * d)
    if lanes == 4 and tile != (1, 1):
        geometry = (c // 4, -(-w // tile[1]), n * d * -(-h // tile[0]))
    else:  # no tile without 4 channels a work-item
        p.options = tuple(o for o in p.options if not o.startswith("-DCLPOOL_CL_"))
    # a CPU's rows of an image, their channels in runs of up to 256 (clpool.h)
    if p.cpu_rows16(name, c, set(channels[1:]), channels[0]):
        inner, lanes, geometry = True, 16, (-(-c // 256), 1, n * d * h)
    if geometry[2] >= 2**32:  # rows split in 64 bits
        p.options = tuple(o for o in p.options if o != "-DCLPOOL_ROWS32")
    sizes, local = plans.ndrange(p.rt.device, *geometry)
    if group:
        local = (*group, 1)
        sizes = (-(-geometry[0] // group[0]) * group[0], -(-geometry[1] // group[1]) * group[1],
                 sizes[2])  # fmt: skip
    p.as_is = True
    kernel = p.kernel(name, own=True)
    channels_inner = lanes if inner else 0
    p.steps.append(
        kernels.bind(kernel, sizes, local, slots, C=c, channels_inner=channels_inner, **scalars)
    )


def _plan_max_forward(
    where: Where, arrays: tuple[object, ...], kernel_size: object, stride: object,
    padding: object, dilation: object, ceil_mode: object, index_dtype: npt.DTypeLike,
    with_indices: bool, device: object, queue: cl.CommandQueue | None,
) -> plans.Plan:  # fmt: skip
    p = Planner(where, FAMILY, device, arrays, queue)
    x = p.arrays[0]
    n, c, dhw = _split(x.shape)
    win = shapes.window3d(dhw, kernel_size, stride, padding, dilation, ceil_mode, family="max")
    p.index_bits = _index_bits(index_dtype)
    _check_index_range(p.index_bits, math.prod(dhw))
    _volumes(p, dhw, win.out)
    out_shape = _unbatched((n, c, *win.out), x.ndim)
    p.output("out", out_shape)
    if with_indices:
        p.output("indices", out_shape, np.dtype(f"int{p.index_bits}"))
    else:
        p.options += ("-DCLPOOL_NO_INDICES",)
    od, oh, ow = win.out
    tuned_as = "max_pool3d_forward" if with_indices else "max_pool3d_values"
    planes = None if p.strided else n * c * od
    depths = _specialize(p, n * c * od, win, tuned_as, dhw, planes, row=ow)
    _keep_format(p, p.strided and _channels_last(x.shape, p.strides[0]))
    slots = None if with_indices else {"indices": "out"}  # a placeholder, untouched
    if n * c and p.strided:
        _step_strided(p, "max_pool3d_forward_strided", {"x": 0}, slots, **_max_sizes(win, dhw))
    elif n * c:
        grid = (ow, oh, n * c * -(-od // depths))
        p.step_by_plane("max_pool3d_forward", grid, slots, planes, **_max_sizes(win, dhw))
    return p.plan("x")


def max_pool3d(
    input: Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    dilation: Size = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
    *,
    index_dtype: npt.DTypeLike = "int64",
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """3-D max pooling, as torch.nn.functional.max_pool3d; with return_indices, as
    max_pool3d_with_indices."""
    if return_indices:
        return max_pool3d_with_indices(
            input, kernel_size, stride, padding, dilation, ceil_mode,
            index_dtype=index_dtype, device=device, queue=queue, out=out,
        )  # fmt: skip
    params = (kernel_size, stride, padding, dilation, ceil_mode, "int64", False, device)
    return _run("max_pool3d", _plan_max_forward, (input,), params, queue, out)[0]


def max_pool3d_with_indices(
    input: Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    dilation: Size = 1,
    ceil_mode: bool = False,
    *,
    index_dtype: npt.DTypeLike = "int64",
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> tuple[Tensor, Tensor]:
    """3-D max pooling and the flat d*H*W + h*W + w index of each maximum in its input
    volume; out=, where given, is a pair (values, indices)."""
    params = (kernel_size, stride, padding, dilation, ceil_mode, index_dtype, True, device)
    values, indices = _run(
        "max_pool3d_with_indices", _plan_max_forward, (input,), params, queue, out, results=2
    )
    return values, indices


def _plan_max_backward(
    where: Where, arrays: tuple[object, ...], kernel_size: object, stride: object,
    padding: object, dilation: object, ceil_mode: object, device: object,
    queue: cl.CommandQueue | None,
) -> plans.Plan:  # fmt: skip
    p, batch = _backward_planner(where, FAMILY, device, arrays, queue, spatial=3)
    n, c, dhw = batch[0], batch[1], batch[2:]
    grad, x, indices = p.arrays
    win = shapes.window3d(dhw, kernel_size, stride, padding, dilation, ceil_mode, family="max")
    out_shape = x.shape[:-3] + win.out
    shapes.expect_shape("grad_output", grad.shape, out_shape)
    shapes.expect_shape("indices", indices.shape, out_shape)
    p.index_bits = _given_index_bits(indices)
    _check_index_range(p.index_bits, math.prod(dhw))
    _volumes(p, dhw, win.out, tuple((k - 1) * d + 1 for k, d in zip(win.k, win.d, strict=True)))
    p.output("grad_x", x.shape)
    d, h, w = dhw
    volumes = None if p.strided else n * c
    depths = _specialize(p, n * c * d, win, "max_pool3d_backward", dhw, volumes, row=w)
    _keep_format(p, p.strided and shapes.channels_last_3d(x.shape, p.strides[1]))
    if n * c and p.strided:
        views = {"grad_out": 0, "indices": 2}
        tile = p.policy.nhwc_tile(p.rt.device, "max3d", win.s[1:] == (1, 1), backward=True)
        _step_strided(p, "max_pool3d_backward_strided", views, tile=tile, **_max_sizes(win, dhw))
    elif n * c:
        grid = (w, h, n * c * -(-d // depths))
        p.step_by_plane("max_pool3d_backward", grid, planes=n * c, bands=d, **_max_sizes(win, dhw))
    return p.plan("grad_out", None, "indices")


def max_pool3d_with_indices_backward(
    grad_output: Tensor,
    input: Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    dilation: Size = 1,
    ceil_mode: bool = False,
    indices: Tensor | None = None,
    *,
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor:
    """Gradient of max_pool3d_with_indices with respect to its input. The arguments are in
    ATen's order: indices comes last (and is required)."""
    label = "max_pool3d_with_indices_backward"
    if indices is None:
        with reporting(label):
            raise Problem(PoolArgumentError, "indices is required (ATen's order: it comes last)")
    params = (kernel_size, stride, padding, dilation, ceil_mode, device)
    arrays = (grad_output, input, indices)
    return _run(label, _plan_max_backward, arrays, params, queue, out)[0]


def _avg_window(
    dhw: tuple[int, ...], kernel_size: object, stride: object, padding: object,
    ceil_mode: object, include_pad: object, override: object,
) -> tuple[shapes.Window3d, bool, int]:  # fmt: skip
    """The window of 3-D average pooling on a (d, h, w) volume, count_include_pad as a bool
    and the divisor argument (shapes.avg_divisor: 0 where each window computes its own)."""
    win = shapes.window3d(dhw, kernel_size, stride, padding, 1, ceil_mode, family="avg")
    include = shapes.flag(include_pad, "count_include_pad")
    return win, include, shapes.avg_divisor(dhw, win, include, shapes.divisor(override))


def _plan_avg_forward(
    where: Where, arrays: tuple[object, ...], kernel_size: object, stride: object,
    padding: object, ceil_mode: object, include_pad: object, override: object, device: object,
    queue: cl.CommandQueue | None,
) -> plans.Plan:  # fmt: skip
    p = Planner(where, FAMILY, device, arrays, queue)
    x = p.arrays[0]
    n, c, dhw = _split(x.shape)
    win, include, div = _avg_window(
        dhw, kernel_size, stride, padding, ceil_mode, include_pad, override
    )
    _volumes(p, dhw, win.out)
    p.output("out", _unbatched((n, c, *win.out), x.ndim))
    od, oh, ow = win.out
    planes = None if p.strided else n * c * od
    depths = _specialize(p, n * c * od, win, "avg_pool3d_forward", dhw, planes, div, ow)
    sizes = _avg_sizes(win, dhw, include, div)
    if n * c and p.strided:  # the result C-contiguous whatever the input, as ATen's
        _step_strided(p, "avg_pool3d_forward_strided", {"x": 0}, **sizes)
    elif n * c:
        grid = (ow, oh, n * c * -(-od // depths))
        p.step_by_plane("avg_pool3d_forward", grid, planes=planes, **sizes)
    return p.plan("x")


def avg_pool3d(
    input: Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
    *,
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor:
    """3-D average pooling, as torch.nn.functional.avg_pool3d."""
    params = (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, device)
    return _run("avg_pool3d", _plan_avg_forward, (input,), params, queue, out)[0]


def _plan_avg_backward(
    where: Where, arrays: tuple[object, ...], kernel_size: object, stride: object,
    padding: object, ceil_mode: object, include_pad: object, override: object, device: object,
    queue: cl.CommandQueue | None,
) -> plans.Plan:  # fmt: skip
    p, batch = _backward_planner(where, FAMILY, device, arrays, queue, spatial=3)
    n, c, dhw = batch[0], batch[1], batch[2:]
    grad, x = p.arrays
    win, include, div = _avg_window(
        dhw, kernel_size, stride, padding, ceil_mode, include_pad, override
    )
    shapes.expect_shape("grad_output", grad.shape, x.shape[:-3] + win.out)
    p.strided = p.strided_input(0)  # x: its shape only (the result C-contiguous, as ATen's)
    view = p.strided and p.gpu  # read by the tile through its strides
    reach = shapes.span(grad.shape[-3:], p.strides[0][-3:]) if view else 0
    _volumes(p, dhw, win.out, reach=reach)
    p.output("grad_x", x.shape)
    d, h, w = dhw
    volumes = None if p.strided else n * c
    depths = _specialize(p, n * c * d, win, "avg_pool3d_backward", dhw, volumes, div, w)
    sizes = _avg_sizes(win, dhw, include, div)
    if n * c and p.strided and not view:  # a CPU's _strided kernel (rows of 16 channels)
        _step_strided(p, "avg_pool3d_backward_strided", {"grad_out": 0}, **sizes)
    elif n * c and p.by_plane:
        p.step_planes("avg_pool3d_backward_plane", n * c, **sizes)
    elif n * c:  # the tile, a GPU's strided gradient read as it lies (BENCHMARKS.md)
        p.as_is = True
        if view:  # its rows of grad_x packed as a C-contiguous gradient's (not timed apart)
            p.options += ("-DCLPOOL_GRAD_VIEW",)
            p.pack_rows(w, views=True)
        grid = (w, h, n * c * -(-d // depths))
        sizes.update(_view_strides(p, "grad_out", 0), C=c)
        p.step("avg_pool3d_backward", grid, **sizes)
    return p.plan("grad_out", None)


def avg_pool3d_backward(
    grad_output: Tensor,
    input: Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
    *,
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor:
    """Gradient of avg_pool3d with respect to its input."""
    params = (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, device)
    arrays = (grad_output, input)
    return _run("avg_pool3d_backward", _plan_avg_backward, arrays, params, queue, out)[0]


def _plan_adaptive_forward(
    where: Where,
    arrays: tuple[object, ...],
    output_size: object,
    device: object,
    queue: cl.CommandQueue | None,
) -> plans.Plan:
    p = Planner(where, FAMILY, device, arrays, queue)
    x = p.arrays[0]
    n, c, dhw = _split(x.shape)
    out = shapes.adaptive_output(tuple(dhw), output_size)
    _volumes(p, dhw, out)
    p.cell_bounds(*dhw, *out)
    p.output("out", _unbatched((n, c, *out), x.ndim))
    _specialize(p, n * c * out[0])
    # C-contiguous, as ATen's; its global average is a mean, whose result follows a
    # channels-last-3d input
    global_last = out == (1, 1, 1) and shapes.channels_last_3d(x.shape, p.strides[0])
    _keep_format(p, p.strided and global_last)
    if n * c * math.prod(out) and p.strided:
        sizes = _shape_sizes(dhw, out)
        _step_strided(p, "adaptive_avg_pool3d_forward_strided", {"x": 0}, **sizes)
    elif n * c * math.prod(out):
        p.step(
            "adaptive_avg_pool3d_forward", (out[2], out[1], n * c * out[0]),
            **_shape_sizes(dhw, out),
        )  # fmt: skip
    return p.plan("x")


def adaptive_avg_pool3d(
    input: Tensor,
    output_size: OptionalSize,
    *,
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor:
    """3-D adaptive average pooling, as torch.nn.functional.adaptive_avg_pool3d."""
    params = (output_size, device)
    return _run("adaptive_avg_pool3d", _plan_adaptive_forward, (input,), params, queue, out)[0]


def _plan_adaptive_backward(
    where: Where, arrays: tuple[object, ...], device: object, queue: cl.CommandQueue | None
) -> plans.Plan:
    p, batch = _backward_planner(where, FAMILY, device, arrays, queue, spatial=3)
    n, c, dhw = batch[0], batch[1], batch[2:]
    grad, x = p.arrays
    shapes.expect_shape("grad_output", grad.shape[:-3], x.shape[:-3])
    out = tuple(grad.shape[-3:])
    _volumes(p, dhw, out)
    p.cell_bounds(*dhw, *out)
    p.strided = p.strided_input(0)  # x: its shape only (the result C-contiguous, as ATen's)
    p.output("grad_x", x.shape)
    d, h, w = dhw
    name = "adaptive_avg_pool3d_backward"
    _specialize(p, n * c * d, tuned_as=name, planes=n * c)
    sizes = _shape_sizes(dhw, out)
    if n * c and p.by_plane:  # grad_output read as it is
        p.as_is = True
        sizes.update(_view_strides(p, "grad_out", 0))
        p.step_planes(f"{name}_plane", n * c, C=c, **sizes)
    elif n * c and p.strided:  # C-contiguous, as ATen's
        rows = p.policy.nhwc_tile(p.rt.device, "adaptive3d", False, backward=True)[0]
        _step_strided(p, f"{name}_strided", {"grad_out": 0}, tile=(rows, 1), **sizes)
    elif n * c and p.gpu and shapes.shrinks(dhw, out):
        group = p.group_size("adaptive_avg_pool3d_slab", min(plans.pow2_at_least(w), 256))
        p.step("adaptive_avg_pool3d_slab", (n * c * out[0] * out[1] * group, -(-w // group)),
               local=(group, 1), **sizes)  # fmt: skip
    elif n * c:
        p.rows = p.policy.tile(p.rt.device, name)[0]  # rows of a column per work-item
        p.step(name, (w, h, n * c * d), **sizes)
    return p.plan("grad_out", None)


def adaptive_avg_pool3d_backward(
    grad_output: Tensor,
    input: Tensor,
    *,
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor:
    """Gradient of adaptive_avg_pool3d with respect to its input; the output size is
    grad_output's."""
    label = "adaptive_avg_pool3d_backward"
    arrays = (grad_output, input)
    return _run(label, _plan_adaptive_backward, arrays, (device,), queue, out)[0]
