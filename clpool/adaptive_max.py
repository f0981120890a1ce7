"""Adaptive max pooling in 1-D, 2-D and 3-D, as torch.nn.functional's, and its backward
ops. One forward and one backward kernel over (D, H, W) volumes serve every rank: 2-D runs
with D = 1, 1-D as 2-D of one row (pool1d: an (N, L, C) input read as it lies), on a CPU
for float32 and float64 with a backward kernel of a plane per work-item; on a GPU, equal
cells tiling a plane run max_pool2d's kernels with that window. A 2-D input of other
strides (channels-last) is read as it is by the _strided kernels (max_pool2d's for equal
cells) and gives a result in its memory format; a 3-D one (channels-last-3d or any other) by
pool3d.cl's, with C-contiguous results as ATen's. A GPU reduces wide cells of a plane of one
row, and a plane's one cell, by a work-group each, and its backward stores such a row's
cells by a work-group each too. Where cells do not outnumber the elements, a GPU's backward
clears grad_x and scatters each cell's gradient. Elsewhere it gathers, as a CPU does where
no kernel per plane runs. The scatter and the gather read
grad_output and indices through their strides. A CPU's kernel per plane, and a GPU's
row kernel, take them copied C-contiguous. Indices are flat in the input plane or volume:
(d * H + h) * W + w, as ATen's."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pyopencl as cl
import pyopencl.array as cla

from . import ops, plans, pool1d, pool3d, shapes
from .errors import PoolArgumentError, Problem, Where
from .plans import Planner, Scalars
from .types import OptionalSize, Out, Tensor

FAMILY = "adaptive_max"
# runs a work-group of adaptive_max_pool_clear clears (on an H100, 103 MB: 16 took 43.4 us,
# 4 67.2, 32 43.6, 64 45.0)
CLEAR_RUN = 16
# a CPU's forward folds cells of this many columns or more, or of a multiple of 16 columns
# and this many elements or more, 16 columns at a time (unless a quirk rules out 16-lane
# code), other cells of 8 columns or more 4 at a time (kernels_cl/adaptive_max_pool.cl's
# CLPOOL_MAX_LANES; BENCHMARKS.md)
LANES16 = 128


def _volume(sizes: tuple[int, ...]) -> tuple[int, int, int]:
    """Spatial sizes of rank 2 or 3 as (D, H, W), the missing axis of size 1."""
    d, h, w = (1,) * (3 - len(sizes)) + tuple(sizes)
    return d, h, w


def _fold(a: cla.Array | np.ndarray) -> cla.Array | np.ndarray:
    """A 5-D device array as a 4-D view of the same elements in the same order (two
    adjacent axes merged), for the planner's copy of a strided input, which takes four axes
    at most; anything else as it is."""
    if not isinstance(a, cla.Array) or a.ndim < 5:
        return a
    shape, strides = list(a.shape), list(a.strides)
    for i in range(a.ndim - 1):
        if shape[i + 1] == 1 or shape[i] == 1 or strides[i] == shape[i + 1] * strides[i + 1]:
            stride = strides[i] if shape[i + 1] == 1 else strides[i + 1]
            shape[i : i + 2] = [shape[i] * shape[i + 1]]
            strides[i : i + 2] = [stride]
            return cla.Array(a.queue, tuple(shape), a.dtype, data=a.base_data, offset=a.offset,
                             strides=tuple(strides), events=list(a.events))  # fmt: skip
    raise Problem(
        PoolArgumentError,
        f"a 5-D device array of strides {a.strides} cannot be read as it is: make it contiguous",
    )


def _extents(volume: tuple[int, int, int], cells: tuple[int, int, int]) -> tuple[int, ...]:
    """What Planner.specialize weighs for 64-bit arithmetic: the input's and the output's
    volumes, and each axis's size times its output's (the cell bounds' numerators)."""
    return (
        math.prod(volume),
        math.prod(cells),
        *(s * n for s, n in zip(volume, cells, strict=True)),
    )


def _step(p: Planner, name: str, cols: int, rows: int, slices: int, planes: int,
          slots: dict[str, str] | None = None, **args: int) -> None:  # fmt: skip
    """Launch gather `name` over (cols, (slice, tile of rows), plane) work-items; on a GPU a
    work-group spans several planes where a plane's items are fewer than a group (a 1x1
    output: groups of one item otherwise)."""
    tiles = -(-rows // p.rows)
    (gx, gy, _), (lx, ly, _) = plans.ndrange(p.rt.device, cols, slices * tiles, planes)
    lz = min(planes & -planes, p.group_size(name, p.policy.group) // (lx * ly)) if p.gpu else 1
    p.step(name, (gx, gy, planes), local=(lx, ly, max(1, lz)), slots=slots, **args)


def _max_pool_cells(
    p: Planner, volume: tuple[int, int, int], cells: tuple[int, int, int], everywhere: bool
) -> shapes.Window | None:
    """The window of max_pool2d that equal cells tiling an (H, W) plane (D and OD of 1) are,
    else None: its kernels give the same maxima, indices (first of ties, last NaN) and
    gradients (the sums over the one window of each element). A contiguous forward takes
    them on a GPU only (on this project's Intel CPU, [8,256,14,14] to 7x7: 0.85 against
    0.75 ms for the adaptive kernel); a backward, or a strided input's forward (max_pool2d's
    _strided kernel, with a CPU's rows of 16 channels), everywhere (`everywhere`; the
    backward 0.33 -> 0.12 ms there)."""
    if not (p.gpu or everywhere) or volume[0] != 1 or cells[0] != 1:
        return None
    return ops._equal_cells(volume[1], volume[2], cells[1], cells[2])


def _plan_forward(
    where: Where,
    arrays: tuple[object, ...],
    rank: int,
    output_size: OptionalSize,
    index_dtype: npt.DTypeLike,
    with_indices: bool,
    device: object,
    queue: cl.CommandQueue | None,
) -> plans.Plan:
    p = Planner(where, FAMILY, device, arrays, queue)
    x = p.arrays[0]
    n, c, *spatial = shapes.split_batch_nd(x.shape, rank)
    out = shapes.adaptive_output(tuple(spatial), output_size)
    (d, h, w), (od, oh, ow) = _volume(tuple(spatial)), _volume(out)
    p.index_bits = ops._index_bits(index_dtype)
    ops._check_index_range(p.index_bits, d * h * w)
    if p.strided and rank == 3:
        out_shape = tuple(x.shape[:-rank]) + out
        p.output("out", out_shape)
        if with_indices:
            p.output("indices", out_shape, np.dtype(f"int{p.index_bits}"))
        else:
            p.options += ("-DCLPOOL_NO_INDICES",)
        slots = None if with_indices else {"indices": "out"}  # a placeholder, untouched
        p.family = pool3d.FAMILY  # its _strided kernel: pool3d.cl's 3-D views
        pool3d._volumes(p, (d, h, w), out)
        p.cell_bounds(d, h, w, od, oh, ow)
        if n * c * od * oh * ow:
            pool3d._specialize(p, n * c * od * oh)  # the kernel's rows, at most
            sizes: Scalars = dict(D=d, H=h, W=w, OD=od, OH=oh, OW=ow)
            pool3d._step_strided(p, "adaptive_max_pool3d_forward_strided", {"x": 0}, slots,
                                 **sizes)  # fmt: skip
        return p.plan("x")
    # from here on a strided input is 2-D, read as it is by a _strided kernel (3-D: above)
    wide = 0 if p.strided else ops._wide_cells(p, (d, h, w), (od, oh, ow))
    cells = None if wide else _max_pool_cells(p, (d, h, w), (od, oh, ow), p.strided)
    if cells is not None:
        p.family = "max"
        tuned_as = "max_pool2d_forward" if with_indices else "max_pool2d_values"
        p.specialize(tuned_as, (h * w, oh * ow), cells, w, n * c, ops._fixed_cells(p, cells))
    else:
        p.specialize("adaptive_max_pool_forward", _extents((d, h, w), (od, oh, ow)))
        p.cell_bounds(d, h, w, od, oh, ow)
        if not (p.gpu or p.strided) and w >= 8 * ow:  # a CPU's cells of 8 columns or more
            many = d * h * w >= LANES16 * od * oh * ow
            fits = w >= LANES16 * ow or (many and w % (16 * ow) == 0)  # ow > 0 where it divides
            p.options += (f"-DCLPOOL_MAX_LANES={16 if fits and p.lanes16() else 4}",)
    out_shape = tuple(x.shape[:-rank]) + out
    like = 0 if p.strided else None  # the input's memory format, as ATen's
    p.output("out", out_shape, like=like)
    if with_indices:
        p.output("indices", out_shape, np.dtype(f"int{p.index_bits}"), like=like)
    else:
        p.options += ("-DCLPOOL_NO_INDICES",)
    slots = None if with_indices else {"indices": "out"}  # a placeholder, untouched
    if n * c * od * oh * ow and p.strided and cells is not None:
        p.step_strided("max_pool2d_forward_strided", {"x": 0}, slots, lanes=4,
                       tile=ops._nhwc_tile(p, cells, indices=with_indices),
                       **ops._max_sizes(cells, h, w))  # fmt: skip
    elif n * c * od * oh * ow and p.strided:
        p.step_strided("adaptive_max_pool2d_forward_strided", {"x": 0}, slots,
                       H=h, W=w, OH=oh, OW=ow)  # fmt: skip
    elif n * c * od * oh * ow and wide:
        group = ops._cell_group(p, "adaptive_max_pool_global", d * h * w, wide)
        acc = 8 if p.dtype == np.float64 else 4
        p.step("adaptive_max_pool_global", (n * c * wide * group,), local=(group,),
               slots=slots, HW=d * h * w, OW=wide, best_v=group * acc,
               best_at=group * 8)  # fmt: skip
    elif n * c * od * oh * ow and cells is not None:
        p.step_by_plane("max_pool2d_forward", (ow, oh, n * c), slots, **ops._max_sizes(cells, h, w))
    elif n * c * od * oh * ow:
        _step(p, "adaptive_max_pool_forward", ow, oh, od, n * c, slots=slots,
              D=d, H=h, W=w, OD=od, OH=oh, OW=ow)  # fmt: skip
    return p.plan("x")


def _forward(
    label: str, rank: int, input: Tensor, output_size: OptionalSize, return_indices: bool,
    index_dtype: npt.DTypeLike, device: object, queue: cl.CommandQueue | None, out: Out,
) -> Tensor | tuple[Tensor, Tensor]:  # fmt: skip
    with_indices = bool(return_indices)
    params = (rank, output_size, index_dtype if with_indices else "int64", with_indices, device)
    got = ops._run(label, _plan_forward, (input,), params, queue, out, 2 if with_indices else 1)
    return (got[0], got[1]) if with_indices else got[0]


def adaptive_max_pool1d(
    input: Tensor,
    output_size: OptionalSize,
    return_indices: bool = False,
    *,
    index_dtype: npt.DTypeLike = "int64",
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """1-D adaptive max pooling, as torch.nn.functional.adaptive_max_pool1d; with
    return_indices, also the index of each maximum along L (out=: a pair)."""
    return pool1d._run("adaptive_max_pool1d", adaptive_max_pool2d, (input,),
                       lambda: (pool1d._size(output_size, "output_size", 1), return_indices),
                       index_dtype=index_dtype, device=device, queue=queue, out=out)  # fmt: skip


def adaptive_max_pool2d(
    input: Tensor,
    output_size: OptionalSize,
    return_indices: bool = False,
    *,
    index_dtype: npt.DTypeLike = "int64",
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """2-D adaptive max pooling, as torch.nn.functional.adaptive_max_pool2d; with
    return_indices, also the flat h * W + w index of each maximum (out=: a pair)."""
    return _forward("adaptive_max_pool2d", 2, input, output_size, return_indices, index_dtype,
                    device, queue, out)  # fmt: skip


def adaptive_max_pool3d(
    input: Tensor,
    output_size: OptionalSize,
    return_indices: bool = False,
    *,
    index_dtype: npt.DTypeLike = "int64",
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """3-D adaptive max pooling, as torch.nn.functional.adaptive_max_pool3d; with
    return_indices, also the flat (d * H + h) * W + w index of each maximum (out=: a
    pair)."""
    return _forward("adaptive_max_pool3d", 3, input, output_size, return_indices, index_dtype,
                    device, queue, out)  # fmt: skip


def _plan_backward(
    where: Where,
    arrays: tuple[object, ...],
    rank: int,
    device: object,
    queue: cl.CommandQueue | None,
) -> plans.Plan:
    p, (n, c, *spatial) = ops._backward_planner(where, FAMILY, device, arrays, queue, rank)
    grad, x, indices = p.arrays
    shapes.expect_shape("grad_output", grad.shape[:-rank], x.shape[:-rank])
    shapes.expect_shape("indices", indices.shape, grad.shape)
    if indices.dtype not in ops.INDEX_BITS:
        raise Problem(
            PoolArgumentError, f"indices must be int64 or int32, got {indices.dtype.name}"
        )
    p.index_bits = ops.INDEX_BITS[indices.dtype]
    (d, h, w), (od, oh, ow) = _volume(tuple(spatial)), _volume(tuple(grad.shape[-rank:]))
    ops._check_index_range(p.index_bits, d * h * w)
    strided = p.strided and rank == 2  # read as they are, by a _strided kernel
    p.output("grad_x", x.shape, like=1 if strided else None)
    views = {"grad_out": 0, "indices": 2}
    wide = 0 if p.strided else ops._wide_cells(p, (d, h, w), (od, oh, ow), whole=False)
    cells = None if wide else _max_pool_cells(p, (d, h, w), (od, oh, ow), everywhere=True)
    if wide:  # a work-group per cell stores the elements from its start to the next cell's
        p.specialize("adaptive_max_pool_backward", _extents((d, h, w), (od, oh, ow)))
        p.cell_bounds(d, h, w, od, oh, ow)
        group = ops._cell_group(p, "adaptive_max_pool_global_backward", w, wide)
        if n * c:
            p.step("adaptive_max_pool_global_backward", (n * c * wide * group,),
                   local=(group,), W=w, OW=wide)  # fmt: skip
    elif cells is not None:
        p.family = "max"
        p.specialize("max_pool2d_backward", (h * w, oh * ow), cells, planes=n * c,
                     constants=ops._fixed_cells(p, cells))  # fmt: skip
        if n * c and strided:
            p.step_strided("max_pool2d_backward_strided", views, lanes=4,
                           tile=ops._nhwc_tile(p, cells, backward=True),
                           **ops._max_sizes(cells, h, w))  # fmt: skip
        elif n * c:
            p.step_by_plane(
                "max_pool2d_backward", (w, h, n * c), bands=h, **ops._max_sizes(cells, h, w)
            )
    if wide or cells is not None:
        p.arrays = [_fold(a) if i != 1 else a for i, a in enumerate(p.arrays)]
        return p.plan("grad_out", None, "indices")
    # the gather's offsets within a plane's views of grad_output and indices too
    reach = tuple(shapes.span(p.arrays[i].shape[-rank:], p.strides[i][-rank:]) for i in (0, 2))
    p.specialize("adaptive_max_pool_backward", _extents((d, h, w), (od, oh, ow)) + reach,
                 planes=n * c)  # fmt: skip
    p.cell_bounds(d, h, w, od, oh, ow)
    sizes: Scalars = dict(D=d, H=h, W=w, OD=od, OH=oh, OW=ow)
    # A CPU's plane per work-item, where cells do not outnumber the input's elements:
    # on Debian's PoCL, [8,256,14,14] to 7x7 11.3 -> 0.7 ms, [8,64,56,56] to 7x7 39 -> 0.55
    # ms; upsampling [8,64,14,14] to 28x28 1.3 -> 1.8-5.4 ms (so it gathers there).
    if n * c and strided:
        p.step_strided("adaptive_max_pool2d_backward_strided", views, H=h, W=w, OH=oh, OW=ow)
    elif n * c and p.by_plane and od * oh * ow <= d * h * w:
        # bands of rows where planes are fewer than cores: measured faster in 2-D only
        # (one plane of 1024x1024 to 7x7, PoCL: 91-111 -> 69-91 us; of 32x128x128 to 7x7x7
        # 60-79 -> 71-92 us, BENCHMARKS.md)
        p.step_planes("adaptive_max_pool_backward_plane", n * c, h if d == 1 else None, **sizes)
    elif n * c:  # grad_output and indices read as they are
        p.as_is = True
        strides: Scalars = {**pool3d._view_strides(p, "grad_out", 0, rank), "C": c}
        strides.update(pool3d._view_strides(p, "indices", 2, rank))
        if p.gpu and od * oh * ow <= d * h * w:  # grad_x cleared, each cell's element stored
            runs = -(-(d * h * w) // CLEAR_RUN)
            (gx, gy, _), (lx, ly, _) = plans.ndrange(p.rt.device, runs, 1, n * c)
            p.step("adaptive_max_pool_clear", (gx, gy, n * c), local=(lx, ly, 1), **sizes,
                   RUN=CLEAR_RUN)  # fmt: skip
            if od * oh * ow:  # else the clear is the result
                (gx, gy, _), (lx, ly, _) = plans.ndrange(p.rt.device, ow, od * oh, n * c)
                p.step("adaptive_max_pool_scatter", (gx, gy, n * c), local=(lx, ly, 1),
                       **sizes, **strides)  # fmt: skip
        else:  # gathered, grad_x stored in rows
            p.pack_rows(w, views=True)
            _step(p, "adaptive_max_pool_backward", -(-w // p.cols), h, d, n * c, **sizes,
                  **strides)  # fmt: skip
    if not p.as_is:  # grad_output and indices, output-sized, copied (x: its shape only)
        p.arrays = [_fold(a) if i != 1 else a for i, a in enumerate(p.arrays)]
    return p.plan("grad_out", None, "indices")


def _backward(
    label: str,
    rank: int,
    arrays: tuple[object, ...],
    device: object,
    queue: cl.CommandQueue | None,
    out: Out,
) -> Tensor:
    return ops._run(label, _plan_backward, arrays, (rank, device), queue, out)[0]


def adaptive_max_pool1d_backward(
    grad_output: Tensor,
    input: Tensor,
    indices: Tensor,
    *,
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor:
    """Gradient of adaptive_max_pool1d (return_indices=True) with respect to its input; the
    output size is grad_output's."""
    return pool1d._run("adaptive_max_pool1d_backward", adaptive_max_pool2d_backward,
                       (grad_output, input, indices), device=device, queue=queue,
                       out=out)  # fmt: skip


def adaptive_max_pool2d_backward(
    grad_output: Tensor,
    input: Tensor,
    indices: Tensor,
    *,
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor:
    """Gradient of adaptive_max_pool2d with respect to its input, as ATen's
    adaptive_max_pool2d_backward; the output size is grad_output's."""
    arrays = (grad_output, input, indices)
    return _backward("adaptive_max_pool2d_backward", 2, arrays, device, queue, out)


def adaptive_max_pool3d_backward(
    grad_output: Tensor,
    input: Tensor,
    indices: Tensor,
    *,
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor:
    """Gradient of adaptive_max_pool3d with respect to its input, as ATen's
    adaptive_max_pool3d_backward; the output size is grad_output's."""
    arrays = (grad_output, input, indices)
    return _backward("adaptive_max_pool3d_backward", 3, arrays, device, queue, out)
