"""A float64 reference of the pooling ops (2-D, 3-D, adaptive max and unpooling; the 1-D
ops are the 2-D ones with H = 1), for checks and tests.

Written from SPEC.md and PyTorch's ATen CPU code, independently of the OpenCL kernels
and of clpool.shapes: plain loops over the output (forward) or scatters from the output
(backward, as ATen's CPU kernels do), with the batch and channel planes vectorised by
numpy. Inputs are numpy arrays (2-D ops: 3-D unbatched or 4-D; 3-D ops: 4-D unbatched
or 5-D), any dtype numpy can turn into
float64; results are float64 (indices int64) with the input's rank. Arguments are taken
to be valid: checking them is the ops' job.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from .types import OptionalSize, Size

# (kernel_size, stride, padding, dilation, output sizes) of a window over two or three axes
_Window2d = tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int], int, int]
_Window3d = tuple[
    tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]
]
# an output position, its input slices and its divisor
_Cell3d = tuple[tuple[int, ...], tuple[slice, ...], int]


def _pair(value: Size) -> tuple[int, int]:
    if isinstance(value, (tuple, list)):
        return (int(value[0]), int(value[-1]))
    return (int(value), int(value))


def _planes(x: npt.ArrayLike) -> np.ndarray:
    """x as float64 planes (N*C, H, W)."""
    a = np.asarray(x)
    return a.astype(np.float64).reshape((int(np.prod(a.shape[:-2])),) + a.shape[-2:])


def _restore(planes: np.ndarray, like_shape: tuple[int, ...]) -> np.ndarray:
    """(N*C, h, w) planes back to the batch dims of `like_shape`."""
    return planes.reshape(tuple(like_shape[:-2]) + planes.shape[-2:])


def _add_at_indices(
    grad_output: npt.ArrayLike, indices: npt.ArrayLike, shape: tuple[int, ...], rank: int
) -> np.ndarray:
    """Zeros of `shape` with each grad_output element added, in row-major order, to the
    element its flat index names in its plane of the last `rank` axes; an index that names
    no element of the plane is ignored."""
    volume = math.prod(shape[-rank:])
    g = _flat(grad_output, rank, np.float64)
    ind = _flat(indices, rank, np.int64)
    grad = np.zeros((g.shape[0], volume))
    ok = (ind >= 0) & (ind < volume)
    plane = np.broadcast_to(np.arange(g.shape[0])[:, None], g.shape)
    np.add.at(grad, (plane[ok], ind[ok]), g[ok])
    return grad.reshape(shape)


def pooled_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """floor or ceil((size + 2p - d(k-1) - 1) / s) + 1; in ceil mode a last window that
    would start inside the right padding is dropped."""
    span = (size + 2 * p - d * (k - 1) - 1) / s
    out = (math.ceil(span) if ceil_mode else math.floor(span)) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _window_args(
    shape: tuple[int, ...],
    kernel_size: Size,
    stride: Size | None,
    padding: Size,
    dilation: Size,
    ceil_mode: bool,
) -> _Window2d:
    k, p, d = _pair(kernel_size), _pair(padding), _pair(dilation)
    s = k if stride is None or (isinstance(stride, (tuple, list)) and not stride) else _pair(stride)
    h, w = shape[-2:]
    oh = pooled_size(h, k[0], s[0], p[0], d[0], ceil_mode)
    ow = pooled_size(w, k[1], s[1], p[1], d[1], ceil_mode)
    return k, s, p, d, oh, ow


# ---------------------------------------------------------------- max pooling


def max_pool2d_with_indices(
    x: npt.ArrayLike,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    dilation: Size = 1,
    ceil_mode: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """(values, int64 indices). ATen's CPU loop: padding is never read, start from -inf with
    the index of the window's first in-plane element, take v when v > best or v is NaN (so the
    last NaN wins, ties keep the first). A window with no element gives -inf and index -1."""
    xp = _planes(x)
    planes, h, w = xp.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), oh, ow = _window_args(
        xp.shape, kernel_size, stride, padding, dilation, ceil_mode
    )
    out = np.empty((planes, oh, ow))
    idx = np.empty((planes, oh, ow), np.int64)
    for i in range(oh):
        rows = [r for r in range(i * sh - ph, i * sh - ph + kh * dh, dh) if 0 <= r < h]
        for j in range(ow):
            cols = [c for c in range(j * sw - pw, j * sw - pw + kw * dw, dw) if 0 <= c < w]
            best = np.full(planes, -np.inf)
            where = np.full(planes, rows[0] * w + cols[0] if rows and cols else -1, np.int64)
            for r in rows:
                for c in cols:
                    v = xp[:, r, c]
                    take = (v > best) | np.isnan(v)
                    best = np.where(take, v, best)
                    where = np.where(take, r * w + c, where)
            out[:, i, j] = best
            idx[:, i, j] = where
    shape = np.shape(x)
    return _restore(out, shape), _restore(idx, shape)


def max_pool2d(
    x: npt.ArrayLike,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    dilation: Size = 1,
    ceil_mode: bool = False,
) -> np.ndarray:
    return max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)[0]


def max_pool2d_with_indices_backward(
    grad_output: npt.ArrayLike, x: npt.ArrayLike, indices: npt.ArrayLike, kernel_size: Size,
    stride: Size | None = None, padding: Size = 0, dilation: Size = 1, ceil_mode: bool = False,
) -> np.ndarray:  # fmt: skip
    """Adds each grad_output element to the input element its index names; an index that
    names no element of the plane is ignored."""
    shape = np.shape(x)
    *_, oh, ow = _window_args(shape, kernel_size, stride, padding, dilation, ceil_mode)
    assert np.shape(grad_output) == tuple(shape[:-2]) + (oh, ow), "grad_output shape"
    assert np.shape(indices) == np.shape(grad_output), "indices shape"
    return _add_at_indices(grad_output, indices, shape, 2)


# ---------------------------------------------------------------- average pooling


def _avg_windows(
    shape: tuple[int, ...], kernel_size: Size, stride: Size | None, padding: Size,
    ceil_mode: bool, count_include_pad: bool, divisor_override: int | None,
) -> tuple[int, int, list[tuple[int, int, slice, slice, int]]]:  # fmt: skip
    """(oh, ow, cells): a cell (i, j, rows slice, cols slice, divisor) for every output
    element, as ATen computes them: the count_include_pad divisor is the window clipped to
    the padded input, and divisor_override wins."""
    h, w = shape[-2:]
    (kh, kw), (sh, sw), (ph, pw), _, oh, ow = _window_args(
        shape, kernel_size, stride, padding, 1, ceil_mode
    )
    cells = []
    for i in range(oh):
        h0 = i * sh - ph
        h1 = min(h0 + kh, h + ph)
        for j in range(ow):
            w0 = j * sw - pw
            w1 = min(w0 + kw, w + pw)
            padded_area = (h1 - h0) * (w1 - w0)
            r0, r1, c0, c1 = max(h0, 0), min(h1, h), max(w0, 0), min(w1, w)
            if divisor_override:
                div = divisor_override
            elif count_include_pad:
                div = padded_area
            else:
                div = (r1 - r0) * (c1 - c0)
            cells.append((i, j, slice(r0, r1), slice(c0, c1), div))
    return oh, ow, cells


def avg_pool2d(
    x: npt.ArrayLike,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> np.ndarray:
    xp = _planes(x)
    oh, ow, cells = _avg_windows(
        xp.shape, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
    )
    out = np.zeros((xp.shape[0], oh, ow))
    for i, j, rows, cols, div in cells:
        out[:, i, j] = xp[:, rows, cols].sum(axis=(1, 2)) / div
    return _restore(out, np.shape(x))


def avg_pool2d_backward(
    grad_output: npt.ArrayLike,
    x: npt.ArrayLike,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> np.ndarray:
    """Adds grad / divisor to every input element of each window."""
    shape = np.shape(x)
    g = _planes(grad_output)
    oh, ow, cells = _avg_windows(
        shape, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
    )
    assert g.shape[1:] == (oh, ow), "grad_output shape"
    grad = np.zeros((g.shape[0],) + tuple(shape[-2:]))
    for i, j, rows, cols, div in cells:
        grad[:, rows, cols] += (g[:, i, j] / div)[:, None, None]
    return grad.reshape(shape)


# ---------------------------------------------------------------- adaptive average pooling


def _cell(i: int, size: int, out: int) -> slice:
    """Adaptive cell i of `out` over `size`: [floor(i*size/out), ceil((i+1)*size/out))."""
    return slice((i * size) // out, -((-(i + 1) * size) // out))


def adaptive_output_size(shape: tuple[int, ...], output_size: OptionalSize) -> tuple[int, int]:
    if isinstance(output_size, (tuple, list)):
        size = (output_size[0], output_size[-1])
    else:
        size = (output_size, output_size)
    h, w = (shape[-2 + a] if (v := size[a]) is None else int(v) for a in range(2))
    return h, w


def adaptive_avg_pool2d(x: npt.ArrayLike, output_size: OptionalSize) -> np.ndarray:
    xp = _planes(x)
    _, h, w = xp.shape
    oh, ow = adaptive_output_size(xp.shape, output_size)
    out = np.zeros((xp.shape[0], oh, ow))
    for i in range(oh):
        for j in range(ow):
            out[:, i, j] = xp[:, _cell(i, h, oh), _cell(j, w, ow)].mean(axis=(1, 2))
    return _restore(out, np.shape(x))


def adaptive_avg_pool2d_backward(grad_output: npt.ArrayLike, x: npt.ArrayLike) -> np.ndarray:
    """Adds grad / cell area to every input element of each cell; the output size is
    grad_output's."""
    shape = np.shape(x)
    h, w = shape[-2:]
    g = _planes(grad_output)
    _, oh, ow = g.shape
    grad = np.zeros((g.shape[0], h, w))
    for i in range(oh):
        rows = _cell(i, h, oh)
        for j in range(ow):
            cols = _cell(j, w, ow)
            area = (rows.stop - rows.start) * (cols.stop - cols.start)
            grad[:, rows, cols] += (g[:, i, j] / area)[:, None, None]
    return grad.reshape(shape)


# ---------------------------------------------------------------- max unpooling


def _sizes(value: Size, n: int) -> tuple[int, ...]:
    if isinstance(value, (tuple, list)):
        return tuple(int(v) for v in value) if len(value) == n else (int(value[0]),) * n
    return (int(value),) * n


def unpool_size(
    shape: tuple[int, ...], spatial: int, kernel_size: Size, stride: Size | None = None,
    padding: Size = 0, output_size: Sequence[int] | None = None,
) -> tuple[int, ...]:  # fmt: skip
    """The output's spatial sizes: output_size's last `spatial` entries, or by default
    (in - 1) * stride - 2 * padding + kernel_size per axis."""
    if output_size is not None:
        return tuple(int(v) for v in output_size)[-spatial:]
    k = _sizes(kernel_size, spatial)
    s = k if stride is None else _sizes(stride, spatial)
    p = _sizes(padding, spatial)
    inner = tuple(shape)[-spatial:]
    return tuple((inner[d] - 1) * s[d] - 2 * p[d] + k[d] for d in range(spatial))


def _flat(x: npt.ArrayLike, spatial: int, dtype: npt.DTypeLike) -> np.ndarray:
    """x as (planes, elements per plane) over its last `spatial` axes."""
    a = np.asarray(x)
    lead = len(a.shape) - spatial  # no -1: a plane of no elements leaves it undefined
    return a.astype(dtype).reshape(math.prod(a.shape[:lead]), math.prod(a.shape[lead:]))


def max_unpool(
    x: npt.ArrayLike, indices: npt.ArrayLike, spatial: int, kernel_size: Size,
    stride: Size | None = None, padding: Size = 0, output_size: Sequence[int] | None = None,
) -> np.ndarray:  # fmt: skip
    """Zeros of the output's shape, with x's elements at their flat in-plane indices, in
    input order (a later one overwrites an earlier one), as ATen's CPU loop."""
    shape = np.shape(x)
    sizes = unpool_size(shape, spatial, kernel_size, stride, padding, output_size)
    xs, ix = _flat(x, spatial, np.float64), _flat(indices, spatial, np.int64)
    out = np.zeros((xs.shape[0], math.prod(sizes)))
    planes = np.arange(xs.shape[0])
    for i in range(xs.shape[1]):
        out[planes, ix[:, i]] = xs[:, i]
    return out.reshape(tuple(shape[: len(shape) - spatial]) + sizes)


def max_unpool_backward(
    grad_output: npt.ArrayLike, x: npt.ArrayLike, indices: npt.ArrayLike, spatial: int
) -> np.ndarray:
    """grad_x[i] = grad_output at indices[i], in each plane."""
    g, ix = _flat(grad_output, spatial, np.float64), _flat(indices, spatial, np.int64)
    grad = np.zeros(ix.shape)
    planes = np.arange(ix.shape[0])
    for i in range(ix.shape[1]):
        grad[:, i] = g[planes, ix[:, i]]
    return grad.reshape(np.shape(x))


# ---------------------------------------------------------------- adaptive max pooling


def _adaptive_sizes(spatial: tuple[int, ...], output_size: OptionalSize) -> tuple[int, ...]:
    """output_size (an int, or a tuple with None for "keep that size") over `spatial`."""
    sizes = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size,)
    if len(sizes) == 1:
        sizes = sizes * len(spatial)
    return tuple(s if o is None else int(o) for s, o in zip(spatial, sizes, strict=True))


def adaptive_max_pool_nd(
    x: npt.ArrayLike, output_size: OptionalSize, rank: int
) -> tuple[np.ndarray, np.ndarray]:
    """(values, int64 indices) of adaptive max pooling over the last `rank` axes. ATen's CPU
    loop: per cell, start from -inf with the index of the cell's first element and take v
    when v > best or v is NaN (the last NaN wins, ties keep the first), in row-major order;
    indices are flat in the input volume."""
    a = np.asarray(x)
    spatial = a.shape[-rank:]
    out = _adaptive_sizes(spatial, output_size)
    planes = a.astype(np.float64).reshape(-1, math.prod(spatial))
    values = np.empty((planes.shape[0], *out))
    indices = np.empty((planes.shape[0], *out), np.int64)
    for cell in np.ndindex(*out):
        slices = [_cell(i, s, o) for i, s, o in zip(cell, spatial, out, strict=True)]
        members = itertools.product(*(range(c.start, c.stop) for c in slices))  # row-major
        flat = [int(np.ravel_multi_index(e, spatial)) for e in members]
        best = np.full(planes.shape[0], -np.inf)
        where = np.full(planes.shape[0], flat[0], np.int64)
        for at in flat:
            v = planes[:, at]
            take = (v > best) | np.isnan(v)
            best = np.where(take, v, best)
            where = np.where(take, at, where)
        at_cell = (slice(None), *cell)
        values[at_cell] = best
        indices[at_cell] = where
    lead = a.shape[:-rank]
    return values.reshape(lead + out), indices.reshape(lead + out)


def adaptive_max_pool1d(
    x: npt.ArrayLike, output_size: OptionalSize
) -> tuple[np.ndarray, np.ndarray]:
    return adaptive_max_pool_nd(x, output_size, 1)


def adaptive_max_pool2d(
    x: npt.ArrayLike, output_size: OptionalSize
) -> tuple[np.ndarray, np.ndarray]:
    return adaptive_max_pool_nd(x, output_size, 2)


def adaptive_max_pool3d(
    x: npt.ArrayLike, output_size: OptionalSize
) -> tuple[np.ndarray, np.ndarray]:
    return adaptive_max_pool_nd(x, output_size, 3)


def adaptive_max_pool_backward(
    grad_output: npt.ArrayLike, x: npt.ArrayLike, indices: npt.ArrayLike, rank: int
) -> np.ndarray:
    """Adds each grad_output element to the input element its index names, cell by cell
    in row-major output order (ATen's CPU loop); an index that names no element of the
    volume is ignored. The output size is grad_output's."""
    return _add_at_indices(grad_output, indices, np.shape(x), rank)


# ---------------------------------------------------------------- 3-D pooling


def _triple(value: Size) -> tuple[int, ...]:
    if isinstance(value, (tuple, list)):
        return tuple(int(value[a]) for a in ((0, 0, 0) if len(value) == 1 else (0, 1, 2)))
    return (int(value),) * 3


def _volumes(x: npt.ArrayLike) -> np.ndarray:
    """x as float64 volumes (N*C, D, H, W)."""
    a = np.asarray(x)
    return a.astype(np.float64).reshape((int(np.prod(a.shape[:-3])),) + a.shape[-3:])


def _window3d_args(
    shape: tuple[int, ...],
    kernel_size: Size,
    stride: Size | None,
    padding: Size,
    dilation: Size,
    ceil_mode: bool,
) -> _Window3d:
    k, p, d = _triple(kernel_size), _triple(padding), _triple(dilation)
    s = (
        k
        if stride is None or (isinstance(stride, (tuple, list)) and not stride)
        else _triple(stride)
    )
    out = tuple(pooled_size(shape[-3 + a], k[a], s[a], p[a], d[a], ceil_mode) for a in range(3))
    return k, s, p, d, out


def max_pool3d_with_indices(
    x: npt.ArrayLike,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    dilation: Size = 1,
    ceil_mode: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """(values, int64 indices d*H*W + h*W + w) as max_pool2d_with_indices over volumes: -inf
    and index -1 for a window with no element."""
    xv = _volumes(x)
    size = xv.shape[1:]
    k, s, p, dil, out = _window3d_args(xv.shape, kernel_size, stride, padding, dilation,
                                       ceil_mode)  # fmt: skip
    values = np.empty((xv.shape[0], *out))
    idx = np.empty((xv.shape[0], *out), np.int64)
    for o in np.ndindex(*out):
        taps = [
            [t for t in range(o[a] * s[a] - p[a], o[a] * s[a] - p[a] + k[a] * dil[a], dil[a])
             if 0 <= t < size[a]]
            for a in range(3)
        ]  # fmt: skip
        best = np.full(xv.shape[0], -np.inf)
        where = np.full(xv.shape[0], -1, np.int64)
        for i in taps[0]:
            for j in taps[1]:
                for m in taps[2]:
                    v = xv[:, i, j, m]
                    at = (i * size[1] + j) * size[2] + m
                    take = (where < 0) | (v > best) | np.isnan(v)
                    best = np.where(take, v, best)
                    where = np.where(take, at, where)
        at_o: tuple[slice | int, ...] = (slice(None), *o)
        values[at_o] = best
        idx[at_o] = where
    lead = np.shape(x)[:-3]
    return values.reshape(lead + tuple(out)), idx.reshape(lead + tuple(out))


def max_pool3d(
    x: npt.ArrayLike,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    dilation: Size = 1,
    ceil_mode: bool = False,
) -> np.ndarray:
    return max_pool3d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)[0]


def max_pool3d_with_indices_backward(
    grad_output: npt.ArrayLike, x: npt.ArrayLike, indices: npt.ArrayLike, kernel_size: Size,
    stride: Size | None = None, padding: Size = 0, dilation: Size = 1, ceil_mode: bool = False,
) -> np.ndarray:  # fmt: skip
    """Adds each grad_output element to the input element its index names; an index that
    names no element of the volume is ignored."""
    shape = np.shape(x)
    *_, out = _window3d_args(shape, kernel_size, stride, padding, dilation, ceil_mode)
    assert np.shape(grad_output) == tuple(shape[:-3]) + out, "grad_output shape"
    return _add_at_indices(grad_output, indices, shape, 3)


def _avg3d_cells(
    shape: tuple[int, ...], kernel_size: Size, stride: Size | None, padding: Size,
    ceil_mode: bool, count_include_pad: bool, override: int | None,
) -> tuple[tuple[int, ...], list[_Cell3d]]:  # fmt: skip
    """(out, cells): for each output position its in-volume slices and divisor, as ATen's
    avg_pool3d: the count_include_pad divisor is the window clipped to the padded input."""
    k, s, p, _, out = _window3d_args(shape, kernel_size, stride, padding, 1, ceil_mode)
    size = shape[-3:]
    cells = []
    for o in np.ndindex(*out):
        lo = [o[a] * s[a] - p[a] for a in range(3)]
        hi = [min(lo[a] + k[a], size[a] + p[a]) for a in range(3)]
        inside = [slice(max(lo[a], 0), min(hi[a], size[a])) for a in range(3)]
        if override:
            div = override
        elif count_include_pad:
            div = math.prod(hi[a] - lo[a] for a in range(3))
        else:
            div = math.prod(c.stop - c.start for c in inside)
        cells.append((o, tuple(inside), div))
    return out, cells


def avg_pool3d(x: npt.ArrayLike, kernel_size: Size, stride: Size | None = None, padding: Size = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> np.ndarray:  # fmt: skip
    xv = _volumes(x)
    out, cells = _avg3d_cells(xv.shape, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override)  # fmt: skip
    result = np.zeros((xv.shape[0], *out))
    for o, inside, div in cells:
        at_o: tuple[slice | int, ...] = (slice(None), *o)
        at_inside = (slice(None), *inside)
        result[at_o] = xv[at_inside].sum(axis=(1, 2, 3)) / div
    return result.reshape(np.shape(x)[:-3] + tuple(out))


def avg_pool3d_backward(grad_output: npt.ArrayLike, x: npt.ArrayLike, kernel_size: Size,
                        stride: Size | None = None, padding: Size = 0, ceil_mode: bool = False,
                        count_include_pad: bool = True,
                        divisor_override: int | None = None) -> np.ndarray:  # fmt: skip
    """Adds grad / divisor to every input element of each window."""
    shape = np.shape(x)
    g = _volumes(grad_output)
    out, cells = _avg3d_cells(shape, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override)  # fmt: skip
    assert g.shape[1:] == out, "grad_output shape"
    grad = np.zeros((g.shape[0], *shape[-3:]))
    for o, inside, div in cells:
        at_o: tuple[slice | int, ...] = (slice(None), *o)
        at_inside = (slice(None), *inside)
        grad[at_inside] += (g[at_o] / div)[:, None, None, None]
    return grad.reshape(shape)


def adaptive_avg_pool3d(x: npt.ArrayLike, output_size: OptionalSize) -> np.ndarray:
    xv = _volumes(x)
    size = xv.shape[1:]
    want = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size,)
    want = want * 3 if len(want) == 1 else want
    out = tuple(size[a] if (v := want[a]) is None else int(v) for a in range(3))
    result = np.zeros((xv.shape[0], *out))
    for o in np.ndindex(*out):
        cell = tuple(_cell(o[a], size[a], out[a]) for a in range(3))
        at_o: tuple[slice | int, ...] = (slice(None), *o)
        at_cell = (slice(None), *cell)
        result[at_o] = xv[at_cell].mean(axis=(1, 2, 3))
    return result.reshape(np.shape(x)[:-3] + out)


def adaptive_avg_pool3d_backward(grad_output: npt.ArrayLike, x: npt.ArrayLike) -> np.ndarray:
    """Adds grad / cell volume to every input element of each cell; the output size is
    grad_output's."""
    shape = np.shape(x)
    size = shape[-3:]
    g = _volumes(grad_output)
    out = g.shape[1:]
    grad = np.zeros((g.shape[0], *size))
    for o in np.ndindex(*out):
        cell = tuple(_cell(o[a], size[a], out[a]) for a in range(3))
        count = math.prod(c.stop - c.start for c in cell)
        at_o: tuple[slice | int, ...] = (slice(None), *o)
        at_cell = (slice(None), *cell)
        grad[at_cell] += (g[at_o] / count)[:, None, None, None]
    return grad.reshape(shape)
