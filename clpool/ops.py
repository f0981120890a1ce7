"""The seven pooling ops. Each reads as check -> plan (cached per call signature) ->
launch: the first call with a signature checks its arguments and plans its kernels; a
repeat call binds its buffers and enqueues."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Hashable, Sequence
from typing import cast

import numpy as np
import numpy.typing as npt
import pyopencl as cl
import pyopencl.array as cla

from . import adopt, launch, plans, shapes
from .discovery import choose, refuse_if_forked, require, runtime
from .errors import PoolArgumentError, Problem, Where, reporting
from .plans import Planner, Scalars
from .types import OptionalSize, Out, Size, Tensor

INDEX_BITS = {np.dtype(np.int32): 32, np.dtype(np.int64): 64}
# Adaptive cells of a plane of one row, or a plane's one cell, at least this wide are
# reduced by a work-group each on a GPU (adaptive_avg_pool2d_global,
# adaptive_max_pool_global), and a row's such cells take a work-group each in the backward
# (adaptive_avg_pool2d_global_backward, adaptive_max_pool_global_backward).
WIDE_CELLS = 64


def _signature(a: object) -> tuple[Hashable, ...]:
    """What a plan depends on in one input: shape, layout, dtype and queue (a numpy
    input: shape and dtype)."""
    if isinstance(a, cla.Array):
        queue = a.queue.int_ptr if a.queue is not None else None
        return (a.shape, a.strides, a.dtype, a.offset == 0, queue)
    if isinstance(a, np.ndarray):
        return (a.shape, a.dtype, plans.uploads_nhwc(a), None)  # not .str: bfloat16's is <V2
    raise TypeError  # anything else is planned afresh at each call


def _run(
    label: str,
    make: Callable[..., plans.Plan],
    arrays: tuple[object, ...],
    params: tuple[object, ...],
    queue: cl.CommandQueue | None = None,
    out: Out = None,
    results: int = 1,
) -> Sequence[Tensor]:
    """Run op `label` on `arrays`: the plan `make(where, arrays, *params, queue)` gives,
    made once per call signature (and queue), writing into `out` where given. The results
    follow the inputs (see adopt)."""
    with reporting(label) as where:
        refuse_if_forked()
        adopt.check_queue(queue)
        given = adopt.out_arrays(out, results)
        # a backward op's results follow its forward input (grad_output, input, ...)
        arrays, like = adopt.inputs(arrays, 1 if label.endswith("_backward") else 0)
        if queue is None and given and not any(isinstance(a, cla.Array) for a in arrays):
            queue = given[0].queue  # host inputs with out=: run where out lives
        key: tuple[Hashable, ...] | None
        try:
            on = queue.int_ptr if queue is not None else None
            signatures = tuple(map(_signature, arrays))
            key = (label, repr(params), *signatures, on)
        except TypeError:
            key = None
        if key is not None and any(part[-1] is None for part in signatures):
            # numpy inputs run where the environment says, unless device= or queue= says
            key += (os.environ.get("CLPOOL_DEVICE"), os.environ.get("PYOPENCL_CTX"))
        plan = plans.cached(key) if key is not None else None
        if plan is None:
            plan = make(where, arrays, *params, queue)
            if key is not None:
                plans.keep(key, plan)
        where.device, where.dtype = plan.device, plan.dtype
        if given is not None:
            adopt.check_out(given, plan.outputs, plan.context)
        got: Sequence[Tensor] = launch.run(plan, arrays, given)
        if like is not None and given is None and plan.host:
            got = adopt.tensors(cast(list[np.ndarray], got), like)  # a host plan's: numpy
        return got


def _unbatched(shape: tuple[int, ...], ndim: int) -> tuple[int, ...]:
    """An output shape of (N, C, ...) as the caller's input had it: 3-D input, no N."""
    return shape if ndim == 4 else shape[1:]


def _check_index_range(bits: int, plane: int) -> None:
    """int32 indices cannot name the elements of a plane of 2^31 elements or more."""
    if bits == 32 and plane > 2**31 - 1:
        raise Problem(
            PoolArgumentError,
            f"int32 indices cannot address a plane of {plane} elements; use int64",
        )


def _index_bits(index_dtype: npt.DTypeLike) -> int:
    try:
        return INDEX_BITS[np.dtype(index_dtype)]
    except (TypeError, KeyError):
        raise Problem(
            PoolArgumentError, f"index_dtype must be int64 or int32, got {index_dtype!r}"
        ) from None


def _given_index_bits(indices: np.ndarray | cla.Array) -> int:
    """The width of a backward op's indices, int64 or int32."""
    if indices.dtype not in INDEX_BITS:
        raise Problem(
            PoolArgumentError, f"indices must be int64 or int32, got {indices.dtype.name}"
        )
    return INDEX_BITS[indices.dtype]


def _max_sizes(win: shapes.Window, h: int, w: int) -> Scalars:
    return dict(H=h, W=w, OH=win.oh, OW=win.ow, kh=win.kh, kw=win.kw, sh=win.sh, sw=win.sw,
                ph=win.ph, pw=win.pw, dh=win.dh, dw=win.dw)  # fmt: skip


def _avg_sizes(win: shapes.Window, h: int, w: int, include_pad: bool, divisor: int) -> Scalars:
    return dict(H=h, W=w, OH=win.oh, OW=win.ow, kh=win.kh, kw=win.kw, sh=win.sh, sw=win.sw,
                ph=win.ph, pw=win.pw, count_include_pad=int(include_pad),
                divisor_override=divisor)  # fmt: skip


def _nhwc_tile(
    p: Planner, win: shapes.Window, backward: bool = False, indices: bool = False
) -> tuple[int, int]:
    """Rows and pixels per work-item of a channels-last _strided kernel with tiles (of a max
    forward that stores `indices` too, family "max indices")."""
    family = f"{p.family} indices" if indices else p.family
    return p.policy.nhwc_tile(p.rt.device, family, (win.sh, win.sw) == (1, 1), backward)


def _plan_max_forward(
    where: Where,
    arrays: tuple[object, ...],
    kernel_size: object,
    stride: object,
    padding: object,
    dilation: object,
    ceil_mode: object,
    index_dtype: npt.DTypeLike,
    with_indices: bool,
    device: object,
    queue: cl.CommandQueue | None,
) -> plans.Plan:
    p = Planner(where, "max", device, arrays, queue)
    x = p.arrays[0]
    n, c, h, w = shapes.split_batch(x.shape)
    win = shapes.window((h, w), kernel_size, stride, padding, dilation, ceil_mode, family="max")
    p.index_bits = _index_bits(index_dtype)
    _check_index_range(p.index_bits, h * w)
    p.specialize(
        "max_pool2d_forward" if with_indices else "max_pool2d_values",
        (h * w, win.oh * win.ow),
        win,
        w,
        planes=n * c,
        row=win.ow,
    )
    out_shape = _unbatched((n, c, win.oh, win.ow), x.ndim)
    p.output("out", out_shape, like=0)
    if with_indices:
        p.output("indices", out_shape, np.dtype(f"int{p.index_bits}"), like=0)
        # a GPU tile stores its rows' indices in pairs where every row starts at an even
        # output (max_pool.cl; the _strided kernel does not read the option, so a strided
        # input is built without it)
        pairs = p.gpu and not p.strided and p.cols % 2 == 0 and win.ow % 2 == 0
        p.options += ("-DCLPOOL_INDEX_PAIRS",) if pairs else ()
    else:
        p.options += ("-DCLPOOL_NO_INDICES",)
        # planes of one row (max_pool1d): the GPU tile keeps NaN apart (max_pool.cl; the
        # _strided kernel does not read the option, so a strided input is built without it)
        p.options += ("-DCLPOOL_NAN_APART",) if p.gpu and h == 1 and not p.strided else ()
    slots = None if with_indices else {"indices": "out"}  # a placeholder, untouched
    if n * c and p.strided:
        p.step_strided(
            "max_pool2d_forward_strided", {"x": 0}, slots, lanes=4,
            tile=_nhwc_tile(p, win, indices=with_indices), **_max_sizes(win, h, w),
        )  # fmt: skip
    elif n * c:
        p.step_by_plane(
            "max_pool2d_forward", (win.ow, win.oh, n * c), slots, **_max_sizes(win, h, w)
        )
    return p.plan("x")


def max_pool2d(
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
    """2-D max pooling, as torch.nn.functional.max_pool2d; with return_indices, as
    max_pool2d_with_indices."""
    if return_indices:
        return max_pool2d_with_indices(
            input, kernel_size, stride, padding, dilation, ceil_mode,
            index_dtype=index_dtype, device=device, queue=queue, out=out,
        )  # fmt: skip
    params = (kernel_size, stride, padding, dilation, ceil_mode, "int64", False, device)
    return _run("max_pool2d", _plan_max_forward, (input,), params, queue, out)[0]


def max_pool2d_with_indices(
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
    """2-D max pooling and the flat h*W + w index of each maximum in its input plane;
    out=, where given, is a pair (values, indices)."""
    params = (kernel_size, stride, padding, dilation, ceil_mode, index_dtype, True, device)
    values, indices = _run(
        "max_pool2d_with_indices", _plan_max_forward, (input,), params, queue, out, results=2
    )
    return values, indices


def _backward_planner(
    where: Where,
    family: str,
    device: object,
    arrays: tuple[object, ...],
    queue: cl.CommandQueue | None,
    spatial: int = 2,
) -> tuple[Planner, tuple[int, ...]]:
    """The planner of a backward op over `spatial` axes: runs where grad_output lives, with
    x's dtype, and x's (N, C, *spatial sizes)."""
    p = Planner(where, family, device, arrays, queue)
    grad, fwd = p.arrays[0], p.arrays[1]
    where.dtype = fwd.dtype
    if grad.dtype != fwd.dtype:
        raise Problem(
            PoolArgumentError,
            f"grad_output has dtype {grad.dtype.name} but the input has {fwd.dtype.name}",
        )
    if grad.ndim != fwd.ndim:
        raise Problem(
            PoolArgumentError,
            f"grad_output has {grad.ndim} dimensions but the input has {fwd.ndim}",
        )
    return p, shapes.split_batch_nd(fwd.shape, spatial)


def _plan_max_backward(
    where: Where, arrays: tuple[object, ...], kernel_size: object, stride: object,
    padding: object, dilation: object, ceil_mode: object, device: object,
    queue: cl.CommandQueue | None,
) -> plans.Plan:  # fmt: skip
    p, (n, c, h, w) = _backward_planner(where, "max", device, arrays, queue)
    grad, x, indices = p.arrays
    win = shapes.window((h, w), kernel_size, stride, padding, dilation, ceil_mode, family="max")
    out_shape = x.shape[:-2] + (win.oh, win.ow)
    shapes.expect_shape("grad_output", grad.shape, out_shape)
    shapes.expect_shape("indices", indices.shape, out_shape)
    p.index_bits = _given_index_bits(indices)
    _check_index_range(p.index_bits, h * w)
    # the per-plane kernel compares indices with the row starts a window reaches past H
    reach = (h + (win.kh - 1) * win.dh) * w
    p.specialize("max_pool2d_backward", (h * w, win.oh * win.ow, reach), win, planes=n * c, row=w)
    p.output("grad_x", x.shape, like=1)
    views = {"grad_out": 0, "indices": 2}
    if n * c and p.strided:
        tile = _nhwc_tile(p, win, backward=True)
        p.step_strided(
            "max_pool2d_backward_strided", views, lanes=4, tile=tile, **_max_sizes(win, h, w)
        )
    elif n * c:
        p.step_by_plane("max_pool2d_backward", (w, h, n * c), bands=h, **_max_sizes(win, h, w))
    return p.plan("grad_out", None, "indices")


def max_pool2d_with_indices_backward(
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
    """Gradient of max_pool2d_with_indices with respect to its input. The arguments are in
    ATen's order: indices comes last (and is required)."""
    label = "max_pool2d_with_indices_backward"
    if indices is None:
        with reporting(label):
            raise Problem(PoolArgumentError, "indices is required (ATen's order: it comes last)")
    params = (kernel_size, stride, padding, dilation, ceil_mode, device)
    arrays = (grad_output, input, indices)
    return _run(label, _plan_max_backward, arrays, params, queue, out)[0]


def _avg_window(
    h: int, w: int, kernel_size: object, stride: object, padding: object, ceil_mode: object,
    include_pad: object, override: object,
) -> tuple[shapes.Window, bool, int]:  # fmt: skip
    """The window of average pooling on an (h, w) plane and its divisor argument."""
    win = shapes.window((h, w), kernel_size, stride, padding, 1, ceil_mode, family="avg")
    include = shapes.flag(include_pad, "count_include_pad")
    return win, include, shapes.avg_divisor((h, w), win, include, shapes.divisor(override))


def _plan_avg_forward(
    where: Where, arrays: tuple[object, ...], kernel_size: object, stride: object,
    padding: object, ceil_mode: object, include_pad: object, override: object, device: object,
    queue: cl.CommandQueue | None,
) -> plans.Plan:  # fmt: skip
    p = Planner(where, "avg", device, arrays, queue)
    x = p.arrays[0]
    n, c, h, w = shapes.split_batch(x.shape)
    win, include_pad, div = _avg_window(
        h, w, kernel_size, stride, padding, ceil_mode, include_pad, override
    )
    p.specialize(
        "avg_pool2d_forward", (h * w, win.oh * win.ow), win, w, n * c, row=win.ow, divisor=div
    )
    p.output("out", _unbatched((n, c, win.oh, win.ow), x.ndim), like=0)
    sizes = _avg_sizes(win, h, w, include_pad, div)
    if n * c and p.strided:
        tile = _nhwc_tile(p, win)
        p.step_strided("avg_pool2d_forward_strided", {"x": 0}, lanes=4, tile=tile, **sizes)
    elif n * c:
        p.step_by_plane("avg_pool2d_forward", (win.ow, win.oh, n * c), **sizes)
    return p.plan("x")


def avg_pool2d(
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
    """2-D average pooling, as torch.nn.functional.avg_pool2d."""
    params = (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, device)
    return _run("avg_pool2d", _plan_avg_forward, (input,), params, queue, out)[0]


def _plan_avg_backward(
    where: Where, arrays: tuple[object, ...], kernel_size: object, stride: object,
    padding: object, ceil_mode: object, include_pad: object, override: object, device: object,
    queue: cl.CommandQueue | None,
) -> plans.Plan:  # fmt: skip
    p, (n, c, h, w) = _backward_planner(where, "avg", device, arrays, queue)
    grad, x = p.arrays
    win, include_pad, div = _avg_window(
        h, w, kernel_size, stride, padding, ceil_mode, include_pad, override
    )
    shapes.expect_shape("grad_output", grad.shape, x.shape[:-2] + (win.oh, win.ow))
    p.specialize(
        "avg_pool2d_backward", (h * w, win.oh * win.ow), win, planes=n * c, row=w, divisor=div
    )
    p.output("grad_x", x.shape, like=1)
    sizes = _avg_sizes(win, h, w, include_pad, div)
    if n * c and p.strided:
        tile = _nhwc_tile(p, win, backward=True)
        p.step_strided("avg_pool2d_backward_strided", {"grad_out": 0}, lanes=4, tile=tile, **sizes)
    elif n * c:
        p.step_by_plane("avg_pool2d_backward", (w, h, n * c), **sizes)
    return p.plan("grad_out", None)


def avg_pool2d_backward(
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
    """Gradient of avg_pool2d with respect to its input."""
    params = (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, device)
    arrays = (grad_output, input)
    return _run("avg_pool2d_backward", _plan_avg_backward, arrays, params, queue, out)[0]


def _band_group(p: Planner, h: int, w: int, oh: int) -> int:
    """The work-group size of adaptive_avg_pool2d_band for this plane, or 0 where that
    kernel does not apply: only on a GPU, for W a multiple of 4 and bands of 16-64 rows."""
    if not p.gpu or w % 4 or not 16 <= h // oh < 63:
        return 0
    group = p.group_size("adaptive_avg_pool2d_band", max(32, plans.pow2_at_least(w // 4)))
    return group if group >= w // 4 else 0


def _wide_cells(
    p: Planner, volume: tuple[int, ...], out: tuple[int, ...], whole: bool = True
) -> int:
    """The cells of a plane that a GPU takes by a work-group each: a plane's one cell
    (where `whole`), or the cells of a plane of one row (1-D; one in 32-bit cell bounds),
    each WIDE_CELLS elements or more; else 0."""
    size, cells = math.prod(volume), out[-1]
    one = whole and all(o == 1 for o in out)
    row = all(v == o == 1 for v, o in zip(volume[:-1], out[:-1], strict=True))
    wide = p.gpu and (one or (row and size < 2**31)) and size // max(cells, 1) >= WIDE_CELLS
    return cells if wide else 0


def _cell_group(p: Planner, name: str, size: int, cells: int) -> int:
    """The work-group size of kernel `name` reducing `cells` cells of planes of `size`
    elements (_wide_cells), asked once the call's build options are final: a work-item
    sums 32 elements or more (H200, 1x1 of [64,256,56,56]: 63 -> 55 us), in groups of a
    warp at least (H100, [64,256,4096] from 7, forward and backward, average and max, us:
    groups of 32 items 119.9, 135.9, 92.5, 105.5; of 64 121.7, 146.1, 116.1, 123.1; of 128
    173.7, 192.2, 132.6, 116.4)."""
    return p.group_size(name, max(size // cells // 32, 32))


def _equal_cells(h: int, w: int, oh: int, ow: int) -> shapes.Window | None:
    """The window of adaptive pooling (h, w) -> (oh, ow) when its cells are equal and tile
    the plane, else None."""
    if not (oh and ow and h % oh == 0 and w % ow == 0):
        return None
    return shapes.Window(
        kh=h // oh, kw=w // ow, sh=h // oh, sw=w // ow, ph=0, pw=0, dh=1, dw=1, oh=oh, ow=ow
    )


def _fixed_cells(p: Planner, win: shapes.Window | None) -> bool:
    """Whether equal adaptive cells are built as constants: square, of a side in the
    policy's fixed set (cells follow the input's size; a program per size would not)."""
    if win is None or win.kh != win.kw or win.kh not in p.policy.adaptive_cells:
        return False
    return not p.gpu or win.kh <= p.policy.specialize_up_to


def _plan_adaptive_forward(
    where: Where,
    arrays: tuple[object, ...],
    output_size: object,
    device: object,
    queue: cl.CommandQueue | None,
) -> plans.Plan:
    p = Planner(where, "adaptive", device, arrays, queue)
    x = p.arrays[0]
    n, c, h, w = shapes.split_batch(x.shape)
    oh, ow = shapes.adaptive_output((h, w), output_size)
    whole = (oh, ow) == (1, 1)
    cells = None if whole else _equal_cells(h, w, oh, ow)
    # The global kernels take no window sizes: one build for every plane size.
    p.specialize(
        "adaptive_avg_pool2d_forward", (h * w, oh * ow), cells, constants=_fixed_cells(p, cells)
    )
    p.cell_bounds(h, w, oh, ow)
    p.output("out", _unbatched((n, c, oh, ow), x.ndim), like=0)
    acc = np.dtype(np.float64 if p.dtype == np.float64 else np.float32)
    sizes: Scalars = dict(H=h, W=w, OH=oh, OW=ow)
    if not n * c * oh * ow:
        return p.plan("x")
    if p.strided and whole and p.gpu:
        # Work-groups of up to 8 items (of 4 channels where they take 4) by slices of
        # pixels, fewer items while that leaves under two groups per compute unit (a
        # plane of 4-channel items: 32 bytes a pixel, a DRAM sector).
        group = p.group_size("adaptive_avg_pool2d_global_strided", 256)
        items = -(-c // 4)
        across = min(8, plans.pow2_at_least(items), group)
        while across > 2 and n * -(-items // across) < 2 * p.rt.device.max_compute_units:
            across //= 2
        slices = min(group // across, 1 << ((h * w).bit_length() - 1))
        p.step_strided(
            "adaptive_avg_pool2d_global_strided",
            {"x": 0},
            lanes=4,
            group=(across, slices),
            H=h,
            W=w,
            scratch=4 * across * slices * acc.itemsize,
        )
    elif p.strided:
        p.step_strided("adaptive_avg_pool2d_forward_strided", {"x": 0}, lanes=4, **sizes)
    elif whole and not p.gpu:
        # A CPU sums a plane fastest in one work-item.
        p.step_planes("adaptive_avg_pool2d_plane", n * c, HW=h * w)
    elif per_plane := _wide_cells(p, (h, w), (oh, ow)):
        group = _cell_group(p, "adaptive_avg_pool2d_global", h * w, per_plane)
        p.step(
            "adaptive_avg_pool2d_global",
            (n * c * per_plane * group,),
            local=(group,),
            HW=h * w,
            OW=per_plane,
            scratch=group * acc.itemsize,
        )
    elif group := _band_group(p, h, w, oh):
        slices = group // (w // 4)
        p.step(
            "adaptive_avg_pool2d_band",
            (oh * group, n * c),
            local=(group, 1),
            colsum=slices * w * acc.itemsize,
            **sizes,
        )
    else:
        p.step("adaptive_avg_pool2d_forward", (ow, oh, n * c), **sizes)
    return p.plan("x")


def adaptive_avg_pool2d(
    input: Tensor,
    output_size: OptionalSize,
    *,
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor:
    """2-D adaptive average pooling, as torch.nn.functional.adaptive_avg_pool2d."""
    params = (output_size, device)
    return _run("adaptive_avg_pool2d", _plan_adaptive_forward, (input,), params, queue, out)[0]


def _plan_adaptive_backward(
    where: Where, arrays: tuple[object, ...], device: object, queue: cl.CommandQueue | None
) -> plans.Plan:
    p, (n, c, h, w) = _backward_planner(where, "adaptive", device, arrays, queue)
    grad, x = p.arrays
    shapes.expect_shape("grad_output", grad.shape[:-2], x.shape[:-2])
    oh, ow = grad.shape[-2:]
    p.output("grad_x", x.shape, like=1)
    win = _equal_cells(h, w, oh, ow)
    row_cells = 0 if p.strided else _wide_cells(p, (h, w), (oh, ow), whole=False)
    if not n * c:
        return p.plan("grad_out", None)
    if row_cells:
        p.specialize("adaptive_avg_pool2d_backward", (h * w, oh * ow))
        p.cell_bounds(h, w, oh, ow)
        group = _cell_group(p, "adaptive_avg_pool2d_global_backward", w, row_cells)
        p.step("adaptive_avg_pool2d_global_backward", (n * c * row_cells * group,),
               local=(group,), W=w, OW=row_cells)  # fmt: skip
    elif p.strided:
        p.specialize("adaptive_avg_pool2d_backward", (h * w, oh * ow))
        p.cell_bounds(h, w, oh, ow)
        p.step_strided(
            "adaptive_avg_pool2d_backward_strided",
            {"grad_out": 0},
            lanes=4,
            # rows of one pixel: the kernel takes no columns
            tile=(p.policy.tile(p.rt.device, "adaptive_avg_pool2d_backward_strided")[0], 1),
            H=h,
            W=w,
            OH=oh,
            OW=ow,
        )
    elif win is not None:
        # Equal cells that tile the plane: the average pooling backward of that window.
        p.family = "avg"
        divisor = shapes.avg_divisor((h, w), win, True, 0)
        p.specialize(
            "adaptive_avg_pool2d_backward equal",
            (h * w, oh * ow),
            win,
            planes=n * c,
            constants=_fixed_cells(p, win),
            row=w,
            divisor=divisor,
        )
        p.step_by_plane(
            "avg_pool2d_backward", (w, h, n * c), **_avg_sizes(win, h, w, True, divisor)
        )
    else:
        p.specialize("adaptive_avg_pool2d_backward", (h * w, oh * ow), planes=n * c, row=w)
        p.cell_bounds(h, w, oh, ow)
        p.step_by_plane("adaptive_avg_pool2d_backward", (w, h, n * c), H=h, W=w, OH=oh, OW=ow)
    return p.plan("grad_out", None)


def adaptive_avg_pool2d_backward(
    grad_output: Tensor,
    input: Tensor,
    *,
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor:
    """Gradient of adaptive_avg_pool2d with respect to its input; the output size is
    grad_output's."""
    label = "adaptive_avg_pool2d_backward"
    arrays = (grad_output, input)
    return _run(label, _plan_adaptive_backward, arrays, (device,), queue, out)[0]


def default_queue(device: object = None) -> cl.CommandQueue:
    """The pyopencl CommandQueue clpool itself uses on `device` (the default device when
    None), for arrays that should live where clpool works."""
    with reporting("default_queue") as where:
        chosen = choose(device)
        where.device = chosen.name.strip()
        return runtime(require(chosen)).queue


empty_cache = launch.empty_cache
