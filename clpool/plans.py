"""Plans: what one call signature launches (program variant, kernels, ranges, typed
scalars, outputs), decided once and cached per (op, arguments, shapes, strides, dtypes,
device, queue)."""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from . import kernels, policy, programs, quirks
from .bfloat16 import is_bfloat16
from .capabilities import has_fp16, has_fp64
from .discovery import Runtime, choose, require, runtime
from .errors import PoolArgumentError, Problem, UnsupportedDtypeError, Where
from .lru import LRU
from .shapes import MAX_TILE, Window, c_contiguous, channels_last, channels_last_3d

SOURCES = {"max": "max_pool.cl", "avg": "avg_pool.cl", "adaptive": "adaptive_pool.cl"}
SOURCES["unpool"] = "unpool.cl"
SOURCES["adaptive_max"] = "adaptive_max_pool.cl"
SOURCES["pool3d"] = "pool3d.cl"  # the 3-D family: max, average and adaptive average
DTYPE_BITS = {np.dtype(np.float16): 16, np.dtype(np.float32): 32, np.dtype(np.float64): 64}
BFLOAT16_BITS = 17  # -DCLPOOL_DTYPE of bfloat16 (kernels_cl/clpool.h)


def dtype_bits(dtype: np.dtype) -> int | None:
    """The -DCLPOOL_DTYPE value of `dtype`, or None for a dtype clpool does not take."""
    return BFLOAT16_BITS if is_bfloat16(dtype) else DTYPE_BITS.get(dtype)


# The windowed kernels, whose work-items take columns as well as rows (2-D, then 3-D).
TILED = {"max_pool2d_forward", "max_pool2d_backward", "avg_pool2d_forward", "avg_pool2d_backward"}
TILED |= {"max_pool3d_forward", "max_pool3d_backward", "avg_pool3d_forward", "avg_pool3d_backward"}
TILED |= {"adaptive_avg_pool2d_backward", "adaptive_max_pool_backward"}
NO_LANES16 = "-DCLPOOL_NO_LANES16"  # no 16-lane vector code (kernels_cl/clpool.h)
# the _strided kernels that take, on a CPU, a row of an image of 16 channels a lane
# (channels_inner == 16: kernels_cl/plane.h)
CPU_ROWS = {"max_pool2d_forward_strided", "max_pool2d_backward_strided"}
CPU_ROWS |= {"avg_pool2d_forward_strided", "avg_pool2d_backward_strided"}
CPU_ROWS |= {"adaptive_avg_pool2d_forward_strided", "adaptive_avg_pool2d_backward_strided"}
CPU_ROWS |= {"adaptive_max_pool2d_forward_strided", "adaptive_max_pool2d_backward_strided"}
CPU_ROWS |= {"max_pool3d_forward_strided", "max_pool3d_backward_strided"}  # (pool3d.py)
# ... whose results may have any channel stride (the rest store 16 contiguous channels)
CPU_ROWS_ANY_OUTPUT = {"avg_pool3d_forward_strided", "avg_pool3d_backward_strided"}
CPU_ROWS_ANY_OUTPUT |= {"adaptive_avg_pool3d_backward_strided"}
CPU_ROWS |= CPU_ROWS_ANY_OUTPUT
# the SOURCES that hold them
TILED_FAMILIES = ("max", "avg", "pool3d", "adaptive", "adaptive_max")
# Work-items along a row of a work-group: 64 keeps a row's loads in one or two cache lines
# of a GPU and leaves room for rows of the tile.
ROW_GROUP = 64
# A kernel's scalar arguments by name (ints), as the ops pass them to Planner.step: Any
# because mypy holds a **dict's values to every keyword parameter (local, slots, ...) too.
Scalars: TypeAlias = dict[str, Any]


@dataclass(frozen=True)
class Output:
    """An array a call allocates and returns: the slot it fills, its shape, dtype and
    strides (C-contiguous, or channels-last where the input it follows is)."""

    slot: str
    shape: tuple[int, ...]
    dtype: np.dtype
    strides: tuple[int, ...]

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Plan:
    """What a call launches, decided once for its signature."""

    device: str  # the device's name, for errors
    dtype: np.dtype
    queue: cl.CommandQueue
    context: cl.Context
    host: bool  # numpy inputs: uploaded, and the outputs returned as numpy
    pooled: bool  # allocate from the queue's memory pool (not on out-of-order queues)
    inputs: tuple[str | None, ...]  # the slot each input fills; None: only its shape counts
    copies: tuple[kernels.Launch | None, ...]  # per input: a copy to a contiguous buffer
    as_is: bool  # inputs read through their strides: channels-last numpy goes up as such
    outputs: tuple[Output, ...]
    steps: tuple[kernels.Launch, ...]


def pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def ndrange(
    device: cl.Device, cols: int, rows: int, planes: int, planes_inner: bool = False
) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """Global and local sizes for a kernel with one work-item per (col, row, plane);
    `planes_inner`: work-groups of neighbouring planes (as many as divide them, up to a
    row group), for kernels whose neighbouring planes are neighbouring elements."""
    group = min(policy.current().group, device.max_work_group_size)
    if planes_inner:
        lz = min(planes & -planes, ROW_GROUP, group, device.max_work_item_sizes[2])
        return (cols, rows, planes), (1, 1, 1 << (lz.bit_length() - 1))
    lx = min(pow2_at_least(cols), ROW_GROUP, group)
    ly = min(pow2_at_least(rows), max(1, group // lx))
    return (-(-cols // lx) * lx, -(-rows // ly) * ly, planes), (lx, ly, 1)


def dtype_problem(dtype: np.dtype, device: cl.Device) -> str | None:
    """Why `device` cannot run `dtype`, or None."""
    bits = dtype_bits(dtype)
    if bits is None:
        return f"dtype {dtype.name} is not supported (float16, bfloat16, float32 or float64)"
    if bits == 64 and not has_fp64(device):
        return "the device lacks cl_khr_fp64, so float64 is not supported there"
    if bits == 16 and not (has_fp16(device) or policy.current().fp16_storage):
        return (
            "the device lacks cl_khr_fp16, so float16 is not supported there "
            "(set CLPOOL_FP16=storage to allow half storage computed in float32)"
        )
    return None


def host_array(value: object) -> np.ndarray:
    """`value` as a numpy array in the machine's byte order (devices read little-endian
    numbers)."""
    try:
        a = np.asarray(value)
    except (ValueError, TypeError) as e:
        raise Problem(PoolArgumentError, f"input is not an array: {e}") from None
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def uploads_nhwc(a: np.ndarray) -> bool:
    """True when host input `a` goes to the device channels-last (dense NHWC memory, or
    NDHWC for a 5-D one: its own bytes where it is so already): where shapes.channels_last
    or shapes.channels_last_3d says it is laid out so; any other layout goes C-contiguous."""
    strides = tuple(s // a.itemsize for s in a.strides)
    return channels_last(a.shape, strides) or channels_last_3d(a.shape, strides)


def element_strides(a: np.ndarray | cla.Array) -> tuple[int, ...]:
    """The strides, in elements, that input `a` has on the device."""
    if isinstance(a, np.ndarray):
        return dense_strides(a.shape, uploads_nhwc(a))
    return tuple(s // a.dtype.itemsize for s in a.strides)


def dense_strides(shape: tuple[int, ...], last: bool = False) -> tuple[int, ...]:
    """The element strides of `shape` laid out C-contiguous, or channels-last (`last`:
    the channels, axis 1, innermost)."""
    order = (0, *range(2, len(shape)), 1) if last else tuple(range(len(shape)))
    strides = [0] * len(shape)
    step = 1
    for axis in reversed(order):
        strides[axis] = step
        step *= max(1, shape[axis])
    return tuple(strides)


def _resolve(
    where: Where, spec: object, arrays: tuple[object, ...], queue: cl.CommandQueue | None = None
) -> tuple[Runtime, bool]:
    """The device, context and queue a call runs on (`queue`'s where given, else the device
    arrays', else the chosen device's), and whether its results go back as numpy."""
    on_device = [a for a in arrays if isinstance(a, cla.Array)]
    if queue is None and not on_device:
        chosen = choose(spec)
        where.device = chosen.name.strip()
        return runtime(require(chosen)), True
    if queue is None:
        queue = on_device[0].queue
        if queue is None:
            raise Problem(PoolArgumentError, "device arrays must have a queue")
        whose = "the input arrays"
    else:
        whose = "queue="
    where.device = queue.device.name.strip()
    if any(a.context != queue.context for a in on_device):
        what = "queue's context" if whose == "queue=" else "one context"
        raise Problem(PoolArgumentError, f"device arrays must share {what}")
    if spec is not None and choose(spec).int_ptr != queue.device.int_ptr:
        raise Problem(PoolArgumentError, f"device={spec!r} differs from the device of {whose}")
    return Runtime(require(queue.device), queue.context, queue), False


def row_vectors(width: int, tile_step: int, bf16: bool) -> tuple[str, ...]:
    """The options that load a forward tile's rows as vectors (kernels_cl/clpool.h's
    LOAD_ROW): where rows of `width` columns, a multiple of four, are read from multiples
    of four columns (`tile_step`: the tile's columns times the stride, from one tile to the
    next); bfloat16 in chunks of eight where both are multiples of eight. None otherwise."""
    if width % 4 or tile_step % 4:
        return ()
    if bf16 and width % 8 == 0 and tile_step % 8 == 0:
        return ("-DCLPOOL_VEC4", "-DCLPOOL_VEC8")
    return ("-DCLPOOL_VEC4",)


class Planner:
    """Builds the Plan of one call: its device and dtype, the build variant, the kernels it
    launches and the outputs it allocates."""

    def __init__(
        self,
        where: Where,
        family: str,
        spec: object,
        arrays: tuple[object, ...],
        queue: cl.CommandQueue | None = None,
    ) -> None:
        self.rt, self.host = _resolve(where, spec, arrays, queue)
        self.arrays = [a if isinstance(a, cla.Array) else host_array(a) for a in arrays]
        self.dtype = self.arrays[0].dtype
        where.dtype = self.dtype
        for a in self.arrays:
            if not (isinstance(a, cla.Array) and a.flags.c_contiguous and a.offset == 0):
                self._fits("an input", a.shape, a.dtype)
        # An input not C-contiguous from offset 0 can run the _strided kernels, which read
        # their inputs as they are (no copies then).
        self.as_is = False
        self.strides = [element_strides(a) for a in self.arrays]
        self.strided = any(map(self.strided_input, range(len(self.arrays))))
        problem = dtype_problem(self.dtype, self.rt.device)
        if problem:
            raise Problem(UnsupportedDtypeError, problem)
        self.policy = policy.current()
        self.gpu = self.policy.on_gpu(self.rt.device)
        self.family = family
        self.index_bits = 64
        self.options: tuple[str, ...] = ()
        self.rows = self.cols = 1
        self.by_plane = False
        self.steps: list[kernels.Launch] = []
        self.outputs: list[Output] = []

    def lanes16(self) -> bool:
        """Whether this plan's programs may hold 16-lane vector code: a CPU's, unless a quirk
        of its driver rules them out (quirks.py; a GPU's builds leave that code out)."""
        return not self.gpu and NO_LANES16 not in quirks.options(self.rt.device)

    def strided_input(self, i: int) -> bool:
        """Whether input `i` is not C-contiguous from offset 0 (on the device)."""
        a = self.arrays[i]
        return not c_contiguous(a.shape, self.strides[i]) or bool(getattr(a, "offset", 0))

    def specialize(
        self,
        tuned_as: str,
        extents: tuple[int, ...],
        win: Window | None = None,
        width: int | None = None,
        planes: int | None = None,
        constants: bool | None = None,
        row: int | None = None,
        divisor: int = 0,
    ) -> None:
        """Choose the build variant: the tile per work-item tuned for kernel `tuned_as`
        (none where the op runs one work-item per plane, given its number of `planes`),
        64-bit in-plane offsets and areas for planes or a window of 2^31 elements or more
        (`extents`: the input's and the output's plane sizes), and the window sizes as
        constants where `constants` says so, by default for a small window or a backward
        one whose windows overlap at most twice (never with CLPOOL_SPECIALIZE=0).

        On a GPU the padding is a constant too and the loops over such a window unroll
        (a backward tile's window walk folds only then), and a forward kernel passes its
        input `width`: a small window whose tiles start at multiples of four columns of a
        row of a multiple of four then loads rows as vectors (bfloat16: of eight where
        they start at multiples of eight). A bfloat16 or float32 tiled kernel on a GPU
        passes the length of the rows it stores, `row`: it stores 2 or 4 columns at once
        where they divide the row and the tile's columns. An average op's one `divisor`
        for every window (shapes.avg_divisor; 0: none) is a constant with the window's
        sizes."""
        device, pol = self.rt.device, self.policy
        self.by_plane = planes is not None and pol.by_plane(
            device, self.dtype, planes, "backward" in tuned_as
        )
        stride1 = win is not None and (win.sh, win.sw) == (1, 1)
        tiling = win is not None and (win.kh, win.kw, win.dh, win.dw) == (win.sh, win.sw, 1, 1)
        bf16 = is_bfloat16(self.dtype)
        # Planes of one row (the 1-D ops) in every array, not just the first: a backward's
        # grad_output of 1 x 1 cells has one row, its gradient's plane many.
        one_row = all(len(a.shape) == 4 and a.shape[2] == 1 for a in self.arrays)
        # No tile per plane: for most windows, a backward op runs in its forward's program.
        self.rows, self.cols = (
            (1, 1) if self.by_plane else pol.tile(device, tuned_as, stride1, bf16, tiling, one_row)
        )
        if one_row:  # a tile without one for a row of its own takes its rows as columns
            self.rows, self.cols = 1, min(self.rows * self.cols, MAX_TILE)
        area = win.kh * win.kw if win is not None else 0
        options = ["-DCLPOOL_LARGE_PLANE"] if max(*extents, area) >= 2**31 else []
        if constants is None:
            # A backward kernel loops over the windows reaching an element, not over taps,
            # so a large window with a large stride unrolls small.
            constants = win is not None and (
                max(win.kh, win.kw) <= pol.specialize_up_to
                or ("backward" in tuned_as and max(win.kh / win.sh, win.kw / win.sw) <= 2)
            )
        if win is not None and constants and pol.specialize:
            sizes = zip(
                ("KH", "KW", "SH", "SW", "DH", "DW"),
                (win.kh, win.kw, win.sh, win.sw, win.dh, win.dw),
                strict=True,
            )
            options += [f"-DCLPOOL_{name}={value}" for name, value in sizes]
            options += [f"-DCLPOOL_AVG_DIVISOR={divisor}"] if divisor else []
            if self.gpu:
                options += ["-DCLPOOL_UNROLL", f"-DCLPOOL_PH={win.ph}", f"-DCLPOOL_PW={win.pw}"]
                if width is not None:
                    options += row_vectors(width, self.cols * win.sw, bf16)
        self.options = tuple(options)
        if row is not None:
            self.pack_rows(row)

    def pack_rows(self, row: int, views: bool = False) -> None:
        """On a GPU, tile rows of float32 or bfloat16 stored 2 or 4 at a time where that
        divides the tile's columns and the `row` length (clpool.h's STORE_COLS); not for a
        strided input, whose _strided kernels store through their own strides, unless the
        kernel reads it as a view (`views`) and stores its tiles' rows all the same."""
        packs = is_bfloat16(self.dtype) or self.dtype == np.float32
        plain = views or not self.strided
        if packs and self.gpu and plain and self.family in TILED_FAMILIES:
            pack = next((n for n in (4, 2) if self.cols % n == 0 and row % n == 0), None)
            self.options += (f"-DCLPOOL_PACK={pack}",) if pack else ()

    def cell_bounds(self, *sizes: int) -> None:
        """Adaptive cell bounds in 64-bit division where an axis or its number of cells,
        among `sizes`, reaches 46341 (clpool.h: the bounds' numerators then pass 2^31)."""
        if max(sizes, default=0) >= 46341:
            self.options += ("-DCLPOOL_LARGE_CELLS",)

    def kernel(self, name: str, own: bool = False) -> cl.Kernel:
        """The built kernel `name` of this call's program variant (`own`: an instance of
        its own)."""
        # Only the tiled families' sources hold kernels that take columns: another
        # program built with columns would be the same program built twice.
        cols = self.cols if self.family in TILED_FAMILIES else 1
        options = (
            f"-DCLPOOL_DTYPE={dtype_bits(self.dtype)}",
            f"-DCLPOOL_INDEX={self.index_bits}",
            f"-DCLPOOL_ROWS={self.rows}",
            f"-DCLPOOL_COLS={cols}",
            *self.options,
            *quirks.options(self.rt.device),
        )
        # The 16-lane code serves a CPU's kernels only: a GPU's builds leave it out, whose
        # registers it held in the kernels that take both (an H100, NDHWC [8,64,16,56,56]
        # k3 s2 p1: avg_pool3d 114 -> 66 us, its backward 239 -> 171; BENCHMARKS.md).
        if self.gpu and NO_LANES16 not in options:
            options += (NO_LANES16,)
        return programs.kernel(self.rt.context, SOURCES[self.family], options, name, own)

    def group_size(self, name: str, want: int) -> int:
        """The largest power of two work-items, at most `want` (and at least 1), that a
        work-group of kernel `name` can have on this device."""
        fits = self.kernel(name).get_work_group_info(
            cl.kernel_work_group_info.WORK_GROUP_SIZE, self.rt.device
        )
        return 1 << (max(1, min(want, self.policy.group, fits)).bit_length() - 1)

    def output(
        self,
        slot: str,
        shape: tuple[int, ...],
        dtype: np.dtype | None = None,
        like: int | None = None,
    ) -> None:
        """An output the call allocates and returns, filling `slot`: C-contiguous, or in
        the memory format of input `like` where given (channels-last where that is, as
        PyTorch's suggest_memory_format: for the _strided kernels, see step_strided); one
        larger than the device can allocate is refused."""
        dtype = np.dtype(dtype or self.dtype)
        self._fits("the output", shape, dtype)
        last = like is not None and channels_last(self.arrays[like].shape, self.strides[like])
        strides = tuple(s * dtype.itemsize for s in dense_strides(shape, last))
        self.outputs.append(Output(slot, tuple(shape), dtype, strides))

    def _fits(self, what: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
        """Refuse a buffer larger than the device can allocate."""
        nbytes = math.prod(shape) * dtype.itemsize
        largest = self.rt.device.max_mem_alloc_size
        if nbytes > largest:
            raise Problem(
                PoolArgumentError,
                f"{what} of shape {tuple(shape)} needs {nbytes} bytes on the device, more "
                f"than its largest allocation ({largest} bytes)",
            )

    def step(
        self,
        name: str,
        sizes: tuple[int, ...],
        local: tuple[int, ...] | None = None,
        slots: dict[str, str] | None = None,
        planes_inner: bool | int = False,
        **scalars: Any,
    ) -> None:
        """Launch kernel `name` over `sizes` (cols, rows, planes), each work-item taking
        the call's tile (neighbouring work-items on neighbouring planes where
        `planes_inner`: see ndrange), or over an explicit range with `local`; its other
        arguments are `scalars`, and buffers filled from the call's slots (see
        kernels.bind)."""
        if local is None:
            cols, rows, planes = sizes
            per_item = self.cols if name in TILED else 1
            sizes, local = ndrange(
                self.rt.device,
                -(-cols // per_item),
                -(-rows // self.rows),
                planes,
                bool(planes_inner),
            )
        self.steps.append(kernels.bind(self.kernel(name, own=True), sizes, local, slots, **scalars))

    def step_by_plane(
        self,
        name: str,
        sizes: tuple[int, ...],
        slots: dict[str, str] | None = None,
        planes: int | None = None,
        bands: int | None = None,
        **scalars: Any,
    ) -> None:
        """Launch kernel `name` over `sizes` (cols, rows, planes), or its `_plane` variant
        over the planes (`planes` of them where dimension 2 counts something else, as the
        3-D kernels' (volume, depth slab) rows) where the planner chose that; a `_plane`
        kernel that splits a plane's `bands` rows into bands, over (planes, bands)."""
        if self.by_plane:
            count = sizes[2] if planes is None else planes
            self.step_planes(f"{name}_plane", count, bands, slots, **scalars)
        else:
            self.step(name, sizes, slots=slots, **scalars)

    def step_planes(
        self,
        name: str,
        planes: int,
        bands: int | None = None,
        slots: dict[str, str] | None = None,
        **scalars: Any,
    ) -> None:
        """Launch kernel `name` with a work-item per plane, or over (planes, bands) where
        the kernel splits a plane's `bands` rows into bands (Policy.plane_bands)."""
        grid: tuple[int, ...] = (planes,)
        if bands is not None:
            grid += (self.policy.plane_bands(self.rt.device, planes, bands),)
        self.step(name, grid, local=(1,) * len(grid), slots=slots, **scalars)

    def step_strided(
        self,
        name: str,
        views: dict[str, int],
        slots: dict[str, str] | None = None,
        lanes: int = 1,
        group: tuple[int, int] | None = None,
        tile: tuple[int, int] = (1, 1),
        **scalars: Any,
    ) -> None:
        """Launch _strided kernel `name` over the elements of the call's first output,
        reading input i through its strides as view `v` for each `v: i` of `views` (its
        offset bound at each call from slot `v_offset`); channels innermost where that
        output is channels-last, `lanes` of them per work-item where the kernel takes that
        many (its channels_inner), they are contiguous in every view and divide C, and then
        a `tile` of outputs (rows, pixels along W: the kernel's CLPOOL_CL_ROWS and
        CLPOOL_CL_PIX); or, with `group` (items, slices), work-groups of that many items of
        channels of one image by that many slices. On a CPU a kernel of CPU_ROWS takes a
        row of an image per work-item, 16 channels a lane, where 16 divides C and every
        view's channels are contiguous (whatever `lanes` and `tile` say)."""
        out = self.outputs[0]
        n, c, h, w = (1,) * (4 - len(out.shape)) + out.shape
        strides = (0,) * (4 - len(out.shape)) + tuple(s // out.dtype.itemsize for s in out.strides)
        inner = len(out.shape) == 4 and channels_last(out.shape, strides)
        for view, i in views.items():
            a = self.arrays[i]
            scalars.update(zip(
                (f"{view}_sn", f"{view}_sc", f"{view}_sh", f"{view}_sw"),
                (0,) * (4 - a.ndim) + self.strides[i],
                strict=True,
            ))  # fmt: skip
        scalars.update(zip((f"{out.slot}_sn", f"{out.slot}_sc", f"{out.slot}_sh",
                            f"{out.slot}_sw"), strides, strict=True))  # fmt: skip
        view_strides = {self.strides[i][-3] for i in views.values()}
        channel_strides = view_strides | {strides[1]}
        # any output whose channels are contiguous (a 1 x 1 plane's too, C-contiguous as well)
        if len(out.shape) == 4 and self.cpu_rows16(name, c, view_strides, strides[1]):
            # rows of an image, their channels in runs of up to 256 (clpool.h's
            # row16_channels; adaptive_row16 holds a sum for each 16 of them, 16 at most)
            inner, per_item, geometry = True, 16, (-(-c // 256), 1, n * h)
        else:
            per_item = lanes if channel_strides == {1} and c % lanes == 0 else 1
            geometry = (c // per_item, w, n * h) if inner else (w, h, n * c)
            if inner and per_item == 4 and tile != (1, 1):
                geometry = (c // 4, -(-w // tile[1]), n * -(-h // tile[0]))
                self.options += (f"-DCLPOOL_CL_ROWS={tile[0]}", f"-DCLPOOL_CL_PIX={tile[1]}")
        sizes, local = ndrange(self.rt.device, *geometry)
        channels_inner = per_item if inner else 0
        if group is not None:  # items of per_item channels, whatever the output's layout
            items = -(-(c // per_item) // group[0]) * group[0]
            sizes, local, channels_inner = (items, group[1], n), (*group, 1), per_item
        self.as_is = True
        kernel = self.kernel(name, own=True)
        launch = kernels.bind(
            kernel, sizes, local, slots, C=c, channels_inner=channels_inner, **scalars
        )
        self.steps.append(launch)

    def cpu_rows16(self, name: str, c: int, views: set[int], output: int) -> bool:
        """Whether _strided kernel `name` runs a CPU's rows of an image, 16 channels a lane
        (the 2-D and 3-D planners): a kernel of CPU_ROWS, 16 dividing the `c` channels,
        channel strides of 1 in the `views` read, and in the `output` unless the kernel
        stores any (CPU_ROWS_ANY_OUTPUT), on a device whose kernels may hold 16-lane
        vectors (quirks.py)."""
        return (
            name in CPU_ROWS
            and c % 16 == 0
            and views == {1}
            and (output == 1 or name in CPU_ROWS_ANY_OUTPUT)
            and self.lanes16()
        )

    def _copy(self, i: int, slot: str) -> kernels.Launch | None:
        """The copy of input `i` into a contiguous buffer, or None when it is one."""
        a = self.arrays[i]
        if self.as_is or not isinstance(a, cla.Array) or a.size == 0:
            return None  # the _strided kernels read their inputs as they are
        if a.flags.c_contiguous and a.offset == 0:
            return None
        n, c, d, h, w = (1,) * (5 - a.ndim) + a.shape
        strides = (0,) * (5 - a.ndim) + tuple(s // a.dtype.itemsize for s in a.strides)
        name = "clpool_contiguous" if a.dtype == self.dtype else "clpool_contiguous_index"
        sizes, local = ndrange(self.rt.device, w, h, n * c * d)
        return kernels.bind(
            self.kernel(name, own=True),
            sizes,
            local,
            slots={"in": f"{slot}:src", "out": slot, "offset": f"{slot}:offset"},
            C=c,
            D=d,
            H=h,
            W=w,
            **dict(zip(("sn", "sc", "sd", "sh", "sw"), strides, strict=True)),
        )

    def plan(self, *inputs: str | None) -> Plan:
        """The Plan, with `inputs` naming the slot each input array fills."""
        queue = self.rt.queue
        in_order = not queue.properties & cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE
        return Plan(
            device=self.rt.device.name.strip(),
            dtype=self.dtype,
            queue=queue,
            context=self.rt.context,
            host=self.host,
            pooled=bool(in_order),
            inputs=inputs,
            copies=tuple(
                None if slot is None else self._copy(i, slot) for i, slot in enumerate(inputs)
            ),
            as_is=self.as_is,
            outputs=tuple(self.outputs),
            steps=tuple(self.steps),
        )


# The plans made so far: bounded, and emptied when the policy changes.
_plans: LRU[Plan] = LRU(lambda: policy.current().plans_kept)
policy.on_change(_plans.clear)


def cached(key: Hashable) -> Plan | None:
    """The plan made for call signature `key`, if it is still held."""
    return _plans.get(key)


def keep(key: Hashable, plan: Plan) -> Plan:
    """Hold `plan` for call signature `key`."""
    return _plans.put(key, plan)


def forget_queue(queue_ptr: int) -> None:
    """Drop the plans made for one queue (it is no longer kept)."""
    _plans.remove_if(lambda plan: plan.queue.int_ptr == queue_ptr)


def forget() -> None:
    """Drop every plan."""
    _plans.clear()
