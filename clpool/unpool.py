"""Max unpooling in 1-D, 2-D and 3-D, as torch.nn.functional.max_unpool1d/2d/3d on
PyTorch's CPU, and its gradient with respect to the input (a gather). Planes are flat:
an (N, C, *sizes) input has N * C planes of prod(sizes) elements, and its indices are
flat in the output plane (or volume), as max_pool*d's return_indices gives them. Values,
indices and gradients whose planes are dense (C-contiguous or channels-last) are read as
they lie; max_unpool2d's result takes the input's memory format, as ATen's."""

from __future__ import annotations

import math
import operator
import threading
from collections.abc import Sequence
from typing import TypeAlias, cast

import numpy as np
import numpy.typing as npt
import pyopencl as cl
import pyopencl.array as cla

from . import adopt, launch, ops, plans, policy, shapes
from .discovery import choose, require, runtime
from .errors import PoolArgumentError, Problem, UnsupportedDtypeError, Where, reporting
from .lru import LRU
from .plans import Planner, Scalars
from .types import Out, Size, Tensor

# output_size: the output's spatial sizes, with or without its (N, C) sizes; None: the default.
UnpoolSize: TypeAlias = Sequence[int] | None
# kernel_size, stride, padding and output_size of a call.
Window: TypeAlias = tuple[Size, Size | None, Size, UnpoolSize]
_NAMES = {1: "max_unpool1d", 2: "max_unpool2d", 3: "max_unpool3d"}
# positions a CPU's work-item of the gather copies, unrolled (max_unpool2d_backward of
# max_pool2d k2 s2 of [8,64,112,112] on this project's Zen 5, Debian's PoCL / Intel's
# runtime: 1 2.7-3.2 / 2.8-3.2 ms, 8 0.75-0.84 / 1.4-2.1, 16 0.76-1.1 / 0.87-1.3, 32 0.87
# / 1.35; PyTorch CPU 0.63-0.67)
GATHER_RUN = 16


def _bad(reason: str) -> Problem:
    return Problem(PoolArgumentError, reason)


def _window(
    n: int, kernel_size: Size, stride: Size | None, padding: Size
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """kernel_size, stride (kernel_size where None or ()) and padding, `n` ints each."""
    k = shapes.sizes(kernel_size, "kernel_size", n)
    s = k if stride is None or stride == () else shapes.sizes(stride, "stride", n)
    return k, s, shapes.sizes(padding, "padding", n)


def unpool_output(
    spatial: tuple[int, ...],
    kernel_size: Size,
    stride: Size | None,
    padding: Size,
    output_size: UnpoolSize,
) -> tuple[int, ...]:
    """The output's spatial sizes, by torch.nn.functional._unpool_output_size's rules: by
    default (in - 1) * stride - 2 * padding + kernel_size per axis; output_size (with or
    without its (N, C) sizes) must lie strictly between default - stride and default +
    stride; no size may be negative."""
    n = len(spatial)
    k, s, p = _window(n, kernel_size, stride, padding)
    if n == 3 and min(s) <= 0:
        raise _bad(f"strides should be greater than zero, but got stride: {list(s)}")
    default = tuple(
        (i - 1) * st + kk - 2 * pp for i, st, kk, pp in zip(spatial, s, k, p, strict=True)
    )
    if output_size is None:
        got = default
    else:
        if not isinstance(output_size, (tuple, list)):
            raise _bad(
                f"output_size must be a sequence of {n} or {n + 2} ints, got {output_size!r}"
            )
        if len(output_size) == n + 2:
            output_size = output_size[2:]
        if len(output_size) != n:
            raise _bad(
                f"output_size should be a sequence containing {n} or {n + 2} elements, but it "
                f"has a length of '{len(output_size)}'"
            )
        try:
            got = tuple(operator.index(v) for v in output_size)
        except TypeError:
            raise _bad(f"output_size must hold ints, got {output_size!r}") from None
        for d, (o, de, st) in enumerate(zip(got, default, s, strict=True)):
            if not de - st < o < de + st:
                raise _bad(
                    f'invalid output_size "{tuple(output_size)}" (dim {d} must be between '
                    f"{de - st} and {de + st})"
                )
    for d, o in enumerate(got):
        if o < 0:
            raise _bad(
                "max_unpooling: output_size must contain non-negative spatial dimensions, "
                f"but got output_size[{d}]={o}"
            )
    return got


def _geometry(
    x: np.ndarray | cla.Array, indices: np.ndarray | cla.Array, spatial: int, window: Window
) -> tuple[tuple[int, ...], int, int, int]:
    """The output's shape, the planes and the input and output plane sizes of unpooling
    `x` (indices of its shape) over `spatial` axes, after ATen's checks."""
    full = shapes.split_batch_nd(tuple(x.shape), spatial)
    if tuple(indices.shape) != tuple(x.shape):
        raise _bad(
            f"Expected shape of indices to be same as that of the input tensor ({list(x.shape)}) "
            f"but got indices tensor with shape: {list(indices.shape)}"
        )
    if indices.dtype not in ops.INDEX_BITS:
        raise _bad(f"indices must be int64 or int32, got {indices.dtype.name}")
    sizes = unpool_output(full[2:], *window)
    in_plane = math.prod(full[2:])
    if in_plane > 2**31 - 1:
        raise _bad(f"an input plane of {in_plane} elements is too large (at most 2^31 - 1)")
    return tuple(x.shape[:-spatial]) + sizes, full[0] * full[1], in_plane, math.prod(sizes)


def _host(a: object) -> np.ndarray | cla.Array:
    return a if isinstance(a, cla.Array) else plans.host_array(a)


def plane_step(shape: tuple[int, ...], strides: tuple[int, ...], spatial: int) -> int | None:
    """The elements between neighbouring positions of a plane (the `spatial` last axes) of
    an array of `shape` and element `strides`, where its planes are dense (C-contiguous: 1,
    channels-last: C), else None."""
    axes = [(side, stride) for side, stride in zip(shape[-spatial:], strides[-spatial:],
                                                     strict=True) if side != 1]  # fmt: skip
    step = axes[-1][1] if axes else 1
    span = step
    for side, stride in reversed(axes):
        if stride != span:
            return None
        span *= side
    return step


def _view(name: str, p: Planner, i: int | None, spatial: int) -> Scalars:
    """unpool.cl's view `name` of input `i` (as the kernels read it: its own strides where
    the plan reads the inputs as they are, else C-contiguous) or, where None, of the call's
    first output."""
    if i is None:
        shape, strides = p.outputs[0].shape, tuple(s // p.outputs[0].dtype.itemsize
                                                    for s in p.outputs[0].strides)  # fmt: skip
    else:
        shape = tuple(p.arrays[i].shape)
        strides = p.strides[i] if p.as_is else plans.dense_strides(shape)
    if len(shape) == spatial + 1:  # unbatched
        shape, strides = (1, *shape), (0, *strides)
    step = cast(int, plane_step(shape, strides, spatial))  # dense: the planner's choice
    return {f"{name}_sn": strides[0], f"{name}_sc": strides[1], f"{name}_step": step}


def _planner(where: Where, arrays: tuple[object, ...], spatial: int, window: Window,
             device: object, queue: cl.CommandQueue | None,
             backward: bool = False) -> tuple[Planner, tuple[int, ...], int, int, int]:  # fmt: skip
    """The planner of an unpooling op, and _geometry of its input and indices. The plan
    reads its inputs as they are where each one's planes are dense (C-contiguous or
    channels-last, from offset 0), else copies them C-contiguous."""
    p = Planner(where, "unpool", device, arrays, queue)
    read = (0, 2) if backward else (0, 1)
    p.as_is = all(
        plane_step(p.arrays[i].shape, p.strides[i], spatial) is not None
        and not getattr(p.arrays[i], "offset", 0)
        for i in read
    )
    for a in () if p.as_is else p.arrays:  # the planner's copies are 4-D at most
        if a.ndim > 4 and isinstance(a, cla.Array) and not (a.flags.c_contiguous and not a.offset):
            raise _bad("a strided 5-D device array is not supported: make it contiguous first")
    x, indices = p.arrays[1:3] if backward else p.arrays[:2]
    if backward:  # ops._backward_planner's checks; its shape split is 2-D only
        grad = p.arrays[0]
        where.dtype = x.dtype
        if (grad.dtype, grad.ndim) != (x.dtype, x.ndim):
            raise _bad(
                f"grad_output has dtype {grad.dtype.name} and {grad.ndim} dimensions; the "
                f"input has {x.dtype.name} and {x.ndim}"
            )
    out_shape, planes, ip, op = _geometry(x, indices, spatial, window)
    p.index_bits = ops.INDEX_BITS[indices.dtype]
    p.options = ("-DCLPOOL_LARGE_PLANE",) if max(ip, op) >= 2**31 else ()
    return p, out_shape, planes, ip, op


def _gathers(spatial: int, window: Window, op: int) -> bool:
    """Whether the fast path can run: windows of one element or more, strides of one or
    more (1-D and 2-D unpooling take 0), and the gather's in-plane arithmetic in 32-bit
    ints."""
    k, s, _ = _window(spatial, *window[:3])
    return min(*k, *s) > 0 and op + 2 * (max(k) + max(s)) < 2**31


def _tiles(spatial: int, window: Window) -> bool:
    """Whether the windows tile the output: kernel size = stride, no padding, so that each
    output lies in one input's window at most."""
    k, s, p = _window(spatial, *window[:3])
    return k == s and not any(p)


def _axes(sizes: tuple[int, ...], out_sizes: tuple[int, ...], window: Window) -> Scalars:
    """max_unpool_window's per-axis sizes (ID ... pw), a missing axis of side 1."""
    k, s, p = _window(len(sizes), *window[:3])
    pad = 3 - len(sizes)
    axes = {"I": sizes, "O": out_sizes, "k": k, "s": s, "p": p}
    return {
        f"{name}{axis if name.isupper() else axis.lower()}": v
        for name, values in axes.items()
        for axis, v in zip("DHW", (0 if name == "p" else 1,) * pad + tuple(values), strict=True)
    }


def _plan_forward(
    where: Where,
    arrays: tuple[object, ...],
    spatial: int,
    window: Window,
    device: object,
    gather: bool,
    queue: cl.CommandQueue | None,
) -> plans.Plan:
    """The fast path's plan (inputs x, indices and the queue's flag, output out): the
    window gather (where the windows tile the output, a work-item per column of owners
    writing each owner's window), or on a CPU one work-item per plane; or clear, claim and
    scatter's (inputs x and indices, outputs out, owner and flag)."""
    p, out_shape, planes, ip, op = _planner(where, arrays, spatial, window, device, queue)
    p.output("out", out_shape, like=0 if spatial == 2 else None)  # ATen's formats
    views = {**_view("in", p, 0, spatial), **_view("idx", p, 1, spatial)}
    views.update(_view("out", p, None, spatial), IP=ip, OP=op, C=p.arrays[0].shape[-spatial - 1])
    # a GPU's neighbouring work-items on neighbouring planes where those lie side by side
    inner = p.gpu and views["out_sc"] == 1 and views["out_step"] > 1
    if not gather:
        p.output("owner", (planes * op,), np.dtype(np.int32))
        p.output("flag", (1,), np.dtype(np.int32))
    c = views["C"]
    last = all(views[f"{v}_sc"] == 1 and views[f"{v}_step"] == c for v in ("in", "idx", "out"))
    axes = _axes(tuple(p.arrays[0].shape[-spatial:]), out_shape[-spatial:], window)
    tiles = gather and _tiles(spatial, window)  # then stride = kernel size > 0
    # the tile kernels' window, and their sizes
    tile = tuple(f"-DCLPOOL_UNPOOL_S{axis}={axes[f's{axis.lower()}']}" for axis in "DHW")
    sizes = {name: axes[name] for name in ("IH", "IW", "OH", "OW")}
    if planes and op and tiles and last and spatial < 3 and not p.gpu:
        # a CPU's channels-last tiles (1-D, 2-D): rows of owners, runs of up to 256 channels
        p.options += tile
        rows = planes // c * -(-axes["OH"] // axes["sh"])
        p.step("max_unpool_tile_rows", (-(-c // 256), 1, rows), (1, 1, 1), **views, **sizes)
    elif planes and op and gather and p.policy.by_plane(p.rt.device, p.dtype, planes):
        p.step_planes("max_unpool_plane", planes, **views)
    elif planes and op and tiles:
        p.options += tile
        p.rows = p.policy.tile(p.rt.device, "max_unpool_tile")[0]
        # per depth of owners, blocks of p.rows rows of owners (the last maybe of none)
        owner_rows = -(-axes["OH"] // axes["sh"])
        rows = -(-axes["OD"] // axes["sd"]) * -(-owner_rows // p.rows) * p.rows
        columns = -(-axes["OW"] // axes["sw"])  # columns of owners, the last maybe of none
        sizes.update(ID=axes["ID"], OD=axes["OD"])
        p.step("max_unpool_tile", (columns, rows, planes), planes_inner=inner, **views, **sizes)
    elif planes and op and gather:
        p.step("max_unpool_window", (axes["IW"], axes["ID"] * axes["IH"], planes),
               planes_inner=inner, **views, **axes)  # fmt: skip
    elif planes and op:
        p.step("max_unpool_clear", (op, 1, planes), planes_inner=inner, **views)
        p.step("max_unpool_claim", (ip, 1, planes), planes_inner=inner, **views)
        p.step("max_unpool_scatter", (ip, 1, planes), planes_inner=inner, **views)
    return p.plan("x", "indices", "flag") if gather else p.plan("x", "indices")


def _flag(queue: cl.CommandQueue, flag: cla.Array) -> int:
    """The bits the kernels set in `flag`, once they are done."""
    got = np.empty(1, np.int32)
    data = cast(cl.Buffer, flag.data)  # a buffer of the op's own (scratch or the plan's)
    cl.enqueue_copy(queue, got, data, wait_for=flag.events, is_blocking=True)
    return int(got[0])


class _Flag:
    """A queue's flag for the fast paths: an int the kernels OR their bits into, 0 between
    calls (so that no kernel clears it first), read into a pinned host int; its lock holds
    one call at a time from the launch to the read."""

    def __init__(self, queue: cl.CommandQueue) -> None:
        self.lock = threading.Lock()
        self.array = cla.to_device(queue, np.zeros(1, np.int32))
        self.array.events.clear()  # a blocking copy: no call need wait for it
        pinned = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, 4)
        both = cast(cl.map_flags, cl.map_flags.READ | cl.map_flags.WRITE)
        self.host, _ = cl.enqueue_map_buffer(queue, pinned, both, 0, (1,), np.dtype(np.int32))
        self.pinned = pinned  # mapped for good: self.host is its memory

    def read(self, queue: cl.CommandQueue, out: cla.Array) -> int:
        """The bits the kernels set, once `out` is written; the flag is 0 again after."""
        data = cast(cl.Buffer, self.array.data)
        cl.enqueue_copy(queue, self.host, data, wait_for=out.events, is_blocking=True)
        bits = int(self.host[0])
        if bits:
            self.clear(queue)
        return bits

    def clear(self, queue: cl.CommandQueue) -> None:
        data = cast(cl.Buffer, self.array.data)
        cl.enqueue_copy(queue, data, np.zeros(1, np.int32), is_blocking=True)


_flags: LRU[_Flag] = LRU(lambda: policy.current().queues_kept)


def _flag_of(queue: cl.CommandQueue) -> _Flag:
    held = _flags.get(queue.int_ptr)
    return held if held is not None else _flags.put(queue.int_ptr, _Flag(queue))


def _queue(
    device: object, queue: cl.CommandQueue | None, out: Out, arrays: tuple[object, ...]
) -> cl.CommandQueue:
    """The queue an op runs on: queue=, else out='s, else the device arrays', else the
    chosen device's (as plans' _resolve decides)."""
    if queue is not None:
        adopt.check_queue(queue)
        return queue
    given = adopt.out_arrays(out, 1)
    for a in (*(given or ()), *arrays):
        if isinstance(a, cla.Array) and a.queue is not None:
            return a.queue
    return runtime(require(choose(device))).queue


def _scratch(
    queue: cl.CommandQueue, shape: tuple[int, ...], dtype: npt.DTypeLike, last: bool = False
) -> cla.Array:
    """An array the op writes, from the queue's memory pool, C-contiguous or channels-last
    (`last`); one larger than the device can allocate is refused (as the planner refuses
    its outputs)."""
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    if nbytes > queue.device.max_mem_alloc_size:
        raise _bad(
            f"an array of shape {tuple(shape)} needs {nbytes} bytes on the device, more than "
            f"its largest allocation ({queue.device.max_mem_alloc_size} bytes)"
        )
    in_order = not queue.properties & cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE
    pool = launch.memory_pool(queue) if in_order else None
    strides = tuple(s * np.dtype(dtype).itemsize for s in plans.dense_strides(shape, last))
    return cla.Array(queue, shape, np.dtype(dtype), strides=strides, allocator=pool)


# _checked's result per call signature: the device's name, (output shape, planes, output
# plane size, whether the fast path can run).
_checks: LRU[tuple[str, tuple[tuple[int, ...], int, int, bool]]] = LRU(
    lambda: policy.current().plans_kept
)
policy.on_change(_checks.clear)


def _checked(
    where: Where, spatial: int, window: Window, x: np.ndarray | cla.Array,
    indices: np.ndarray | cla.Array, queue: cl.CommandQueue,
) -> tuple[tuple[int, ...], int, int, bool]:  # fmt: skip
    """The dtype check on `queue`'s device, then _geometry and _gathers of a call: the
    output's shape, the planes, the output plane's size and whether the fast path can run.
    Once per call signature, as ops._run plans (a repeat call skips ATen's checks)."""
    key = (spatial, repr(window), x.shape, x.dtype, indices.shape, indices.dtype, queue.int_ptr)
    held = _checks.get(key)
    if held is not None:
        where.device = held[0]
        return held[1]
    where.device = queue.device.name.strip()
    problem = plans.dtype_problem(x.dtype, queue.device)
    if problem:
        raise Problem(UnsupportedDtypeError, problem)
    out_shape, planes, _, op = _geometry(x, indices, spatial, window)
    checked = (out_shape, planes, op, _gathers(spatial, window, op))
    return _checks.put(key, (where.device, checked))[1]


def _unpool(
    spatial: int,
    input: Tensor,
    indices: Tensor,
    window: Window,
    device: object,
    queue: cl.CommandQueue | None,
    out: Out,
) -> Tensor:
    label = _NAMES[spatial]
    with reporting(label) as where:
        arrays, like = adopt.inputs((input, indices))
        x, idx = map(_host, arrays)
        where.dtype = x.dtype
        q = _queue(device, queue, out, arrays)
        out_shape, planes, op, gathers = _checked(where, spatial, window, x, idx, q)
        work = planes and op and x.size
        if work and not isinstance(idx, cla.Array):
            bad = (idx < 0) | (idx >= op)
            if bad.any():
                raise _bad(_invalid(int(idx[bad].flat[0]), out_shape[-spatial:]))
        host = queue is None and out is None and not any(isinstance(a, cla.Array) for a in arrays)
        # device results of our own: the plan allocates them (no scratch arrays)
        mine = out is None and not host
        # out=: one Array (ops._run checks it); the runs on q give Arrays
        # the plan's output format (_plan_forward): the input's for 2-D, as ATen's
        last = spatial == 2 and shapes.channels_last(x.shape, plans.element_strides(x))
        got = cast(cla.Array | None, out) if out is not None or mine else _scratch(
            q, out_shape, x.dtype, last)  # fmt: skip
        params = (spatial, window, device)
        bits = 2  # bit 2: an index outside its window, so clear, claim and scatter
        if gathers:
            state = _flag_of(q)
            with state.lock:
                try:
                    fast = (*arrays, state.array)
                    run = ops._run(label, _plan_forward, fast, (*params, True), q, got)
                    got = cast(cla.Array, run[0])
                    bits = state.read(q, got) if work else 0
                except BaseException:  # the flag stays 0 for the next call
                    state.clear(q)
                    raise
        if bits & 2:
            owned = None
            if got is not None:
                owned = (got, _scratch(q, (planes * op,), np.int32), _scratch(q, (1,), np.int32))
            run = ops._run(label, _plan_forward, arrays, (*params, False), q, owned, 3)
            got, _, flag = cast(tuple[cla.Array, cla.Array, cla.Array], run)
            bits = _flag(q, flag) if work else 0
        if bits & 1:
            raise _bad(_invalid(None, out_shape[-spatial:]))
        got = cast(cla.Array, got)  # bits start at 2: one of the runs above set it
        if not host:
            return got
        result = launch.to_host(got)
        return adopt.tensors([result], like)[0] if like is not None else result


def _invalid(index: int | None, sizes: tuple[int, ...]) -> str:
    volume = "x".join(map(str, sizes))
    found = f"Found an invalid max index: {index}" if index is not None else (
        "Found an invalid max index (the kernel flagged one)")  # fmt: skip
    return f"{found} (output volumes are of size {volume})"


def max_unpool1d(
    input: Tensor,
    indices: Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    output_size: UnpoolSize = None,
    *,
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor:
    """1-D max unpooling, as torch.nn.functional.max_unpool1d: zeros, with input[i] at
    indices[i] along L (the later input where two name one element). Host indices are
    checked before the launch, device (pyopencl Array) indices by the kernel; every call
    reads the kernel's flag back, so it waits for the op to finish."""
    window = (kernel_size, stride, padding, output_size)
    return _unpool(1, input, indices, window, device, queue, out)


def max_unpool2d(
    input: Tensor,
    indices: Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    output_size: UnpoolSize = None,
    *,
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor:
    """2-D max unpooling, as torch.nn.functional.max_unpool2d: zeros, with input[i] at the
    flat h * W + w index indices[i] of its output plane (the later input where two name
    one element). Host indices are checked before the launch, device (pyopencl Array)
    indices by the kernel; every call reads the kernel's flag back, so it waits for the op
    to finish."""
    window = (kernel_size, stride, padding, output_size)
    return _unpool(2, input, indices, window, device, queue, out)


def max_unpool3d(
    input: Tensor,
    indices: Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    output_size: UnpoolSize = None,
    *,
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor:
    """3-D max unpooling, as torch.nn.functional.max_unpool3d: zeros, with input[i] at the
    flat (d * H + h) * W + w index indices[i] of its output volume (the later input where
    two name one element). Host indices are checked before the launch, device (pyopencl
    Array) indices by the kernel; every call reads the kernel's flag back, so it waits for
    the op to finish."""
    window = (kernel_size, stride, padding, output_size)
    return _unpool(3, input, indices, window, device, queue, out)


def _plan_backward(
    where: Where,
    arrays: tuple[object, ...],
    spatial: int,
    window: Window,
    device: object,
    queue: cl.CommandQueue | None,
) -> plans.Plan:
    p, out_shape, planes, ip, op = _planner(
        where, arrays, spatial, window, device, queue, backward=True
    )
    shapes.expect_shape("grad_output", p.arrays[0].shape, out_shape)
    p.output("grad_x", p.arrays[1].shape)
    views = {**_view("in", p, None, spatial), **_view("idx", p, 2, spatial)}
    c = p.arrays[1].shape[-spatial - 1]
    views.update(_view("out", p, 0, spatial), IP=ip, OP=op, C=c)
    # a CPU's work-items along the channels where the indices' interleave (NHWC
    # [8,64,112,112] k2 s2 on this project's Intel CPU: 3.4 -> 1.1 ms); a GPU's along the
    # positions, which grad_x's are (on an H100, [32,64,112,112]: 78 against 116 us)
    inner = not p.gpu and views["idx_step"] > 1
    if inner:
        p.options += ("-DCLPOOL_CHANNELS_INNER",)
    if planes and not (inner or p.gpu):  # a CPU's work-item copies a run of positions,
        p.options += (f"-DCLPOOL_GATHER_RUN={GATHER_RUN}",)  # work-groups along one plane
        group = p.group_size("max_unpool_gather", plans.ROW_GROUP)
        items = -(-ip // GATHER_RUN)
        sizes = (-(-items // group) * group, c, planes // c)
        p.step("max_unpool_gather", sizes, local=(group, 1, 1), **views)
    elif planes:
        sizes = (c, ip, planes // c) if inner else (ip, c, planes // c)
        p.step("max_unpool_gather", sizes, **views)
    return p.plan("grad_out", None, "indices")


def _backward(
    spatial: int,
    grad_output: Tensor,
    input: Tensor,
    indices: Tensor,
    window: Window,
    device: object,
    queue: cl.CommandQueue | None,
    out: Out,
) -> Tensor:
    label = f"{_NAMES[spatial]}_backward"
    arrays = (grad_output, input, indices)
    return ops._run(label, _plan_backward, arrays, (spatial, window, device), queue, out)[0]


def max_unpool1d_backward(
    grad_output: Tensor,
    input: Tensor,
    indices: Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    output_size: UnpoolSize = None,
    *,
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor:
    """Gradient of max_unpool1d with respect to its input: grad_output at each index (0
    where an index names no element of the output)."""
    window = (kernel_size, stride, padding, output_size)
    return _backward(1, grad_output, input, indices, window, device, queue, out)


def max_unpool2d_backward(
    grad_output: Tensor,
    input: Tensor,
    indices: Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    output_size: UnpoolSize = None,
    *,
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor:
    """Gradient of max_unpool2d with respect to its input: grad_output at each index (0
    where an index names no element of the output plane)."""
    window = (kernel_size, stride, padding, output_size)
    return _backward(2, grad_output, input, indices, window, device, queue, out)


def max_unpool3d_backward(
    grad_output: Tensor,
    input: Tensor,
    indices: Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    output_size: UnpoolSize = None,
    *,
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor:
    """Gradient of max_unpool3d with respect to its input: grad_output at each index (0
    where an index names no element of the output volume)."""
    window = (kernel_size, stride, padding, output_size)
    return _backward(3, grad_output, input, indices, window, device, queue, out)
