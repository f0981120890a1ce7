"""The seven pooling ops: argument checks, then one OpenCL kernel launch each (plus a copy
for a strided device input)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pyopencl.tools as cl_tools

from . import programs, quirks, shapes
from .capabilities import fp16_storage_opt_in, has_fp16, has_fp64
from .discovery import Runtime, choose, refuse_if_forked, require, runtime
from .errors import PoolArgumentError, Problem, UnsupportedDtypeError, Where, reporting

Tensor = np.ndarray | cla.Array

SOURCES = {"max": "max_pool.cl", "avg": "avg_pool.cl", "adaptive": "adaptive_pool.cl"}
DTYPE_BITS = {np.dtype(np.float16): 16, np.dtype(np.float32): 32, np.dtype(np.float64): 64}
INDEX_BITS = {np.dtype(np.int32): 32, np.dtype(np.int64): 64}
GROUP = 256  # work-items per work-group, when the device allows it
SPECIALIZE_UP_TO = 8  # windows up to this size are built with their sizes as constants
# On a CPU, also equal adaptive cells up to this size (this project's CPU, 7x7 of
# [8,64,112,112], cells of 16: 1.35-1.50 -> 0.72-0.82 ms; not measured on a GPU).
CPU_CELLS_UP_TO = 16
# (rows, columns) each work-item handles, by device kind and kernel: the fastest in sweeps
# of clpool bench on the H200 and on this project's 2-core CPU (BENCHMARKS.md).
# "max_pool2d_values" is max_pool2d_forward without indices, and
# "adaptive_avg_pool2d_backward equal" the average pooling backward that adaptive pooling
# with equal cells runs. A name with " s1" is for windows of stride 1. Kernels not named
# take (1, 1); columns apply to the four windowed kernels (TILED) only. On a CPU the max
# backward (within 6% of (4, 1)) and the adaptive kernels (forward: faster on 3 of 5
# shapes; backward of unequal cells: 7% slower, on 2 planes: more run one per work-item)
# take (1, 1), so that a backward runs in its forward's program.
TILE = {
    "GPU": {
        "max_pool2d_forward": (2, 2),
        "max_pool2d_values": (2, 2),
        "max_pool2d_values s1": (4, 4),
        "max_pool2d_backward": (8, 2),
        "avg_pool2d_forward": (2, 2),
        "avg_pool2d_forward s1": (4, 2),
        "avg_pool2d_backward": (4, 2),
        "avg_pool2d_backward s1": (4, 4),
        "adaptive_avg_pool2d_forward": (2, 1),
        "adaptive_avg_pool2d_backward equal": (16, 2),
        "adaptive_avg_pool2d_backward": (16, 2),
    },
    "CPU": {
        "avg_pool2d_backward": (4, 2),
        "adaptive_avg_pool2d_backward equal": (8, 1),
    },
}
TILED = {"max_pool2d_forward", "max_pool2d_backward", "avg_pool2d_forward", "avg_pool2d_backward"}
TILED_FAMILIES = ("max", "avg")  # the SOURCES that hold them
_launch_lock = threading.Lock()
_typed: set[int] = set()  # kernels whose scalar argument types are set
_recording = threading.local()
_pools: dict[int, cl_tools.MemoryPool] = {}
_pools_lock = threading.Lock()


@contextmanager
def recording() -> Iterator[list[cl.Event]]:
    """Collect the OpenCL event of every kernel this thread launches inside the block."""
    _recording.events = events = []
    try:
        yield events
    finally:
        _recording.events = None


def memory_pool(queue: cl.CommandQueue) -> cl_tools.MemoryPool:
    """The pool clpool allocates outputs and uploads from on `queue`, one per queue so that
    a reused block is only ever touched in that queue's order. Reuse spares a CPU device
    the page faults of fresh memory and every device the cost of creating buffers."""
    with _pools_lock:
        pool = _pools.get(queue.int_ptr)
        if pool is None:
            pool = _pools[queue.int_ptr] = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(queue))
        return pool


def empty_cache() -> None:
    """Give the memory clpool keeps for reuse back to the OpenCL runtime (arrays still in
    use stay), like torch.cuda.empty_cache()."""
    with _pools_lock:
        for pool in _pools.values():
            pool.free_held()


def _override(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def on_gpu(device: cl.Device) -> bool:
    """Whether clpool picks kernels and tiles for a GPU on `device`."""
    return bool(device.type & cl.device_type.GPU)


def per_plane(device: cl.Device, dtype: np.dtype, planes: int) -> bool:
    """Whether an op runs one work-item per plane (a CPU, float32 or float64, and two
    planes or more per core), rather than one per tile of its output."""
    return not on_gpu(device) and dtype != np.float16 and planes >= 2 * device.max_compute_units


def tile(device: cl.Device, kernel: str, win: shapes.Window | None = None) -> tuple[int, int]:
    """(rows, columns) each work-item of kernel `kernel` handles (over window `win`);
    CLPOOL_ROWS and CLPOOL_COLS override them."""
    table = TILE["GPU" if on_gpu(device) else "CPU"]
    stride1 = win is not None and (win.sh, win.sw) == (1, 1)
    rows, cols = table.get(f"{kernel} s1" if stride1 else kernel) or table.get(kernel, (1, 1))
    rows, cols = _override("CLPOOL_ROWS") or rows, _override("CLPOOL_COLS") or cols
    return min(rows, shapes.MAX_TILE), min(cols, shapes.MAX_TILE)


def _scalar_type(value: object) -> type | None:
    """The OpenCL type of a kernel argument: long for np.int64, int for other integers,
    None for buffers and local memory."""
    if isinstance(value, np.int64):
        return np.int64
    return np.int32 if isinstance(value, (int, np.integer)) else None


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def ndrange(device: cl.Device, cols: int, rows: int, planes: int) -> tuple[tuple, tuple]:
    """Global and local sizes for a kernel with one work-item per (col, row, plane)."""
    group = min(GROUP, device.max_work_group_size)
    lx = min(_pow2_at_least(cols), 64, group)
    ly = min(_pow2_at_least(rows), max(1, group // lx))
    return (-(-cols // lx) * lx, -(-rows // ly) * ly, planes), (lx, ly, 1)


def _dtype_problem(dtype: np.dtype, device: cl.Device) -> str | None:
    bits = DTYPE_BITS.get(dtype)
    if bits is None:
        return f"dtype {dtype.name} is not supported (float16, float32 or float64)"
    if bits == 64 and not has_fp64(device):
        return "the device lacks cl_khr_fp64, so float64 is not supported there"
    if bits == 16 and not (has_fp16(device) or fp16_storage_opt_in()):
        return (
            "the device lacks cl_khr_fp16, so float16 is not supported there "
            "(set CLPOOL_FP16=storage to allow half storage computed in float32)"
        )
    return None


class _Call:
    """One op call: the device it runs on, its dtype, and its inputs."""

    def __init__(
        self, where: Where, family: str, device: object, primary: object, *others: object
    ) -> None:
        refuse_if_forked()
        arrays = [primary, *others]
        on_device = [a for a in arrays if isinstance(a, cla.Array)]
        if on_device:
            queue = on_device[0].queue
            if queue is None:
                raise Problem(PoolArgumentError, "device arrays must have a queue")
            where.device = queue.device.name.strip()
            self.rt = Runtime(require(queue.device), queue.context, queue)
            if any(a.context != queue.context for a in on_device):
                raise Problem(PoolArgumentError, "device arrays must share one context")
            if device is not None and choose(device).int_ptr != queue.device.int_ptr:
                raise Problem(
                    PoolArgumentError,
                    f"device={device!r} differs from the device of the input arrays",
                )
        else:
            chosen = choose(device)
            where.device = chosen.name.strip()
            self.rt = runtime(require(chosen))
        self.arrays = [a if isinstance(a, cla.Array) else _host_array(a) for a in arrays]
        self.host = not isinstance(self.arrays[0], cla.Array)
        self.dtype = self.arrays[0].dtype
        where.dtype = self.dtype
        problem = _dtype_problem(self.dtype, self.rt.device)
        if problem:
            raise Problem(UnsupportedDtypeError, problem)
        self.family = family
        self.index_bits = 64
        self.options: tuple[str, ...] = ()
        self.rows = self.cols = 1
        self.by_plane = False

    def specialize(
        self,
        tuned_as: str,
        extents: tuple[int, ...],
        win: shapes.Window | None = None,
        width: int | None = None,
        up_to: int = SPECIALIZE_UP_TO,
        planes: int | None = None,
    ) -> None:
        """Choose the build variant: the tile per work-item tuned for kernel `tuned_as`
        (none for an op with a per-plane kernel, given its number of `planes`, where
        per_plane() says it runs that), 64-bit in-plane offsets and areas for planes or a
        window of 2^31 elements or more (`extents`: the input's and the output's plane
        sizes), and the window sizes as constants for a small window (sides up to
        `up_to`), or a backward one whose windows overlap at most twice
        (CLPOOL_SPECIALIZE=0 turns that off).

        On a GPU the loops over such a window unroll, and a forward kernel passes its
        input `width`: a small window whose tiles start at multiples of four columns of a
        row of a multiple of four then loads rows as vectors."""
        self.by_plane = planes is not None and per_plane(self.rt.device, self.dtype, planes)
        # No tile per plane: for most windows, a backward op runs in its forward's program.
        self.rows, self.cols = (1, 1) if self.by_plane else tile(self.rt.device, tuned_as, win)
        area = win.kh * win.kw if win is not None else 0
        options = ["-DCLPOOL_LARGE_PLANE"] if max(*extents, area) >= 2**31 else []
        # A backward kernel loops over the windows reaching an element, not over taps, so a
        # large window with a large stride unrolls small (2x for adaptive backward on CPU).
        small = win is not None and (
            max(win.kh, win.kw) <= up_to
            or ("backward" in tuned_as and max(win.kh / win.sh, win.kw / win.sw) <= 2)
        )
        if small and os.environ.get("CLPOOL_SPECIALIZE", "1") != "0":
            sizes = zip(
                ("KH", "KW", "SH", "SW", "DH", "DW"),
                (win.kh, win.kw, win.sh, win.sw, win.dh, win.dw),
                strict=True,
            )
            options += [f"-DCLPOOL_{name}={value}" for name, value in sizes]
            if on_gpu(self.rt.device):
                options.append("-DCLPOOL_UNROLL")
                if width is not None and width % 4 == 0 and self.cols * win.sw % 4 == 0:
                    options += ["-DCLPOOL_VEC4", f"-DCLPOOL_PH={win.ph}", f"-DCLPOOL_PW={win.pw}"]
        self.options = tuple(options)

    def kernel(self, name: str) -> cl.Kernel:
        # Only the max and average sources hold tiled kernels: an adaptive program built
        # with columns would be the same program built twice.
        cols = self.cols if self.family in TILED_FAMILIES else 1
        options = (
            f"-DCLPOOL_DTYPE={DTYPE_BITS[self.dtype]}",
            f"-DCLPOOL_INDEX={self.index_bits}",
            f"-DCLPOOL_ROWS={self.rows}",
            f"-DCLPOOL_COLS={cols}",
            *self.options,
            *quirks.options(self.rt.device),
        )
        return programs.kernel(self.rt.context, SOURCES[self.family], options, name)

    def group_size(self, name: str, want: int) -> int:
        """The largest power of two work-items, at most `want` (and at least 1), that a
        work-group of kernel `name` can have on this device."""
        fits = self.kernel(name).get_work_group_info(
            cl.kernel_work_group_info.WORK_GROUP_SIZE, self.rt.device
        )
        return 1 << (max(1, min(want, GROUP, fits)).bit_length() - 1)

    def launch_by_plane(self, name: str, sizes: tuple[int, ...], *args: object) -> None:
        """Launch kernel `name` over `sizes` (cols, rows, planes), or its `_plane` variant
        over the planes where specialize() chose that."""
        if self.by_plane:
            self.launch(f"{name}_plane", sizes[2:], *args, local=(1,))
        else:
            self.launch(name, sizes, *args)

    def launch(
        self, name: str, sizes: tuple[int, ...], *args: object, local: tuple | None = None
    ) -> None:
        """Enqueue kernel `name` over `sizes` (cols, rows, planes), each work-item taking
        the call's tile, or over an explicit range with `local`."""
        if local is None:
            cols, rows, planes = sizes
            per_item = self.cols if name in TILED else 1
            sizes, local = ndrange(
                self.rt.device, -(-cols // per_item), -(-rows // self.rows), planes
            )
        values = [a.data if isinstance(a, cla.Array) else a for a in args]
        kernel = self.kernel(name)
        with _launch_lock:
            if kernel.int_ptr not in _typed:
                # Typed scalars take PyOpenCL's fast path: an untyped one costs ~5 us a launch.
                kernel.set_scalar_arg_dtypes([_scalar_type(v) for v in values])
                _typed.add(kernel.int_ptr)
            event = kernel(self.rt.queue, sizes, local, *values)
        if getattr(_recording, "events", None) is not None:
            _recording.events.append(event)

    def input(self, i: int) -> cla.Array:
        """Input `i` as a contiguous device array."""
        a = self.arrays[i]
        if not isinstance(a, cla.Array):
            return cla.to_device(
                self.rt.queue, np.ascontiguousarray(a), allocator=memory_pool(self.rt.queue)
            )
        if a.flags.c_contiguous and a.offset == 0 or a.size == 0:
            return a
        n, c, h, w = (1,) * (4 - a.ndim) + a.shape
        strides = (0,) * (4 - a.ndim) + tuple(s // a.dtype.itemsize for s in a.strides)
        out = self.empty(a.shape, a.dtype)
        kernel = "clpool_contiguous" if a.dtype == self.dtype else "clpool_contiguous_index"
        self.launch(
            kernel,
            (w, h, n * c),
            a.base_data,
            out,
            np.int64(a.offset // a.dtype.itemsize),
            c,
            h,
            w,
            *(np.int64(s) for s in strides),
        )
        return out

    def empty(self, shape: tuple[int, ...], dtype: np.dtype | None = None) -> cla.Array:
        return cla.empty(
            self.rt.queue, shape, dtype or self.dtype, allocator=memory_pool(self.rt.queue)
        )

    def result(self, out: cla.Array, batched: bool) -> Tensor:
        """The output in the caller's form: numpy for numpy input, else a device array."""
        if not batched:
            out = out.reshape(out.shape[1:])
        return out.get() if self.host else out


def _host_array(value: object) -> np.ndarray:
    """`value` as a numpy array in the machine's byte order (devices read little-endian
    numbers)."""
    try:
        a = np.asarray(value)
    except (ValueError, TypeError) as e:
        raise Problem(PoolArgumentError, f"input is not an array: {e}") from None
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def _check_index_range(bits: int, plane: int) -> None:
    """int32 indices cannot name the elements of a plane of 2^31 elements or more."""
    if bits == 32 and plane > 2**31 - 1:
        raise Problem(
            PoolArgumentError,
            f"int32 indices cannot address a plane of {plane} elements; use int64",
        )


def _index_bits(index_dtype: object) -> int:
    try:
        return INDEX_BITS[np.dtype(index_dtype)]
    except (TypeError, KeyError):
        raise Problem(
            PoolArgumentError, f"index_dtype must be int64 or int32, got {index_dtype!r}"
        ) from None


def _max_forward(
    label: str,
    x: Tensor,
    kernel_size,
    stride,
    padding,
    dilation,
    ceil_mode,
    index_dtype: object,
    with_indices: bool,
    device: object,
):
    with reporting(label) as where:
        call = _Call(where, "max", device, x)
        n, c, h, w = shapes.split_batch(call.arrays[0].shape)
        win = shapes.window((h, w), kernel_size, stride, padding, dilation, ceil_mode, family="max")
        call.index_bits = _index_bits(index_dtype)
        _check_index_range(call.index_bits, h * w)
        call.specialize(
            "max_pool2d_forward" if with_indices else "max_pool2d_values",
            (h * w, win.oh * win.ow),
            win,
            w,
            planes=n * c,
        )
        out_shape = (n, c, win.oh, win.ow)
        out = call.empty(out_shape)
        if with_indices:
            indices = call.empty(out_shape, np.dtype(f"int{call.index_bits}"))
        else:
            indices = out  # a placeholder the kernel never touches
            call.options += ("-DCLPOOL_NO_INDICES",)
        if out.size:
            call.launch_by_plane(
                "max_pool2d_forward",
                (win.ow, win.oh, n * c),
                call.input(0),
                out,
                indices,
                h,
                w,
                win.oh,
                win.ow,
                *win.args(),
            )
        batched = call.arrays[0].ndim == 4
        return call.result(out, batched), call.result(indices, batched) if with_indices else None


def max_pool2d(
    x: Tensor,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    *,
    device: object = None,
) -> Tensor:
    """2-D max pooling, as torch.nn.functional.max_pool2d."""
    return _max_forward(
        "max_pool2d", x, kernel_size, stride, padding, dilation, ceil_mode, "int64", False, device
    )[0]


def max_pool2d_with_indices(
    x: Tensor,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    *,
    index_dtype: object = "int64",
    device: object = None,
) -> tuple[Tensor, Tensor]:
    """2-D max pooling and the flat h*W + w index of each maximum in its input plane."""
    return _max_forward(
        "max_pool2d_with_indices",
        x,
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode,
        index_dtype,
        True,
        device,
    )


def _backward_call(
    where: Where, family: str, device: object, grad_output: Tensor, x: Tensor, *more: Tensor
) -> tuple[_Call, tuple[int, int, int, int]]:
    """The call of a backward op: runs where grad_output lives, with x's dtype and shape."""
    call = _Call(where, family, device, grad_output, x, *more)
    grad, fwd = call.arrays[0], call.arrays[1]
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
    return call, shapes.split_batch(fwd.shape)


def max_pool2d_with_indices_backward(
    grad_output: Tensor,
    x: Tensor,
    indices: Tensor,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    *,
    device: object = None,
) -> Tensor:
    """Gradient of max_pool2d_with_indices with respect to its input."""
    with reporting("max_pool2d_with_indices_backward") as where:
        call, (n, c, h, w) = _backward_call(where, "max", device, grad_output, x, indices)
        win = shapes.window((h, w), kernel_size, stride, padding, dilation, ceil_mode, family="max")
        out_shape = call.arrays[1].shape[:-2] + (win.oh, win.ow)
        shapes.expect_shape("grad_output", call.arrays[0].shape, out_shape)
        shapes.expect_shape("indices", call.arrays[2].shape, out_shape)
        index_dtype = call.arrays[2].dtype
        if index_dtype not in INDEX_BITS:
            raise Problem(
                PoolArgumentError, f"indices must be int64 or int32, got {index_dtype.name}"
            )
        call.index_bits = INDEX_BITS[index_dtype]
        _check_index_range(call.index_bits, h * w)
        call.specialize("max_pool2d_backward", (h * w, win.oh * win.ow), win, planes=n * c)
        grad_x = call.empty((n, c, h, w))
        if grad_x.size:
            call.launch_by_plane(
                "max_pool2d_backward",
                (w, h, n * c),
                call.input(0),
                call.input(2),
                grad_x,
                h,
                w,
                win.oh,
                win.ow,
                *win.args(),
            )
        return call.result(grad_x, call.arrays[1].ndim == 4)


def _avg_window(h: int, w: int, kernel_size, stride, padding, ceil_mode):
    return shapes.window((h, w), kernel_size, stride, padding, 1, ceil_mode, family="avg")


def avg_pool2d(
    x: Tensor,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
    *,
    device: object = None,
) -> Tensor:
    """2-D average pooling, as torch.nn.functional.avg_pool2d."""
    with reporting("avg_pool2d") as where:
        call = _Call(where, "avg", device, x)
        n, c, h, w = shapes.split_batch(call.arrays[0].shape)
        win = _avg_window(h, w, kernel_size, stride, padding, ceil_mode)
        include_pad = shapes.flag(count_include_pad, "count_include_pad")
        div = shapes.avg_divisor((h, w), win, include_pad, shapes.divisor(divisor_override))
        call.specialize("avg_pool2d_forward", (h * w, win.oh * win.ow), win, w, planes=n * c)
        out = call.empty((n, c, win.oh, win.ow))
        if out.size:
            call.launch_by_plane(
                "avg_pool2d_forward",
                (win.ow, win.oh, n * c),
                call.input(0),
                out,
                h,
                w,
                win.oh,
                win.ow,
                *win.avg_args(),
                int(include_pad),
                div,
            )
        return call.result(out, call.arrays[0].ndim == 4)


def avg_pool2d_backward(
    grad_output: Tensor,
    x: Tensor,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
    *,
    device: object = None,
) -> Tensor:
    """Gradient of avg_pool2d with respect to its input."""
    with reporting("avg_pool2d_backward") as where:
        call, (n, c, h, w) = _backward_call(where, "avg", device, grad_output, x)
        win = _avg_window(h, w, kernel_size, stride, padding, ceil_mode)
        include_pad = shapes.flag(count_include_pad, "count_include_pad")
        div = shapes.avg_divisor((h, w), win, include_pad, shapes.divisor(divisor_override))
        shapes.expect_shape(
            "grad_output", call.arrays[0].shape, call.arrays[1].shape[:-2] + (win.oh, win.ow)
        )
        call.specialize("avg_pool2d_backward", (h * w, win.oh * win.ow), win, planes=n * c)
        grad_x = call.empty((n, c, h, w))
        if grad_x.size:
            call.launch_by_plane(
                "avg_pool2d_backward",
                (w, h, n * c),
                call.input(0),
                grad_x,
                h,
                w,
                win.oh,
                win.ow,
                *win.avg_args(),
                int(include_pad),
                div,
            )
        return call.result(grad_x, call.arrays[1].ndim == 4)


def _band_group(call: _Call, h: int, w: int, oh: int) -> int:
    """The work-group size of adaptive_avg_pool2d_band for this plane, or 0 where that
    kernel does not apply: only on a GPU, for W a multiple of 4 and bands of 16-64 rows."""
    if not on_gpu(call.rt.device) or w % 4 or not 16 <= h // oh < 63:
        return 0
    group = call.group_size("adaptive_avg_pool2d_band", max(32, _pow2_at_least(w // 4)))
    return group if group >= w // 4 else 0


def _equal_cells(h: int, w: int, oh: int, ow: int) -> shapes.Window | None:
    """The window of adaptive pooling (h, w) -> (oh, ow) when its cells are equal and tile
    the plane, else None."""
    if not (oh and ow and h % oh == 0 and w % ow == 0):
        return None
    return shapes.Window(
        kh=h // oh, kw=w // ow, sh=h // oh, sw=w // ow, ph=0, pw=0, dh=1, dw=1, oh=oh, ow=ow
    )


def adaptive_avg_pool2d(x: Tensor, output_size, *, device: object = None) -> Tensor:
    """2-D adaptive average pooling, as torch.nn.functional.adaptive_avg_pool2d."""
    with reporting("adaptive_avg_pool2d") as where:
        call = _Call(where, "adaptive", device, x)
        n, c, h, w = shapes.split_batch(call.arrays[0].shape)
        oh, ow = shapes.adaptive_output((h, w), output_size)
        gpu, whole = on_gpu(call.rt.device), (oh, ow) == (1, 1)
        # The global kernels take no window sizes: one build for every plane size.
        call.specialize(
            "adaptive_avg_pool2d_forward",
            (h * w, oh * ow),
            None if whole else _equal_cells(h, w, oh, ow),
            up_to=SPECIALIZE_UP_TO if gpu else CPU_CELLS_UP_TO,
        )
        out = call.empty((n, c, oh, ow))
        acc = np.dtype(np.float64 if call.dtype == np.float64 else np.float32)
        if out.size and whole and not gpu:
            # A CPU sums a plane fastest in one work-item.
            call.launch(
                "adaptive_avg_pool2d_plane",
                (n * c,),
                call.input(0),
                out,
                np.int64(h * w),
                local=(1,),
            )
        elif out.size and whole:
            # A GPU needs many work-items per plane. A work-item should sum 32 or more
            # elements (H200: [64,256,56,56] 63 -> 55 us).
            group = call.group_size("adaptive_avg_pool2d_global", h * w // 32)
            call.launch(
                "adaptive_avg_pool2d_global",
                (n * c * group,),
                call.input(0),
                out,
                np.int64(h * w),
                cl.LocalMemory(group * acc.itemsize),
                local=(group,),
            )
        elif out.size and (group := _band_group(call, h, w, oh)):
            slices = group // (w // 4)
            call.launch(
                "adaptive_avg_pool2d_band",
                (oh * group, n * c),
                call.input(0),
                out,
                h,
                w,
                oh,
                ow,
                cl.LocalMemory(slices * w * acc.itemsize),
                local=(group, 1),
            )
        elif out.size:
            call.launch(
                "adaptive_avg_pool2d_forward", (ow, oh, n * c), call.input(0), out, h, w, oh, ow
            )
        return call.result(out, call.arrays[0].ndim == 4)


def adaptive_avg_pool2d_backward(
    grad_output: Tensor, x: Tensor, *, device: object = None
) -> Tensor:
    """Gradient of adaptive_avg_pool2d with respect to its input; the output size is
    grad_output's."""
    with reporting("adaptive_avg_pool2d_backward") as where:
        call, (n, c, h, w) = _backward_call(where, "adaptive", device, grad_output, x)
        grad, fwd = call.arrays[0], call.arrays[1]
        shapes.expect_shape("grad_output", grad.shape[:-2], fwd.shape[:-2])
        oh, ow = grad.shape[-2:]
        grad_x = call.empty((n, c, h, w))
        win = _equal_cells(h, w, oh, ow)
        if grad_x.size and win is not None:
            # Equal cells that tile the plane: the average pooling backward of that window.
            call.family = "avg"
            call.specialize(
                "adaptive_avg_pool2d_backward equal", (h * w, oh * ow), win, planes=n * c
            )
            call.launch_by_plane(
                "avg_pool2d_backward",
                (w, h, n * c),
                call.input(0),
                grad_x,
                h,
                w,
                oh,
                ow,
                *win.avg_args(),
                1,
                shapes.avg_divisor((h, w), win, True, 0),
            )
        elif grad_x.size:
            call.specialize("adaptive_avg_pool2d_backward", (h * w, oh * ow), planes=n * c)
            call.launch_by_plane(
                "adaptive_avg_pool2d_backward", (w, h, n * c), call.input(0), grad_x, h, w, oh, ow
            )
        return call.result(grad_x, fwd.ndim == 4)
