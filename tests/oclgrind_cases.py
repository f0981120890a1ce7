"""Every clpool kernel on tiny cases, for a run under the Oclgrind simulator.

tests/test_oclgrind.py runs this file in a subprocess whose environment registers Oclgrind
(OCL_ICD_VENDORS, OCLGRIND_* flags, CLPOOL_DEVICE=oclgrind) and reads its stderr, where
Oclgrind writes its diagnostics. Run by hand:

    python tests/oclgrind_cases.py [--dtype float32|float64|bfloat16] [--only SUBSTRING]

Before each case it writes a line `=== case NAME` to stderr, so that a diagnostic can be
traced to its case. Every result is compared with clpool.reference (float64); a mismatch
is printed to stdout as `MISMATCH NAME: ...` and makes the exit status 1. At the end it
prints `launched DTYPE: K1,K2,...`, the kernels that ran for each dtype, so the test can
check that every `__kernel` in kernels_cl/ ran.

--keep-buffers keeps every OpenCL buffer alive until the process ends. Under Oclgrind
21.10 with OCLGRIND_UNINITIALIZED=1 this is needed: a buffer that reuses the slot of a
released, smaller buffer keeps the old size in the plugin's shadow memory, so data a
kernel wrote past that size is reported as uninitialized (see RELIABILITY.md).

Kernels covered: max_pool2d_forward (with and without indices, int32 and int64),
max_pool2d_backward (int32 and int64 indices, including indices outside the plane),
avg_pool2d_forward/backward, adaptive_avg_pool2d_forward/backward,
adaptive_avg_pool2d_band (bands of 16 or more rows), adaptive_avg_pool2d_global (output
1x1, and cells of a row: with adaptive_max_pool_global, the "wide" cases), the `_plane`
kernels of max and average pooling and adaptive_avg_pool2d_plane (the
CPU kernels: the max, average and adaptive cases again, CPU_WINDOWS and CPU_ADAPTIVE), the
`_strided` kernels (non-contiguous device arrays, and channels-last numpy arrays: the
nhwc/ cases, a CPU's rows of 16 channels too, adaptive max pooling's; the 3-D ones on
channels-last-3d numpy arrays and strided 5-D device arrays, a CPU's rows of 16 channels
for max pooling: the ndhwc/ cases), clpool_contiguous (launched directly, and by the
adaptive max ops on strided 1-D and 3-D arrays), adaptive_max_pool_forward
(with and without indices, int32 and int64) and adaptive_max_pool_backward, its `_plane`
twin and a GPU's adaptive_max_pool_clear and _scatter (including indices outside the
volume),
max_unpool_clear/claim/scatter/gather (unpool_cases) and the 3-D kernels of pool3d.cl
(WINDOWS_3D; also through their `_plane` twins), max_unpool_window/tile/plane
(unpool_window_cases), in float32 and float64; and a few of them in bfloat16
(bfloat16_cases).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from itertools import islice

import numpy as np
import pyopencl as cl
import pyopencl._cl as _cl
import pyopencl.array as cla

import clpool
from clpool import bfloat16, check, discovery, kernels, launch, plans, policy, programs, verify
from clpool import reference as ref
from clpool.shapes import stored_channels_last

Case = tuple[str, Callable[[np.dtype], list[tuple[str, object, object]]]]

# (name, shape, kernel_size, stride, padding, dilation, ceil_mode)
MAX_WINDOWS = [
    ("pad-overlap", (1, 2, 5, 6), 3, 2, 1, 1, False),
    ("nonoverlap", (2, 1, 4, 6), 2, 2, 0, 1, False),
    ("ceil-overhang", (1, 2, 5, 5), 2, 2, 1, 1, True),
    ("ceil-stride3", (1, 1, 7, 4), 3, (3, 1), (1, 0), 1, True),
    ("dilation", (1, 2, 7, 6), 3, 1, 2, 2, False),
    ("dilation-misses-plane", (1, 2, 1, 2), 2, 1, 1, (2, 3), True),
    ("plane-1x1", (2, 3, 1, 1), 1, 1, 0, 1, False),
    ("batch-0", (0, 2, 4, 4), 2, 2, 0, 1, False),
    ("unbatched", (2, 5, 3), (2, 1), (1, 2), 0, 1, True),
    # rows of a multiple of 4: the GPU forward reads tile rows as vload4 chunks
    ("vec4-pad", (1, 2, 5, 8), 3, 2, 1, 1, False),
    ("vec4-stride1", (1, 1, 6, 8), 3, 1, 1, 1, True),
    # planes of one row (the 1-D ops): a GPU's values-only tile keeps NaN apart
    ("one-row", (2, 3, 1, 19), (1, 3), (1, 2), 0, 1, True),
]

# (name, shape, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
AVG_WINDOWS = [
    ("pad-overlap", (1, 2, 5, 6), 3, 2, 1, False, True, None),
    ("pad-exclude", (1, 2, 5, 6), 3, 2, 1, False, False, None),
    ("nonoverlap", (2, 1, 4, 6), 2, 2, 0, False, True, None),
    ("ceil-overhang", (1, 2, 5, 5), 2, 2, 1, True, True, None),
    ("ceil-overhang-exclude", (1, 1, 6, 4), 3, 2, 1, True, False, None),
    ("divisor-override", (1, 2, 4, 5), 3, 1, 1, True, True, 7),
    ("plane-1x1", (2, 3, 1, 1), 1, 1, 0, False, True, None),
    ("batch-0", (0, 2, 4, 4), 2, 2, 0, False, True, None),
    ("unbatched", (2, 5, 3), (2, 1), (1, 2), (1, 0), True, True, None),
    ("vec4-pad", (1, 2, 5, 8), 3, 2, 1, False, True, None),
    ("vec4-stride1", (1, 1, 6, 8), 3, 1, 1, True, False, None),
]

# (name, shape, output_size): (1, 1) runs the global kernel, bands of 16 or more rows the
# band kernel (both on a GPU only, as Oclgrind's device says it is)
ADAPTIVE = [
    ("shrink", (1, 2, 5, 7), (3, 2)),
    ("grow", (1, 1, 3, 4), (5, 6)),
    ("keep-width", (2, 1, 4, 3), (3, None)),
    ("band", (1, 2, 35, 12), (2, 3)),  # bands of 17-18 rows: the GPU band kernel
    ("band-overlap", (2, 1, 16, 8), (1, 3)),
    ("global", (2, 3, 5, 4), 1),
    ("global-1x1-plane", (1, 3, 1, 1), (1, 1)),
    ("plane-1x1", (1, 2, 1, 1), (2, 3)),
    ("batch-0", (0, 2, 4, 4), (2, 2)),
    ("global-batch-0", (0, 2, 4, 4), 1),
    ("unbatched", (2, 5, 3), (2, 2)),
    ("equal-cells", (1, 2, 6, 8), (2, 2)),  # cells of 3x4 built as constants
]


def _data(shape: tuple[int, ...], dtype: np.dtype, seed: int, ties: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if ties:  # few distinct values: many ties inside a window
        return rng.integers(-2, 3, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def max_cases(dtype: np.dtype) -> Iterator[tuple[str, object, object]]:
    for seed, (name, shape, k, s, p, d, ceil) in enumerate(MAX_WINDOWS):
        x = _data(shape, dtype, seed, ties=seed % 2 == 1)
        args = (k, s, p, d, ceil)
        yield (f"max_pool2d/{name}", lambda x=x, a=args: clpool.max_pool2d(x, *a),
               lambda x=x, a=args: ref.max_pool2d(x, *a))
        for index in ("int64", "int32"):
            def run(x=x, a=args, index=index):
                return clpool.max_pool2d_with_indices(x, *a, index_dtype=index)

            yield (f"max_pool2d_with_indices/{name}/{index}", run,
                   lambda x=x, a=args: ref.max_pool2d_with_indices(x, *a))
            out, idx = ref.max_pool2d_with_indices(x, *args)
            idx = idx.astype(index)
            grad = _data(out.shape, dtype, seed + 100)

            def back(g=grad, x=x, i=idx, a=args):
                return clpool.max_pool2d_with_indices_backward(g, x, *a, indices=i)

            def back_ref(g=grad, x=x, i=idx, a=args):
                return ref.max_pool2d_with_indices_backward(g, x, i, *a)

            yield f"max_pool2d_with_indices_backward/{name}/{index}", back, back_ref
            if idx.size:
                # indices that name no element of the plane: negative, one past the end,
                # far past the end; the kernel must ignore them, never read or write there
                bad = idx.copy()
                plane = shape[-2] * shape[-1]
                flat = bad.reshape(-1)
                limit = np.iinfo(np.dtype(index)).max
                for j, v in enumerate((-1, plane, plane + 7, -plane - 3, limit)):
                    flat[j % flat.size] = v

                def back_bad(g=grad, x=x, i=bad, a=args):
                    return clpool.max_pool2d_with_indices_backward(g, x, *a, indices=i)

                def back_bad_ref(g=grad, x=x, i=bad, a=args):
                    return ref.max_pool2d_with_indices_backward(g, x, i, *a)

                yield (f"max_pool2d_with_indices_backward/{name}/{index}/out-of-range",
                       back_bad, back_bad_ref)


def avg_cases(dtype: np.dtype) -> Iterator[tuple[str, object, object]]:
    for seed, (name, shape, k, s, p, ceil, cip, div) in enumerate(AVG_WINDOWS):
        x = _data(shape, dtype, 200 + seed)
        args = (k, s, p, ceil, cip, div)
        yield (f"avg_pool2d/{name}", lambda x=x, a=args: clpool.avg_pool2d(x, *a),
               lambda x=x, a=args: ref.avg_pool2d(x, *a))
        grad = _data(ref.avg_pool2d(x, *args).shape, dtype, 300 + seed)
        yield (f"avg_pool2d_backward/{name}",
               lambda g=grad, x=x, a=args: clpool.avg_pool2d_backward(g, x, *a),
               lambda g=grad, x=x, a=args: ref.avg_pool2d_backward(g, x, *a))


def adaptive_cases(dtype: np.dtype,
                   cases: list = ADAPTIVE) -> Iterator[tuple[str, object, object]]:
    for seed, (name, shape, size) in enumerate(cases):
        x = _data(shape, dtype, 400 + seed)
        yield (f"adaptive_avg_pool2d/{name}",
               lambda x=x, s=size: clpool.adaptive_avg_pool2d(x, s),
               lambda x=x, s=size: ref.adaptive_avg_pool2d(x, s))
        grad = _data(ref.adaptive_avg_pool2d(x, size).shape, dtype, 500 + seed)
        yield (f"adaptive_avg_pool2d_backward/{name}",
               lambda g=grad, x=x: clpool.adaptive_avg_pool2d_backward(g, x),
               lambda g=grad, x=x: ref.adaptive_avg_pool2d_backward(g, x))


# (name, rank, shape, output_size): down- and upsampling, cells that overlap, None entries,
# empty batches and outputs
ADAPTIVE_MAX = [
    ("1d-shrink", 1, (2, 3, 11), 4),
    ("1d-grow-unbatched", 1, (3, 5), 9),
    ("2d-overlap", 2, (1, 2, 7, 5), (3, 2)),
    ("2d-keep-height", 2, (2, 6, 4), (None, 7)),
    ("3d-overlap", 3, (1, 2, 3, 5, 4), (2, 3, 3)),
    ("3d-grow-unbatched", 3, (2, 2, 3, 2), (3, 4, None)),
    ("3d-batch-0", 3, (0, 2, 3, 3, 3), 2),
    ("2d-empty-output", 2, (1, 2, 3, 3), (0, 2)),
]


def adaptive_max_cases(dtype: np.dtype) -> Iterator[tuple[str, object, object]]:
    """adaptive_max_pool_forward with and without indices (int32 and int64) and
    adaptive_max_pool_backward, also with indices that name no element of the volume."""
    for seed, (name, rank, shape, size) in enumerate(ADAPTIVE_MAX):
        op = getattr(clpool, f"adaptive_max_pool{rank}d")
        back_op = getattr(clpool, f"adaptive_max_pool{rank}d_backward")
        x = _data(shape, dtype, 900 + seed, ties=seed % 2 == 1)
        label = f"adaptive_max_pool{rank}d/{name}"
        want, want_i = ref.adaptive_max_pool_nd(x, size, rank)
        yield (f"{label}/values", lambda x=x, s=size, op=op: op(x, s),
               lambda w=want: w)
        grad = _data(want.shape, dtype, 950 + seed)
        for index in ("int64", "int32"):
            yield (f"{label}/{index}",
                   lambda x=x, s=size, op=op, i=index: op(x, s, True, index_dtype=i),
                   lambda w=want, wi=want_i: (w, wi))
            idx = want_i.astype(index)
            if idx.size:
                flat = idx.reshape(-1)
                volume = int(np.prod(shape[-rank:]))
                for j, v in enumerate((-1, volume, np.iinfo(np.dtype(index)).max)):
                    flat[(3 * j) % flat.size] = v
            def back(g=grad, x=x, i=idx, op=back_op):
                return op(g, x, i)

            def back_ref(g=grad, x=x, i=idx, r=rank):
                return ref.adaptive_max_pool_backward(g, x, i, r)

            yield f"adaptive_max_pool{rank}d_backward/{name}/{index}", back, back_ref
            # the CPU's plane per work-item (where cells do not outnumber the elements)
            yield f"plane/adaptive_max_pool{rank}d_backward/{name}/{index}", _as_cpu(back), back_ref
    # an output with no rows: the gather's elements lie in no cell (nothing divides by 0)
    x = _data((1, 3, 5, 6), dtype, 980)
    none, none_i = clpool.adaptive_max_pool2d(x, (0, 2), True)
    yield ("gpu/adaptive_max_pool2d_backward/no-rows",
           _as_gpu(lambda x=x, v=none, i=none_i: clpool.adaptive_max_pool2d_backward(v, x, i)),
           lambda x=x: np.zeros_like(x))
    # a strided 5-D device array: copied through a 4-D view by clpool_contiguous
    queue = discovery.runtime(discovery.select()).queue
    base = _data((2, 3, 4, 3, 5), dtype, 990)
    view = cla.to_device(queue, base).transpose((0, 2, 1, 3, 4))
    host = np.ascontiguousarray(base.transpose(0, 2, 1, 3, 4))
    yield ("contiguous/adaptive_max_pool3d/transpose",
           lambda: [a.get() for a in clpool.adaptive_max_pool3d(view, (2, 2, 3), True)],
           lambda: ref.adaptive_max_pool3d(host, (2, 2, 3)))
    # grad_output and indices channels-last-3d, read as they lie by a GPU's scatter
    x = _data((2, 4, 5, 4, 6), dtype, 991)
    want, want_i = ref.adaptive_max_pool_nd(x, (3, 2, 4), 3)
    grad = _data(want.shape, dtype, 992)
    g_last, i_last = stored_channels_last(grad), stored_channels_last(want_i)
    yield ("gpu/adaptive_max_pool3d_backward/ndhwc",
           _as_gpu(lambda: clpool.adaptive_max_pool3d_backward(g_last, x, i_last)),
           lambda: ref.adaptive_max_pool_backward(grad, x, want_i, 3))
    # rows down and columns up: a GPU's clear and scatter too
    yield gpu_max_backward_case("scatter", (2, 3, 9, 5), (4, 7), dtype, 996)
    # cells of 64 elements or more of a row, and a plane's one cell: a work-group each
    # (a row's backward too; its cells share elements 66 and 133)
    for name, shape, size in (("row", (2, 2, 1, 200), (1, 3)), ("whole", (2, 1, 9, 8), 1)):
        x = _data(shape, dtype, 993, ties=True)
        yield (f"gpu/adaptive_max_pool2d/wide-{name}",
               _as_gpu(lambda x=x, s=size: clpool.adaptive_max_pool2d(x, s, True)),
               lambda x=x, s=size: ref.adaptive_max_pool2d(x, s))
        yield (f"gpu/adaptive_avg_pool2d/wide-{name}",
               _as_gpu(lambda x=x, s=size: clpool.adaptive_avg_pool2d(x, s)),
               lambda x=x, s=size: ref.adaptive_avg_pool2d(x, s))
    yield from wide_row_backward_cases(dtype, 995)
    yield from cpu_max_lanes_cases(dtype)


def cpu_max_lanes_cases(dtype: np.dtype) -> Iterator[tuple[str, object, object]]:
    """adaptive_max_pool_forward as a CPU builds it for cells of 8 columns or more
    (-DCLPOOL_MAX_LANES=4: 4 columns at a time, then the rest; 16 for cells of 128 columns
    or more, or of 128 elements and a multiple of 16 columns), with ties, in 1-D and 2-D."""
    cases = (("1d", 1, (2, 3, 37), 4), ("2d", 2, (1, 2, 5, 33), (2, 4)),
             ("1d-16", 1, (2, 3, 277), 2), ("2d-16", 2, (1, 2, 9, 64), (2, 2)))
    for name, rank, shape, size in cases:
        x = _data(shape, dtype, 997, ties=True)
        op = getattr(clpool, f"adaptive_max_pool{rank}d")
        for index in ("int64", "int32"):
            yield (f"cpu/adaptive_max_pool{rank}d/lanes-{name}/{index}",
                   _as_cpu(lambda x=x, s=size, op=op, i=index: op(x, s, True, index_dtype=i)),
                   lambda x=x, s=size, r=rank: ref.adaptive_max_pool_nd(x, s, r))


def gpu_max_backward_case(name: str, shape: tuple[int, ...], size: tuple[int, int],
                          dtype: np.dtype, seed: int) -> tuple[str, object, object]:
    """adaptive_max_pool2d_backward as planned for a GPU, from the indices of `shape` (with
    ties) to `size`."""
    x = _data(shape, dtype, seed, ties=True)
    _, i = ref.adaptive_max_pool_nd(x, size, 2)
    g = _data(i.shape, dtype, seed + 1)
    return (f"gpu/adaptive_max_pool2d_backward/{name}",
            _as_gpu(lambda: clpool.adaptive_max_pool2d_backward(g, x, i)),
            lambda: ref.adaptive_max_pool_backward(g, x, i, 2))


def gpu_avg3d_slabs_case(shape: tuple[int, ...], dtype: np.dtype,
                         seed: int) -> tuple[str, object, object]:
    """adaptive_avg_pool3d_backward as planned for a GPU, no axis upsampled (its slabs),
    from (3, 4, 5) cells that overlap on every axis."""
    x = _data(shape, dtype, seed)
    g = _data(shape[:-3] + (3, 4, 5), dtype, seed + 1)
    return ("gpu/adaptive_avg_pool3d_backward/slabs",
            _as_gpu(lambda: clpool.adaptive_avg_pool3d_backward(g, x)),
            lambda: ref.adaptive_avg_pool3d_backward(g, x))


def wide_row_backward_cases(dtype: np.dtype, seed: int) -> Iterator[tuple[str, object, object]]:
    """A GPU's backward of a row's cells of 64 elements or more, max and average: one-row
    planes of 200 into 3 cells, which share elements 66 and 133."""
    x = _data((2, 2, 1, 200), dtype, seed)
    x[..., 66], x[..., 133] = 10, 9  # 66: cells 0 and 1's maximum; 133: in 1 and 2, 2's
    _, i = ref.adaptive_max_pool_nd(x, (1, 3), 2)
    g = _data(i.shape, dtype, seed + 1)
    yield ("gpu/adaptive_max_pool2d_backward/wide-row",
           _as_gpu(lambda: clpool.adaptive_max_pool2d_backward(g, x, i)),
           lambda: ref.adaptive_max_pool_backward(g, x, i, 2))
    yield ("gpu/adaptive_avg_pool2d_backward/wide-row",
           _as_gpu(lambda: clpool.adaptive_avg_pool2d_backward(g, x)),
           lambda: ref.adaptive_avg_pool2d_backward(g, x))


def strided_cases(dtype: np.dtype) -> Iterator[tuple[str, object, object]]:
    """Non-contiguous pyopencl arrays (and indices): the _strided kernel of each op."""
    queue = discovery.runtime(discovery.select()).queue
    base = _data((2, 3, 6, 7), dtype, 600)
    on_device = cla.to_device(queue, base)
    views = {
        "slice-offset": (on_device[:, 1:, ::2, 1:], base[:, 1:, ::2, 1:]),
        "transpose": (on_device.transpose((0, 1, 3, 2)), base.transpose(0, 1, 3, 2)),
        "unbatched": (on_device[1, :, 1:5, ::3], base[1, :, 1:5, ::3]),
    }
    for name, (view, host) in views.items():
        host = np.ascontiguousarray(host)
        yield (f"strided/max_pool2d_with_indices/{name}",
               lambda v=view: [a.get() for a in clpool.max_pool2d_with_indices(
                   v, 2, 1, 1, ceil_mode=True)],
               lambda h=host: ref.max_pool2d_with_indices(h, 2, 1, 1, ceil_mode=True))
        yield (f"strided/avg_pool2d/{name}",
               lambda v=view: clpool.avg_pool2d(v, 2, 1, 1).get(),
               lambda h=host: ref.avg_pool2d(h, 2, 1, 1))
        yield (f"strided/adaptive_avg_pool2d/{name}",
               lambda v=view: clpool.adaptive_avg_pool2d(v, (2, 3)).get(),
               lambda h=host: ref.adaptive_avg_pool2d(h, (2, 3)))
        grad_host = _data(ref.adaptive_avg_pool2d(host, (2, 3)).shape, dtype, 601)
        # a strided grad_output: every other column of a wider device array
        wide = np.zeros(grad_host.shape[:-1] + (2 * grad_host.shape[-1],), dtype)
        wide[..., ::2] = grad_host
        grad_view = cla.to_device(queue, wide)[..., ::2]
        yield (f"strided/adaptive_avg_pool2d_backward/{name}",
               lambda g=grad_view, v=view: clpool.adaptive_avg_pool2d_backward(g, v).get(),
               lambda g=grad_host, h=host: ref.adaptive_avg_pool2d_backward(g, h))
        # strided int32 and int64 indices
        _, idx = ref.max_pool2d_with_indices(host, 2, 1, 1, ceil_mode=True)
        mgrad = _data(idx.shape, dtype, 602)
        for index in (np.int32, np.int64):
            wide_idx = np.zeros(idx.shape[:-1] + (2 * idx.shape[-1],), index)
            wide_idx[..., ::2] = idx
            idx_view = cla.to_device(queue, wide_idx)[..., ::2]
            yield (f"strided/max_pool2d_with_indices_backward/{name}/{index.__name__}",
                   lambda g=mgrad, v=view, i=idx_view: clpool.max_pool2d_with_indices_backward(
                       g, v, 2, 1, 1, indices=i, ceil_mode=True),
                   lambda g=mgrad, h=host, i=idx: ref.max_pool2d_with_indices_backward(
                       g, h, i, 2, 1, 1, ceil_mode=True))


def nhwc_cases(dtype: np.dtype) -> Iterator[tuple[str, object, object]]:
    """Channels-last numpy inputs, tiny: each _strided kernel, its work-items walking the
    channels of a pixel (max pooling also 4 channels at a time); the backward ops with
    channels-last grad_output and indices (int32 and int64) too."""
    x = stored_channels_last(_data((2, 3, 4, 5), dtype, 700, ties=True))
    win = (2, 1, 1, 1, True)  # kernel_size, stride, padding, dilation, ceil_mode
    yield ("nhwc/max_pool2d_with_indices/k2",
           lambda: clpool.max_pool2d_with_indices(x, *win),
           lambda: ref.max_pool2d_with_indices(x, *win))
    # 4 channels per work-item
    x4 = stored_channels_last(_data((1, 8, 4, 5), dtype, 705, ties=True))
    yield ("nhwc/max_pool2d_with_indices/lanes4",
           lambda: clpool.max_pool2d_with_indices(x4, 3, 2, 1, 1, True),
           lambda: ref.max_pool2d_with_indices(x4, 3, 2, 1, 1, True))
    yield ("nhwc/avg_pool2d/lanes4", lambda: clpool.avg_pool2d(x4, 3, 2, 1, True, False),
           lambda: ref.avg_pool2d(x4, 3, 2, 1, True, False))
    _, idx4 = ref.max_pool2d_with_indices(x4, 3, 2, 1, 1, True)
    g4 = stored_channels_last(_data(idx4.shape, dtype, 706))
    yield ("nhwc/max_pool2d_with_indices_backward/lanes4",
           lambda: clpool.max_pool2d_with_indices_backward(g4, x4, 3, 2, 1, 1, True,
                                                           stored_channels_last(idx4)),
           lambda: ref.max_pool2d_with_indices_backward(g4, x4, idx4, 3, 2, 1, 1, True))
    yield ("nhwc/avg_pool2d_backward/lanes4",
           lambda: clpool.avg_pool2d_backward(g4, x4, 3, 2, 1, True, False),
           lambda: ref.avg_pool2d_backward(g4, x4, 3, 2, 1, True, False))
    # a CPU's rows of 16 channels a lane (plane.h)
    x16 = stored_channels_last(_data((2, 16, 5, 4), dtype, 708, ties=True))
    _, idx16 = ref.max_pool2d_with_indices(x16, 3, 2, 1, 1, True)
    g16 = stored_channels_last(_data(idx16.shape, dtype, 709))
    yield ("nhwc/max_pool2d_with_indices/lanes16",
           _as_cpu(lambda: clpool.max_pool2d_with_indices(x16, 3, 2, 1, 1, True)),
           lambda: ref.max_pool2d_with_indices(x16, 3, 2, 1, 1, True))
    yield ("nhwc/avg_pool2d/lanes16",
           _as_cpu(lambda: clpool.avg_pool2d(x16, 3, 2, 1, True, False)),
           lambda: ref.avg_pool2d(x16, 3, 2, 1, True, False))
    yield ("nhwc/max_pool2d_with_indices_backward/lanes16",
           _as_cpu(lambda: clpool.max_pool2d_with_indices_backward(
               g16, x16, 3, 2, 1, 1, True, stored_channels_last(idx16))),
           lambda: ref.max_pool2d_with_indices_backward(g16, x16, idx16, 3, 2, 1, 1, True))
    yield ("nhwc/avg_pool2d_backward/lanes16",
           _as_cpu(lambda: clpool.avg_pool2d_backward(g16, x16, 3, 2, 1, True, False)),
           lambda: ref.avg_pool2d_backward(g16, x16, 3, 2, 1, True, False))
    for size, label in (((3, 2), "3x2"), (1, "global")):
        yield (f"nhwc/adaptive_avg_pool2d/lanes16/{label}",
               _as_cpu(lambda s=size: clpool.adaptive_avg_pool2d(x16, s)),
               lambda s=size: ref.adaptive_avg_pool2d(x16, s))
    gc16 = stored_channels_last(_data((2, 16, 3, 2), dtype, 710))
    yield ("nhwc/adaptive_avg_pool2d_backward/lanes16",
           _as_cpu(lambda: clpool.adaptive_avg_pool2d_backward(gc16, x16)),
           lambda: ref.adaptive_avg_pool2d_backward(gc16, x16))
    yield ("nhwc/adaptive_max_pool2d/lanes16",
           _as_cpu(lambda: clpool.adaptive_max_pool2d(x16, (3, 2), True)),
           lambda: ref.adaptive_max_pool_nd(x16, (3, 2), 2))
    _, im16 = ref.adaptive_max_pool_nd(x16, (3, 2), 2)
    yield ("nhwc/adaptive_max_pool2d_backward/lanes16",
           _as_cpu(lambda: clpool.adaptive_max_pool2d_backward(gc16, x16,
                                                               stored_channels_last(im16))),
           lambda: ref.adaptive_max_pool_backward(gc16, x16, im16, 2))
    y16, i16 = ref.max_pool2d_with_indices(x16, 2, 2, 0)
    y16 = y16.astype(dtype)  # exact: a max
    size16 = ref.unpool_size(y16.shape, 2, 2, 2, 0, x16.shape[-2:])[-2:]
    for how, indices in (("", i16), ("fallback/", i16[..., ::-1].copy())):
        yc16, ic16 = stored_channels_last(y16), stored_channels_last(indices)
        yield (f"nhwc/max_unpool2d/lanes16/{how}tile",
               _as_cpu(lambda yc=yc16, ic=ic16: clpool.max_unpool2d(yc, ic, 2, 2, 0, size16)),
               lambda i=indices: ref.max_unpool(y16, i, 2, 2, 2, 0, size16))
    yield ("nhwc/adaptive_avg_pool2d/lanes4", lambda: clpool.adaptive_avg_pool2d(x4, (3, 2)),
           lambda: ref.adaptive_avg_pool2d(x4, (3, 2)))
    yield ("nhwc/adaptive_avg_pool2d/global",
           lambda: clpool.adaptive_avg_pool2d(x4, 1), lambda: ref.adaptive_avg_pool2d(x4, 1))
    gd4 = stored_channels_last(_data((1, 8, 3, 2), dtype, 707))
    yield ("nhwc/adaptive_avg_pool2d_backward/lanes4",
           lambda: clpool.adaptive_avg_pool2d_backward(gd4, x4),
           lambda: ref.adaptive_avg_pool2d_backward(gd4, x4))
    yield ("nhwc/max_pool2d/dilated", lambda: clpool.max_pool2d(x, 2, 1, 1, 2),
           lambda: ref.max_pool2d_with_indices(x, 2, 1, 1, 2)[0])
    yield ("nhwc/avg_pool2d/ceil-exclude-pad",
           lambda: clpool.avg_pool2d(x, 3, 2, 1, True, False),
           lambda: ref.avg_pool2d(x, 3, 2, 1, True, False))
    yield ("nhwc/adaptive_avg_pool2d/3x2", lambda: clpool.adaptive_avg_pool2d(x, (3, 2)),
           lambda: ref.adaptive_avg_pool2d(x, (3, 2)))
    _, idx = ref.max_pool2d_with_indices(x, *win)
    g = stored_channels_last(_data(idx.shape, dtype, 701))
    for index in (np.int32, np.int64):
        i = stored_channels_last(idx.astype(index))
        yield (f"nhwc/max_pool2d_with_indices_backward/{index.__name__}",
               lambda i=i: clpool.max_pool2d_with_indices_backward(g, x, *win, indices=i),
               lambda: ref.max_pool2d_with_indices_backward(g, x, idx, *win))
    ga = stored_channels_last(_data(ref.avg_pool2d(x, 3, 2, 1, True, False).shape, dtype, 702))
    yield ("nhwc/avg_pool2d_backward/ceil-exclude-pad",
           lambda: clpool.avg_pool2d_backward(ga, x, 3, 2, 1, True, False),
           lambda: ref.avg_pool2d_backward(ga, x, 3, 2, 1, True, False))
    gd = stored_channels_last(_data((2, 3, 3, 2), dtype, 703))
    yield ("nhwc/adaptive_avg_pool2d_backward/3x2",
           lambda: clpool.adaptive_avg_pool2d_backward(gd, x),
           lambda: ref.adaptive_avg_pool2d_backward(gd, x))
    yield ("nhwc/adaptive_max_pool2d/3x2", lambda: clpool.adaptive_max_pool2d(x, (3, 2), True),
           lambda: ref.adaptive_max_pool_nd(x, (3, 2), 2))
    _, ia = ref.adaptive_max_pool_nd(x, (3, 2), 2)
    yield ("nhwc/adaptive_max_pool2d_backward/3x2",
           lambda: clpool.adaptive_max_pool2d_backward(gd, x, stored_channels_last(ia)),
           lambda: ref.adaptive_max_pool_backward(gd, x, ia, 2))
    yield from _nhwc_unpool_cases(x, dtype)


def _nhwc_unpool_cases(x: np.ndarray, dtype: np.dtype) -> Iterator[tuple[str, object, object]]:
    """max_unpool2d of channels-last values and indices, read as they lie: a CPU's rows
    of tiles and a GPU's tiles (past the windows: the output one column wider), the window
    gather and the fallback (indices outside their windows), and the gradient."""
    for name, k, s, p in (("tile", 2, 2, 0), ("window", 3, 2, 1)):
        y, i = ref.max_pool2d_with_indices(x, k, s, p)
        y = y.astype(dtype)  # the reference's float64, exact: a max
        size = ref.unpool_size(y.shape, 2, k, s, p, x.shape[-2:])[-2:]
        for how, indices in (("", i), ("fallback/", i[..., ::-1].copy())):
            yc, ic = stored_channels_last(y), stored_channels_last(indices)
            for plan, wrap in (("cpu", _as_cpu), ("gpu", _as_gpu)):
                yield (f"nhwc/max_unpool2d/{how}{name}/{plan}",
                       wrap(lambda yc=yc, ic=ic, k=k, s=s, p=p, o=size: clpool.max_unpool2d(
                           yc, ic, k, s, p, o)),
                       lambda y=y, i=indices, k=k, s=s, p=p, o=size: ref.max_unpool(
                           y, i, 2, k, s, p, o))
        g = stored_channels_last(_data(x.shape, dtype, 708))
        yc, ic = stored_channels_last(y), stored_channels_last(i)
        for plan, wrap in (("cpu", _as_cpu), ("gpu", _as_gpu)):  # along channels, positions
            yield (f"nhwc/max_unpool2d_backward/{name}/{plan}",
                   wrap(lambda g=g, yc=yc, ic=ic, k=k, s=s, p=p: clpool.max_unpool2d_backward(
                       g, yc, ic, k, s, p, g.shape[-2:])),
                   lambda g=g, y=y, i=i: ref.max_unpool_backward(g, y, i, 2))


def copy_cases(dtype: np.dtype) -> Iterator[tuple[str, object, object]]:
    """clpool_contiguous and clpool_contiguous_index, launched directly: the plans of ops
    without _strided kernels copy a non-contiguous device input with them."""
    queue = discovery.runtime(discovery.select()).queue
    base = _data((2, 3, 5, 6), dtype, 704)
    options = (f"-DCLPOOL_DTYPE={plans.dtype_bits(dtype)}", "-DCLPOOL_INDEX=64")
    for name, host in (("values", base), ("indices", (base * 10).astype(np.int64))):
        view = host[:, 1:, ::2].transpose(0, 1, 3, 2)
        source = cla.to_device(queue, host)
        kernel = "clpool_contiguous" if name == "values" else "clpool_contiguous_index"

        def run(kernel=kernel, source=source, view=view, host=host):
            out = cla.empty(queue, view.shape, view.dtype)
            n, c, h, w = view.shape
            strides = [s // view.itemsize for s in view.strides]
            k = programs.kernel(queue.context, "max_pool.cl", options, kernel, own=True)
            offset = (view.ctypes.data - host.ctypes.data) // view.itemsize
            # a 4-D view is the copy kernel's 5-D (N, C, D, H, W) with D = 1
            launch = kernels.bind(k, (w, h, n * c), None, C=c, D=1, H=h, W=w, offset=offset,
                                  sd=0, **dict(zip(("sn", "sc", "sh", "sw"), strides, strict=True)))
            launch.enqueue(queue, {"in": source.base_data, "out": out.base_data}, None).wait()
            return out.get()

        yield (f"copy/{kernel}", run, lambda view=view: np.ascontiguousarray(view))


def _as_gpu(run: Callable[[], object]) -> Callable[[], object]:
    """`run` with the kernels clpool picks on a GPU: tiles and gathers."""
    def wrapped():
        with policy.use(gpu=True):
            return run()
    return wrapped


def _as_cpu(run: Callable[[], object], per_plane: bool = True) -> Callable[[], object]:
    """`run` with the kernels clpool picks on a CPU: one plane (or volume) per work-item
    for the windowed ops, global average pooling and the adaptive average backward (or
    not, for few planes)."""
    def wrapped():
        with policy.use(per_plane=per_plane, gpu=False):
            return run()
    return wrapped


# (name, shape, output_size): runs of 16 or more elements in the CPU kernels' stores
CPU_ADAPTIVE = [
    ("global-wide", (1, 2, 5, 40), 1),  # 200 elements: 32 at a time, then the rest
    ("global-blocks", (1, 1, 40, 41), 1),  # more than one block of 1024
    ("cells-16x20", (1, 2, 32, 40), (2, 2)),  # tiling windows, rows of 16 + 4 stored
    ("cells-16x12", (1, 2, 32, 24), (2, 2)),  # equal cells of 16 x 12 built as constants
    ("cells-overlap", (1, 2, 21, 40), (2, 2)),  # unequal cells of 11 x 20: rows overlap
]


# (name, shape, kernel_size, stride, padding): rows the CPU forward kernels take 16
# outputs at a time, up to the plane's last column (and the average backward 16 windows,
# stride 1 or 2)
CPU_WINDOWS = [
    ("wide-pad", (1, 2, 3, 36), 3, 2, 1),
    ("wide-to-the-end", (1, 1, 2, 33), 2, 2, 0),  # a stride of 2 reads up to column W - 1
    ("wide-stride1", (1, 1, 3, 19), 3, 1, 1),  # the last 16 overlap the 16 before
    ("wide-stride1-k4", (1, 2, 3, 24), 4, 1, 2),  # 16 windows of 4 columns
    ("wide-stride3", (1, 1, 3, 48), 3, 3, 0),  # 16 loads a vector, up to column W - 1
]


MAX_2D = (clpool.max_pool2d_with_indices_backward, ref.max_pool2d_with_indices,
          ref.max_pool2d_with_indices_backward)
MAX_3D = (clpool.max_pool3d_with_indices_backward, ref.max_pool3d_with_indices,
          ref.max_pool3d_with_indices_backward)


def _wide_max_backward(name: str, x: np.ndarray, args: tuple, dtype: np.dtype, seed: int,
                       ops: tuple) -> Iterator[tuple[str, object, object]]:
    """The CPU's max backward (`ops`: clpool's, the reference forward and backward) of x, whose
    rows it checks 16 windows at a time: int64 and int32 indices as the forward gave them,
    and with some naming no element (-1, one past the end; int64: 2^32 past element 0,
    whose low 32 bits name it) in the first 16 windows and the last."""
    backward, ref_forward, ref_backward = ops
    out, idx = ref_forward(x, *args)
    grad = _data(out.shape, dtype, seed)
    size = int(np.prod(x.shape[2:]))
    for index in ("int64", "int32"):
        good = idx.astype(index)
        bad = good.copy()
        flat = bad.reshape(-1)
        for j, v in enumerate([-1, size] + ([2**32] if index == "int64" else [])):
            flat[[j, -1 - j]] = v
        for label, i in (("", good), ("/out-of-range", bad)):
            yield (f"{name}/{index}{label}",
                   _as_cpu(lambda g=grad, i=i: backward(g, x, *args, indices=i)),
                   lambda g=grad, i=i: ref_backward(g, x, i, *args))


def plane_cases(dtype: np.dtype) -> Iterator[tuple[str, object, object]]:
    """The max, average and adaptive cases again, CPU_WINDOWS and CPU_ADAPTIVE, through
    the kernels a CPU runs (the `_plane` kernels; Oclgrind's device is a GPU)."""
    for family in (max_cases, avg_cases):
        for name, run, want in family(dtype):
            yield f"plane/{name}", _as_cpu(run), want
    for seed, (name, shape, k, s, p) in enumerate(CPU_WINDOWS):
        x = _data(shape, dtype, 800 + seed, ties=True)
        for index in ("int64", "int32"):
            yield (f"plane/max_pool2d_with_indices/{name}/{index}",
                   _as_cpu(lambda x=x, a=(k, s, p), i=index: clpool.max_pool2d_with_indices(
                       x, *a, index_dtype=i)),
                   lambda x=x, a=(k, s, p): ref.max_pool2d_with_indices(x, *a))
        yield (f"plane/max_pool2d/{name}", _as_cpu(lambda x=x, a=(k, s, p): clpool.max_pool2d(
            x, *a)), lambda x=x, a=(k, s, p): ref.max_pool2d(x, *a))
        yield (f"plane/avg_pool2d/{name}", _as_cpu(lambda x=x, a=(k, s, p): clpool.avg_pool2d(
            x, *a)), lambda x=x, a=(k, s, p): ref.avg_pool2d(x, *a))
        grad = _data(ref.avg_pool2d(x, k, s, p).shape, dtype, 870 + seed)
        yield (f"plane/avg_pool2d_backward/{name}",
               _as_cpu(lambda g=grad, x=x, a=(k, s, p): clpool.avg_pool2d_backward(g, x, *a)),
               lambda g=grad, x=x, a=(k, s, p): ref.avg_pool2d_backward(g, x, *a))
        yield from _wide_max_backward(f"plane/max_pool2d_with_indices_backward/{name}", x,
                                      (k, s, p), dtype, 850 + seed, MAX_2D)
    for name, run, want in adaptive_cases(dtype, ADAPTIVE + CPU_ADAPTIVE):
        yield f"plane/{name}", _as_cpu(run), want
    x = _data((1, 2, 20, 21), dtype, 700)
    grad = _data((1, 2, 2, 2), dtype, 701)  # overlapping 17x18 windows: rows added to
    yield ("plane/avg_pool2d_backward/wide-windows",
           _as_cpu(lambda: clpool.avg_pool2d_backward(grad, x, (17, 18), 3)),
           lambda: ref.avg_pool2d_backward(grad, x, (17, 18), 3))


def bfloat16_cases(dtype: np.dtype) -> Iterator[tuple[str, object, object]]:
    """bfloat16's tiny run: the first max and average windows (NaN, -inf and ties in the
    max input), adaptive shrinking, a strided copy and the CPU kernels' 16-lane rows; the
    first 3-D window (every pool3d.cl kernel), the first adaptive max case (forward with and
    without indices, backward) and the first unpooling case (clear, claim, scatter,
    gather); nothing for the other dtypes (FAMILIES covers them)."""
    if dtype.name != "bfloat16":
        return
    yield from islice(pool3d_cases(dtype), 9)  # the first window, every 3-D kernel
    yield from islice(adaptive_max_cases(dtype), 3)  # values; int64 indices; backward
    yield from cpu_max_lanes_cases(dtype)
    yield from islice(unpool_cases(dtype), 2)  # forward and backward, int64 indices
    yield from islice(max_cases(dtype), 3)  # values; with int64 indices; their backward
    yield from islice(avg_cases(dtype), 2)  # forward and backward
    yield from adaptive_cases(dtype, ADAPTIVE[:1])
    yield from islice(strided_cases(dtype), 1)  # a _strided kernel
    yield from islice(copy_cases(dtype), 1)  # the copy kernel: 16 bits moved untouched
    x = _data((1, 1, 2, 40), dtype, 900)
    x[0, 0, 0, :3] = (np.nan, -np.inf, 1)
    yield (
        "plane/max_pool2d_with_indices/wide",
        _as_cpu(lambda: clpool.max_pool2d_with_indices(x, 2, 1)),
        lambda: ref.max_pool2d_with_indices(x, 2, 1),
    )
    yield (
        "plane/avg_pool2d/wide",
        _as_cpu(lambda: clpool.avg_pool2d(x, (1, 3), 1, (0, 1))),
        lambda: ref.avg_pool2d(x, (1, 3), 1, (0, 1)),
    )
    yield from bfloat16_gpu_cases(dtype)


def bfloat16_gpu_cases(dtype: np.dtype) -> Iterator[tuple[str, object, object]]:
    """bfloat16's GPU tiles (planned as for a GPU): rows loaded 8 elements at a time and
    tile rows stored 4 at a time (-DCLPOOL_VEC8, -DCLPOOL_PACK=4), row tails included, at
    strides 2 and 1; the 3-D forwards' rows in chunks of 8; the NDHWC average ops' local
    tile; the adaptive max backward's gather and scatter; the one-pass adaptive backward
    kernels."""
    y = _data((1, 2, 7, 16), dtype, 901, ties=True)
    g = _data((1, 2, 4, 8), dtype, 902)
    out, idx = ref.max_pool2d_with_indices(y, 3, 2, 1)

    yield ("gpu/max_pool2d/wide", _as_gpu(lambda: clpool.max_pool2d(y, 3, 2, 1)),
           lambda: ref.max_pool2d(y, 3, 2, 1))
    yield ("gpu/avg_pool2d/wide", _as_gpu(lambda: clpool.avg_pool2d(y, 3, 2, 1)),
           lambda: ref.avg_pool2d(y, 3, 2, 1))
    # stride 1: bfloat16's own tile, 8 columns loaded 8 at a time
    yield ("gpu/avg_pool2d/wide-stride1", _as_gpu(lambda: clpool.avg_pool2d(y, 3, 1, 1)),
           lambda: ref.avg_pool2d(y, 3, 1, 1))
    yield ("gpu/max_pool2d_with_indices_backward/wide",
           _as_gpu(lambda: clpool.max_pool2d_with_indices_backward(g, y, 3, 2, 1, indices=idx)),
           lambda: ref.max_pool2d_with_indices_backward(g, y, idx, 3, 2, 1))
    yield ("gpu/avg_pool2d_backward/wide",
           _as_gpu(lambda: clpool.avg_pool2d_backward(g, y, 3, 2, 1)),
           lambda: ref.avg_pool2d_backward(g, y, 3, 2, 1))
    v = _data((1, 2, 3, 4, 16), dtype, 903, ties=True)  # 3-D rows in chunks of 8: 4 columns

    def wide3d(op):
        with policy.use(gpu=True, cols=4):
            return op(v, 3, 2, 1)

    yield ("gpu/max_pool3d/wide", lambda: wide3d(clpool.max_pool3d),
           lambda: ref.max_pool3d(v, 3, 2, 1))
    yield ("gpu/avg_pool3d/wide", lambda: wide3d(clpool.avg_pool3d),
           lambda: ref.avg_pool3d(v, 3, 2, 1))
    # NDHWC average into C-contiguous results: the tile's local memory in float32
    yield from _ndhwc_average_cases("tile", _as_gpu, (1, 8, 2, 3, 9),
                                    [("avg_pool3d", (2, 1, 1), (2, 1, 1))], dtype, 904)
    # the adaptive max backward's gather: more cells than elements on every axis
    yield gpu_max_backward_case("upsampling", (1, 2, 3, 8), (5, 12), dtype, 905)
    # rows down, columns up: a GPU's clear and scatter (every axis down: the first adaptive
    # max case's backward, 1d-shrink, above)
    yield gpu_max_backward_case("scatter", (1, 2, 6, 8), (3, 12), dtype, 907)
    # the one-pass backward kernels: the 3-D average's slabs, a row's wide cells
    yield gpu_avg3d_slabs_case((1, 2, 5, 7, 9), dtype, 909)
    yield from wide_row_backward_cases(dtype, 911)


def compare(name: str, got: object, want: object, dtype: np.dtype) -> str | None:
    """None when `got` matches the float64 reference `want`, else a description."""
    if isinstance(want, tuple):
        got = list(got)
        if len(got) != len(want):
            return f"{len(got)} results, want {len(want)}"
        for g, w in zip(got, want, strict=True):
            problem = compare(name, g, w, dtype)
            if problem:
                return problem
        return None
    got = got.get() if isinstance(got, cla.Array) else np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape}, want {want.shape}"
    if want.dtype.kind == "i":  # indices: exact
        if not np.array_equal(got.astype(np.int64), want):
            return f"indices differ:\n{got}\nwant\n{want}"
        return None
    if got.dtype != dtype:
        return f"dtype {got.dtype}, want {dtype}"
    prefixed = name.startswith(("plane/", "strided/", "nhwc/", "copy/", "contiguous/",
                                "cpu/", "gpu/"))
    if name.split("/")[prefixed] in (
            "max_pool2d", "max_pool2d_with_indices", "adaptive_max_pool1d",
            "adaptive_max_pool2d", "adaptive_max_pool3d", "max_pool3d", "max_pool3d_with_indices",
            *(f"max_unpool{n}d{b}" for n in (1, 2, 3) for b in ("", "_backward"))):
        # max pooling and unpooling are exact: the reference value rounded to the dtype
        if not np.array_equal(got, want.astype(dtype), equal_nan=True):
            return f"values differ:\n{got}\nwant\n{want}"
        return None
    if dtype.name == "bfloat16":  # clpool.check's bound, relative to max(|want|, 1)
        if check.error(got, want) > check.TOLERANCE["bfloat16"]:
            return f"values differ:\n{got}\nwant\n{want}"
        return None
    rtol, atol = (1e-5, 1e-6) if dtype == np.float32 else (1e-12, 1e-13)
    if not np.allclose(got.astype(np.float64), want, rtol=rtol, atol=atol, equal_nan=True):
        return f"values differ:\n{got}\nwant\n{want}"
    return None


FAMILIES = (max_cases, avg_cases, adaptive_cases, strided_cases, nhwc_cases, copy_cases,
            plane_cases, adaptive_max_cases)

# (name, shape, kernel_size, stride, padding, output_size): max unpooling, indices that
# collide often (the later input wins)
UNPOOL = [
    ("1d", (2, 2, 5), 2, None, 0, None),
    ("2d-pad", (1, 2, 3, 4), 3, 2, 1, (6, 7)),
    ("3d", (1, 2, 2, 3, 2), 2, None, 0, None),
    ("2d-unbatched", (2, 3, 3), (2, 1), None, 0, None),
    ("2d-batch-0", (0, 2, 3, 3), 2, None, 0, None),
]


def unpool_cases(dtype: np.dtype) -> Iterator[tuple[str, object, object]]:
    """max_unpool1d/2d/3d (clear, claim, scatter) and their backward (gather), int64 and
    int32 indices; device indices outside the output (skipped and flagged)."""
    from clpool import unpool

    for seed, (name, shape, k, s, p, size) in enumerate(UNPOOL):
        n = 1 if name.startswith("1d") else 3 if name.startswith("3d") else 2
        x = _data(shape, dtype, 900 + seed)
        args = (k, s, p, size)
        out_shape = ref.max_unpool(x, np.zeros(shape, np.int64), n, *args).shape
        plane = int(np.prod(out_shape[-n:]))
        idx = np.random.default_rng(seed).integers(0, max(1, plane // 2), shape)
        forward, backward = (getattr(unpool, f"max_unpool{n}d{b}") for b in ("", "_backward"))
        grad = _data(out_shape, dtype, 950 + seed)
        for index in (np.int64, np.int32):
            i = idx.astype(index)
            yield (f"max_unpool{n}d/{name}/{np.dtype(index).name}",
                   lambda x=x, i=i, a=args, f=forward: f(x, i, *a),
                   lambda x=x, i=i, a=args, n=n: ref.max_unpool(x, i, n, *a))
            yield (f"max_unpool{n}d_backward/{name}/{np.dtype(index).name}",
                   lambda g=grad, x=x, i=i, a=args, b=backward: b(g, x, i, *a),
                   lambda g=grad, x=x, i=i, n=n: ref.max_unpool_backward(g, x, i, n))
    # a CPU's gather: two runs of unpool.GATHER_RUN positions, the rest, an index outside
    x = _data((1, 2, 2 * unpool.GATHER_RUN + 3), dtype, 985)
    idx = np.random.default_rng(985).integers(0, 2 * x.shape[-1], x.shape)
    idx[0, 1, 3], idx[0, 0, -2] = -1, 2 * x.shape[-1]  # in a run, in the rest
    grad = _data((1, 2, 2 * x.shape[-1]), dtype, 986)
    inside = (idx >= 0) & (idx < 2 * x.shape[-1])
    yield ("cpu/max_unpool1d_backward/runs",
           _as_cpu(lambda: unpool.max_unpool1d_backward(grad, x, idx, 2)),
           lambda: np.where(inside, ref.max_unpool_backward(grad, x, np.where(inside, idx, 0),
                                                            1), 0))
    x = _data((2, 1, 2, 2), dtype, 990)
    idx = np.array([-1, 16, 3, 3, 2**40, 5, 15, 0], np.int64).reshape(x.shape)

    def outside():
        queue = clpool.default_queue()
        out = cla.zeros(queue, (2, 1, 4, 4), dtype)
        try:
            clpool.max_unpool2d(cla.to_device(queue, x), cla.to_device(queue, idx), 2, out=out)
        except clpool.PoolArgumentError:
            return out
        raise AssertionError("indices outside the output were not flagged")

    kept = np.where((idx >= 0) & (idx < 16), idx, 0)
    want = ref.max_unpool(np.where(kept == idx, x, 0), kept, 2, 2)
    yield "max_unpool2d/device-indices-outside", outside, lambda: want


FAMILIES += (unpool_cases,)

# (name, shape, kernel_size, stride, padding, output_size): max unpooling whose indices lie
# in their own windows (the window gather alone), windows overlapping where k > s
UNPOOL_WINDOWS = [
    ("1d-overlap", (1, 2, 6), 3, 1, 1, None),
    ("2d-pad", (1, 2, 3, 4), 3, 2, 1, (6, 7)),
    ("3d-run-to-end", (1, 1, 2, 2, 3), 3, 2, 1, (4, 3, 6)),
    ("3d-tile-past-the-windows", (1, 2, 2, 3, 2), 2, None, 0, (5, 7, 4)),  # max_unpool_tile
    ("2d-tile-past-the-windows", (1, 2, 3, 4), 2, None, 0, (7, 9)),  # max_unpool_tile
    ("1d-tile-clipped", (2, 1, 5), 3, None, 0, (14,)),
]


def unpool_window_cases(dtype: np.dtype) -> Iterator[tuple[str, object, object]]:
    """max_unpool_window, max_unpool_tile and max_unpool_plane: indices inside their
    inputs' windows, often naming one output (the later input wins), and the same
    reversed along rows (the gather falls back); int64 and int32."""
    from clpool import unpool

    for seed, (name, shape, k, s, p, size) in enumerate(UNPOOL_WINDOWS):
        n = len(shape) - 2
        x = _data(shape, dtype, 1000 + seed)
        ks, ss, ps = unpool._window(n, k, s, p)
        out_sizes = ref.unpool_size(shape, n, k, s, p, size)[-n:]
        rng = np.random.default_rng(seed)
        at = []  # per axis, an output inside each input's window
        for axis, (o, kk, st, pp) in enumerate(zip(out_sizes, ks, ss, ps, strict=True)):
            start = (np.arange(shape[2 + axis]) * st - pp).reshape((-1,) + (1,) * (n - axis - 1))
            lo, hi = np.maximum(start, 0), np.minimum(start + kk, o)
            at.append(lo + rng.integers(0, 1 << 20, shape) % (hi - lo))
        idx = np.ravel_multi_index(tuple(at), out_sizes)
        forward = getattr(unpool, f"max_unpool{n}d")
        # the gather, one work-item per plane, and the gather's fallback (reversed rows:
        # indices outside their windows)
        paths = (("window", False, idx), ("plane", True, idx),
                 ("fallback", False, idx[..., ::-1].copy()))  # fmt: skip
        for path, per_plane, chosen in paths:
            for index in (np.int64, np.int32):
                i = chosen.astype(index)

                def run(x=x, i=i, a=(k, s, p, size), f=forward, per_plane=per_plane):
                    with policy.use(per_plane=per_plane):
                        return f(x, i, *a)

                yield (f"max_unpool{n}d/{path}-{name}/{np.dtype(index).name}", run,
                       lambda x=x, i=i, a=(k, s, p, size), n=n: ref.max_unpool(x, i, n, *a))


FAMILIES += (unpool_window_cases,)
TINY = {"bfloat16": (bfloat16_cases,)}  # dtypes that run only their own few cases

# (name, shape, kernel_size, stride, padding, dilation, ceil_mode) of the 3-D ops; the avg
# cases take the windows without dilation that avg_pool3d accepts.
WINDOWS_3D = [
    ("pad-overlap", (1, 2, 4, 5, 6), 3, 2, 1, 1, True),
    ("mixed", (2, 1, 3, 4, 5), (2, 3, 1), (1, 2, 1), (1, 1, 0), 1, False),
    ("dilation-misses", (1, 1, 2, 3, 3), 2, 1, 1, (3, 1, 2), False),
    ("unbatched", (2, 3, 3, 4), 2, 1, 0, 1, True),
    ("batch-0", (0, 2, 3, 3, 3), 2, 1, 0, 1, False),
    ("vector-rows", (1, 2, 3, 4, 12), 3, 2, 1, 1, True),  # a GPU's rows as vload4 chunks
]
ADAPTIVE_3D = (2, 3, 7)  # up along W but for vector-rows (a GPU gathers, else its slabs)


def pool3d_cases(dtype: np.dtype) -> Iterator[tuple[str, object, object]]:
    """The 3-D kernels: max forward with and without indices (int64, int32), max backward
    (with indices outside the volume), average and adaptive average forward and backward,
    and a strided 5-D device input (the _strided kernel)."""
    for seed, (name, shape, k, s, p, d, ceil) in enumerate(WINDOWS_3D):
        x = _data(shape, dtype, 700 + seed, ties=seed % 2 == 0)
        args = (k, s, p, d, ceil)
        yield (f"max_pool3d/{name}", lambda x=x, a=args: clpool.max_pool3d(x, *a),
               lambda x=x, a=args: ref.max_pool3d(x, *a))
        out, idx = ref.max_pool3d_with_indices(x, *args)
        for index in ("int64", "int32"):
            yield (f"max_pool3d_with_indices/{name}/{index}",
                   lambda x=x, a=args, i=index: clpool.max_pool3d_with_indices(
                       x, *a, index_dtype=i),
                   lambda x=x, a=args: ref.max_pool3d_with_indices(x, *a))
            bad = idx.astype(index)
            flat = bad.reshape(-1)
            flat[::3] = -1
            flat[1::4] = np.prod(shape[-3:])  # one past the volume
            grad = _data(out.shape, dtype, 800 + seed)
            yield (f"max_pool3d_with_indices_backward/{name}/{index}",
                   lambda g=grad, x=x, i=bad, a=args: clpool.max_pool3d_with_indices_backward(
                       g, x, *a, indices=i),
                   lambda g=grad, x=x, i=bad, a=args: ref.max_pool3d_with_indices_backward(
                       g, x, i, *a))
        if d == 1:
            avg = (k, s, p, ceil, seed % 2 == 0, 3 if seed == 1 else None)
            yield (f"avg_pool3d/{name}", lambda x=x, a=avg: clpool.avg_pool3d(x, *a),
                   lambda x=x, a=avg: ref.avg_pool3d(x, *a))
            grad = _data(ref.avg_pool3d(x, *avg).shape, dtype, 900 + seed)
            yield (f"avg_pool3d_backward/{name}",
                   lambda g=grad, x=x, a=avg: clpool.avg_pool3d_backward(g, x, *a),
                   lambda g=grad, x=x, a=avg: ref.avg_pool3d_backward(g, x, *a))
        yield (f"adaptive_avg_pool3d/{name}",
               lambda x=x: clpool.adaptive_avg_pool3d(x, ADAPTIVE_3D),
               lambda x=x: ref.adaptive_avg_pool3d(x, ADAPTIVE_3D))
        grad = _data(ref.adaptive_avg_pool3d(x, ADAPTIVE_3D).shape, dtype, 1000 + seed)
        for plan, wrap in (("", lambda run: run), ("gpu/", _as_gpu)):
            yield (f"{plan}adaptive_avg_pool3d_backward/{name}",
                   wrap(lambda g=grad, x=x: clpool.adaptive_avg_pool3d_backward(g, x)),
                   lambda g=grad, x=x: ref.adaptive_avg_pool3d_backward(g, x))
    yield gpu_avg3d_slabs_case((2, 2, 5, 7, 9), dtype, 1050)
    queue = discovery.runtime(discovery.select()).queue
    base = _data((2, 3, 4, 5, 6), dtype, 1100)
    view = cla.to_device(queue, base).transpose((1, 0, 2, 4, 3))
    host = np.ascontiguousarray(base.transpose(1, 0, 2, 4, 3))
    yield ("strided/max_pool3d_with_indices/transpose",
           lambda v=view: [a.get() for a in clpool.max_pool3d_with_indices(v, 2, 1, 1)],
           lambda h=host: ref.max_pool3d_with_indices(h, 2, 1, 1))


FAMILIES += (pool3d_cases,)


def pool3d_plane_cases(dtype: np.dtype) -> Iterator[tuple[str, object, object]]:
    """The 3-D window cases of pool3d_cases (WINDOWS_3D) again, through the kernels a CPU
    runs (the `_plane` kernels: forward and backward, max and average, and the adaptive
    average backward), and rows of 36 that take 16 windows at a time there."""
    for name, run, want in pool3d_cases(dtype):
        if not name.startswith(("adaptive_avg_pool3d/", "strided", "gpu/")):
            yield f"plane/{name}", _as_cpu(run), want
    x = _data((1, 2, 3, 3, 36), dtype, 1200, ties=True)
    yield ("plane/max_pool3d_with_indices/wide",
           _as_cpu(lambda: clpool.max_pool3d_with_indices(x, 3, 2, 1)),
           lambda: ref.max_pool3d_with_indices(x, 3, 2, 1))
    yield ("plane/max_pool3d/wide", _as_cpu(lambda: clpool.max_pool3d(x, 3, 2, 1)),
           lambda: ref.max_pool3d(x, 3, 2, 1))
    yield ("plane/avg_pool3d/wide", _as_cpu(lambda: clpool.avg_pool3d(x, 3, 2, 1)),
           lambda: ref.avg_pool3d(x, 3, 2, 1))
    for s in (2, 1):  # the backward's 16 windows of a row at once: at column 1; 1 and 17
        g = _data(ref.avg_pool3d(x, 3, s, 1).shape, dtype, 1201 + s)
        yield (f"plane/avg_pool3d_backward/wide-s{s}",
               _as_cpu(lambda g=g, s=s: clpool.avg_pool3d_backward(g, x, 3, s, 1)),
               lambda g=g, s=s: ref.avg_pool3d_backward(g, x, 3, s, 1))
    yield from _wide_max_backward("plane/max_pool3d_with_indices_backward/wide", x,
                                  (3, 2, 1), dtype, 1201, MAX_3D)


FAMILIES += (pool3d_plane_cases,)


def _ndhwc_average_cases(label: str, device: Callable, shape: tuple[int, ...],
                         ops: list[tuple[str, tuple, tuple]], dtype: np.dtype,
                         seed: int) -> Iterator[tuple[str, object, object]]:
    """Average ops (name, forward arguments, backward arguments) and their backward ops of
    NDHWC arrays of `shape`, run as on `device` (_as_cpu or _as_gpu)."""
    x = stored_channels_last(_data(shape, dtype, seed))
    for name, args, back in ops:
        g = stored_channels_last(_data(getattr(ref, name)(x, *args).shape, dtype, seed + 1))
        yield (f"ndhwc/{name}/{label}",
               device(lambda n=name, a=args: getattr(clpool, n)(x, *a)),
               lambda n=name, a=args: getattr(ref, n)(x, *a))
        yield (f"ndhwc/{name}_backward/{label}",
               device(lambda n=name, g=g, a=back: getattr(clpool, f"{n}_backward")(g, x, *a)),
               lambda n=name, g=g, a=back: getattr(ref, f"{n}_backward")(g, x, *a))


def ndhwc_cases(dtype: np.dtype) -> Iterator[tuple[str, object, object]]:
    """The 3-D _strided kernels, tiny: channels-last-3d numpy inputs (3 channels: one per
    work-item; 4: four per work-item), gradients and indices (int32 and int64) so too, and
    every other column of a wider device array."""
    win = (2, 1, 1, (1, 2, 1), True)  # kernel_size, stride, padding, dilation, ceil_mode
    avg = (2, 1, 1, True, False, None)
    for c in (3, 4):
        x = stored_channels_last(_data((1, c, 2, 3, 4), dtype, 1200 + c, ties=True))
        yield (f"ndhwc/max_pool3d_with_indices/c{c}",
               lambda x=x: clpool.max_pool3d_with_indices(x, *win),
               lambda x=x: ref.max_pool3d_with_indices(x, *win))
        yield (f"ndhwc/max_pool3d/c{c}", lambda x=x: clpool.max_pool3d(x, *win),
               lambda x=x: ref.max_pool3d(x, *win))
        out, idx = ref.max_pool3d_with_indices(x, *win)
        g = stored_channels_last(_data(out.shape, dtype, 1210 + c))
        for index in (np.int32, np.int64):
            i = stored_channels_last(idx.astype(index))
            yield (f"ndhwc/max_pool3d_with_indices_backward/c{c}/{index.__name__}",
                   lambda g=g, x=x, i=i: clpool.max_pool3d_with_indices_backward(
                       g, x, *win, indices=i),
                   lambda g=g, x=x, i=idx: ref.max_pool3d_with_indices_backward(g, x, i, *win))
        yield (f"ndhwc/avg_pool3d/c{c}", lambda x=x: clpool.avg_pool3d(x, *avg),
               lambda x=x: ref.avg_pool3d(x, *avg))
        ga = stored_channels_last(_data(ref.avg_pool3d(x, *avg).shape, dtype, 1220 + c))
        yield (f"ndhwc/avg_pool3d_backward/c{c}",
               lambda g=ga, x=x: clpool.avg_pool3d_backward(g, x, *avg),
               lambda g=ga, x=x: ref.avg_pool3d_backward(g, x, *avg))
        yield (f"ndhwc/adaptive_avg_pool3d/c{c}",
               lambda x=x: clpool.adaptive_avg_pool3d(x, (3, 2, 3)),
               lambda x=x: ref.adaptive_avg_pool3d(x, (3, 2, 3)))
        yield (f"ndhwc/adaptive_avg_pool3d/global-c{c}",  # results' channels contiguous
               lambda x=x: clpool.adaptive_avg_pool3d(x, 1),
               lambda x=x: ref.adaptive_avg_pool3d(x, 1))
        gd = stored_channels_last(_data((1, c, 3, 2, 3), dtype, 1230 + c))
        for plan, wrap in (("", lambda run: run), ("gpu/", _as_gpu)):  # the tile's rows
            yield (f"ndhwc/{plan}adaptive_avg_pool3d_backward/c{c}",
                   wrap(lambda g=gd, x=x: clpool.adaptive_avg_pool3d_backward(g, x)),
                   lambda g=gd, x=x: ref.adaptive_avg_pool3d_backward(g, x))
        yield (f"ndhwc/adaptive_max_pool3d/c{c}",
               lambda x=x: clpool.adaptive_max_pool3d(x, (3, 2, 3), True),
               lambda x=x: ref.adaptive_max_pool_nd(x, (3, 2, 3), 3))
        yield (f"ndhwc/adaptive_max_pool3d/values-c{c}",
               lambda x=x: clpool.adaptive_max_pool3d(x, (3, 2, 3)),
               lambda x=x: ref.adaptive_max_pool_nd(x, (3, 2, 3), 3)[0])
        _, im = ref.adaptive_max_pool_nd(x, (3, 2, 3), 3)
        for index in (np.int32, np.int64):
            i = stored_channels_last(im.astype(index))
            yield (f"ndhwc/adaptive_max_pool3d_backward/c{c}/{index.__name__}",
                   lambda g=gd, x=x, i=i: clpool.adaptive_max_pool3d_backward(g, x, i),
                   lambda g=gd, x=x, i=im: ref.adaptive_max_pool_backward(g, x, i, 3))
    # a CPU's rows of 16 channels a lane (max pooling)
    x = stored_channels_last(_data((2, 16, 3, 3, 4), dtype, 1240, ties=True))
    out, idx = ref.max_pool3d_with_indices(x, *win)
    g = stored_channels_last(_data(out.shape, dtype, 1241))
    yield ("ndhwc/max_pool3d_with_indices/lanes16",
           _as_cpu(lambda: clpool.max_pool3d_with_indices(x, *win)),
           lambda: ref.max_pool3d_with_indices(x, *win))
    yield ("ndhwc/max_pool3d_with_indices_backward/lanes16",
           _as_cpu(lambda: clpool.max_pool3d_with_indices_backward(
               g, x, *win, indices=stored_channels_last(idx))),
           lambda: ref.max_pool3d_with_indices_backward(g, x, idx, *win))
    # and average: a row of the C-contiguous output or gradient stores its whole run of 16
    # elements one channel at a time from a private block, then its partial run one by one
    # (adaptive: its backward, by runs of columns in the same cells; per volume as well,
    # the NDHWC gradient read through its strides)
    average = [("avg_pool3d", avg, avg), ("adaptive_avg_pool3d", ((2, 2, 5),), ())]
    for label, per_plane, ops in (("lanes16-runs", False, average),
                                  ("per-volume", True, average[1:])):
        yield from _ndhwc_average_cases(label, lambda r, v=per_plane: _as_cpu(r, v),
                                        (1, 16, 2, 2, 20), ops, dtype, 1242)
    # a GPU's: work-groups of up to pool3d.TILE store through local memory, the channels and
    # W of the last ones part filled (the backward rows of them, the last part filled)
    yield from _ndhwc_average_cases("tile", _as_gpu, (2, 8, 2, 3, 9), average, dtype, 1244)
    # and the max backward's tiles of rows x pixels, over the edges of H and W
    x = stored_channels_last(_data((2, 8, 2, 3, 9), dtype, 1245, ties=True))
    out, idx = ref.max_pool3d_with_indices(x, *win)
    g = stored_channels_last(_data(out.shape, dtype, 1246))
    yield ("ndhwc/max_pool3d_with_indices_backward/tile",
           _as_gpu(lambda: clpool.max_pool3d_with_indices_backward(
               g, x, *win, indices=stored_channels_last(idx))),
           lambda: ref.max_pool3d_with_indices_backward(g, x, idx, *win))
    queue = discovery.runtime(discovery.select()).queue
    host = _data((1, 2, 2, 3, 8), dtype, 1240)
    view = cla.to_device(queue, host)[..., ::2]
    yield ("strided/avg_pool3d/every-other-column",
           lambda: clpool.avg_pool3d(view, *avg),
           lambda: ref.avg_pool3d(np.ascontiguousarray(host[..., ::2]), *avg))


FAMILIES += (ndhwc_cases,)

_launched: set[str] = set()
_kept: list[cl.Buffer] = []


def _record_launches() -> None:
    """Note the name of every kernel enqueued (pyopencl's generated invokers call
    pyopencl._cl.enqueue_nd_range_kernel, clpool's launches pyopencl.enqueue_nd_range_kernel:
    the same function under two names)."""
    enqueue = _cl.enqueue_nd_range_kernel

    def recording(queue, kernel, *args, **kwargs):
        _launched.add(kernel.function_name)
        return enqueue(queue, kernel, *args, **kwargs)

    _cl.enqueue_nd_range_kernel = cl.enqueue_nd_range_kernel = recording


def _keep_buffers() -> None:
    """Never release a buffer made through pyopencl.Buffer (pyopencl.array allocates so),
    and let clpool take no memory from its pool, whose blocks are reused: one, reused by
    the 3-D average backward of stride 1 after hundreds of cases, drew uninitialized-value
    reports on results that were right (RELIABILITY.md)."""
    launch.memory_pool = lambda queue: None

    class KeptBuffer(cl.Buffer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            _kept.append(self)

    cl.Buffer = KeptBuffer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", action="append", choices=("float32", "float64", "bfloat16"))
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    parser.add_argument("--keep-buffers", action="store_true",
                        help="release no buffer until exit (Oclgrind shadow-memory workaround)")
    opts = parser.parse_args(argv)
    _record_launches()
    if opts.keep_buffers:
        _keep_buffers()
    dtypes = [bfloat16.as_dtype(t) for t in (opts.dtype or ("float32", "float64"))]
    device = discovery.choose()
    # These cases run every kernel under the simulator's checks: they are the canary here
    # (clpool's own would run its stages under those checks too, for minutes).
    verify.trust(device)
    print(f"device: {device.platform.name.strip()} | {device.name.strip()}", flush=True)
    failed = ran = 0
    for dtype in dtypes:
        _launched.clear()
        for family in TINY.get(dtype.name, FAMILIES):
            for name, run, expect in family(dtype):
                full = f"{dtype.name}/{name}"
                if opts.only not in full:
                    continue
                print(f"=== case {full}", file=sys.stderr, flush=True)
                ran += 1
                try:
                    problem = compare(name, run(), expect(), dtype)
                except Exception as e:  # noqa: BLE001 - any failure is a case failure
                    problem = f"raised {type(e).__name__}: {e}"
                if problem:
                    failed += 1
                    print(f"MISMATCH {full}: {problem}", flush=True)
                else:
                    print(f"ok {full}", flush=True)
        print(f"launched {dtype.name}: {','.join(sorted(_launched))}", flush=True)
    print(f"=== done: {ran} cases, {failed} failed", file=sys.stderr, flush=True)
    print(f"{ran} cases, {failed} failed", flush=True)
    return 1 if failed or not ran else 0


if __name__ == "__main__":
    sys.exit(main())
