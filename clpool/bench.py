"""Benchmark harness behind `clpool bench`. For each case, from one run: clpool's wall time
per call back to back as a user calls it, its kernel time from OpenCL profiling events (the
same calls on a profiling queue beside clpool's own), PyTorch's wall time timed the same
way, the bytes the op moves, GB/s from each time and the fraction of the device's own copy
bandwidth; plus the host cost of a warm call on a tiny array and a stream of calls on a
large one."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

import clpool

from . import __version__, adopt, bfloat16, kernels, launch, ops, shapes
from .discovery import Runtime

if TYPE_CHECKING:
    import torch

# A JSON-ready record: a case's parameters, its timings, a report.
Record: TypeAlias = dict[str, Any]

WINDOWED = (
    "max_pool2d",
    "max_pool2d_with_indices",
    "max_pool2d_with_indices_backward",
    "avg_pool2d",
    "avg_pool2d_backward",
)
ADAPTIVE_AVG = ("adaptive_avg_pool2d", "adaptive_avg_pool2d_backward")
ADAPTIVE_MAX = ("adaptive_max_pool2d", "adaptive_max_pool2d_backward")
WINDOWED_3D = (
    "max_pool3d",
    "max_pool3d_with_indices",
    "max_pool3d_with_indices_backward",
    "avg_pool3d",
    "avg_pool3d_backward",
)
ADAPTIVE_3D = (
    "adaptive_avg_pool3d",
    "adaptive_avg_pool3d_backward",
    "adaptive_max_pool3d",
    "adaptive_max_pool3d_backward",
)
WINDOWED_1D = (
    "max_pool1d",
    "max_pool1d_with_indices_backward",
    "avg_pool1d",
    "avg_pool1d_backward",
)
ADAPTIVE_1D = (
    "adaptive_avg_pool1d",
    "adaptive_avg_pool1d_backward",
    "adaptive_max_pool1d",
    "adaptive_max_pool1d_backward",
)
UNPOOL = {n: (f"max_unpool{n}d", f"max_unpool{n}d_backward") for n in (1, 2, 3)}
OPS_3D = (*WINDOWED_3D, *ADAPTIVE_3D, *UNPOOL[3])
OPS_1D = (*WINDOWED_1D, *ADAPTIVE_1D, *UNPOOL[1])
OPS = (*WINDOWED, *ADAPTIVE_AVG, *ADAPTIVE_MAX, *UNPOOL[2], *OPS_3D, *OPS_1D)
# max_unpool1d/2d/3d of max_pool k2 s2's result (and indices) back to the case's shape (2-D:
# the first shape's), and their backward ops
UNPOOL_WINDOW = dict(kernel_size=2, stride=2, padding=0)
# (shape, output size) of the adaptive max pooling cases: a classifier's head (N / 4 on a
# CPU)
ADAPTIVE_MAX_CASE = ((32, 256, 14, 14), 7)
# (shape, window) of the default sweep: f32 NCHW, sizes for a GPU; a CPU gets N / 4.
SHAPES = (
    ((32, 64, 112, 112), dict(kernel_size=3, stride=2, padding=1)),
    ((64, 256, 56, 56), dict(kernel_size=2, stride=2, padding=0)),
    ((128, 64, 128, 128), dict(kernel_size=3, stride=1, padding=1)),
)
ADAPTIVE_OUTPUTS = (7, 1)
# The 3-D sweep: f32 NCDHW, a GPU's size (a CPU gets N / 4).
SHAPE_3D = ((8, 64, 16, 56, 56), dict(kernel_size=3, stride=2, padding=1))
# The 1-D sweep: f32 (N, C, L), audio or text (a CPU gets N / 4).
SHAPE_1D = ((64, 256, 4096), dict(kernel_size=3, stride=2, padding=0))
# The 1-D and 3-D adaptive ops' output size along each axis.
ADAPTIVE_ND_OUTPUT = 7
MIN_TIME = 0.2  # seconds a timed loop of calls runs at least (unless MAX_CALLS)
MAX_CALLS = 20_000  # calls in one timed loop at most
KERNEL_CALLS = 100  # calls whose profiling events give the kernel time, at most


@dataclass
class Case:
    """One op on one input shape with its parameters."""

    op: str
    shape: tuple[int, ...]  # (N, C, H, W); (N, C, D, H, W) for the 3-D ops, (N, C, L) 1-D
    params: Record = field(default_factory=dict)
    dtype: str = "float32"
    layout: str = "nchw"  # or "nhwc": channels-last inputs (PyTorch's too; NDHWC 3-D)

    @property
    def label(self) -> str:
        p = self.params
        nhwc = f" {'nd' if len(self.shape) == 5 else 'n'}hwc" if self.layout == "nhwc" else ""
        if "output_size" in p:
            return f"out {p['output_size']}{nhwc}"
        return f"k{p['kernel_size']} s{p['stride']} p{p['padding']}{nhwc}"


def default_cases(
    cpu: bool,
    ops_wanted: tuple[str, ...] = OPS,
    shape: tuple[int, ...] | None = None,
    dtype: str = "float32",
    layout: str = "nchw",
) -> list[Case]:
    """The default sweep (or every op of the shape's rank on one given shape, with the
    rank's first window), in `dtype`, on inputs of `layout` ("nchw", or "nhwc":
    channels-last, NDHWC for the 3-D ops; the 1-D ops take theirs as they are)."""
    other_ranks = {5: (OPS_3D, SHAPE_3D), 3: (OPS_1D, SHAPE_1D)}

    def rank_cases(s: tuple[int, ...], window: dict[str, int]) -> list[Case]:
        lay = layout if len(s) == 5 else "nchw"
        adaptive = dict(output_size=ADAPTIVE_ND_OUTPUT)

        def params(op: str) -> dict[str, int]:
            if op.startswith("adaptive"):
                return dict(adaptive)
            return dict(UNPOOL_WINDOW if op.startswith("max_unpool") else window)

        return [Case(op, s, params(op), dtype, lay) for op in other_ranks[len(s)][0]
                if op in ops_wanted]  # fmt: skip

    if shape is not None and len(shape) in other_ranks:
        return rank_cases(tuple(shape), other_ranks[len(shape)][1][1])
    shapes: tuple[tuple[tuple[int, ...], dict[str, int]], ...] = (
        SHAPES if shape is None else ((tuple(shape), SHAPES[0][1]),)
    )
    if cpu and shape is None:
        shapes = tuple(((max(1, s[0] // 4), *s[1:]), w) for s, w in shapes)
    cases = []
    for i, (s, window) in enumerate(shapes):
        cases += [Case(op, s, dict(window), dtype, layout) for op in WINDOWED if op in ops_wanted]
        if i < 2 or shape is not None:
            cases += [
                Case(op, s, dict(output_size=o), dtype, layout)
                for o in ADAPTIVE_OUTPUTS
                for op in ADAPTIVE_AVG
                if op in ops_wanted
            ]
        if i == 0:
            cases += [Case(op, s, dict(UNPOOL_WINDOW), dtype, layout) for op in UNPOOL[2]
                      if op in ops_wanted]  # fmt: skip
    n, c, h, w = ADAPTIVE_MAX_CASE[0] if shape is None else shape
    if cpu and shape is None:
        n = max(1, n // 4)
    cases += [
        Case(op, (n, c, h, w), dict(output_size=ADAPTIVE_MAX_CASE[1]), dtype, layout)
        for op in ADAPTIVE_MAX
        if op in ops_wanted
    ]
    if shape is None:
        for _, (s, window) in other_ranks.values():
            cases += rank_cases((max(1, s[0] // 4), *s[1:]) if cpu else s, window)
    return cases


def stream_case(cpu: bool) -> Case:
    """The stream measurement: max_pool2d k3 s2 p1 on [32,64,112,112] (N / 4 on a CPU)."""
    shape, window = SHAPES[0]
    return Case("max_pool2d", (shape[0] // 4 if cpu else shape[0], *shape[1:]), dict(window))


def _median_us(samples: Iterable[float]) -> float:
    return statistics.median(samples) * 1e6


def _loop_seconds(call: Callable[[], object], finish: Callable[[], None], n: int) -> float:
    """Wall seconds of `n` calls back to back, the device drained before and after."""
    finish()
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    finish()
    return time.perf_counter() - t0


def wall_us(
    call: Callable[[], object], finish: Callable[[], None], loops: int, min_time: float = MIN_TIME
) -> tuple[float, int]:
    """Wall time (us) per call, back to back: the median over `loops` timed loops of n
    calls each (`finish` drains the device before and after a loop), with n chosen so
    that a loop runs at least `min_time` seconds (at most MAX_CALLS calls), after one
    untimed loop of n (clocks ramp up after light work); and n."""
    call()  # warm: the first call of a signature plans and builds
    n, seconds = 1, _loop_seconds(call, finish, 1)
    while seconds < min_time / 10 and n < MAX_CALLS:
        n = min(MAX_CALLS, n * 10)
        seconds = _loop_seconds(call, finish, n)
    n = max(1, min(MAX_CALLS, math.ceil(n * min_time / max(seconds, 1e-9))))
    _loop_seconds(call, finish, n)
    return _median_us(_loop_seconds(call, finish, n) / n for _ in range(loops)), n


_profiling_queues: dict[int, cl.CommandQueue] = {}


def profiling_queue(rt: Runtime) -> cl.CommandQueue:
    """A queue on `rt`'s context that records profiling times, made once: kernel times come
    from it, wall times from clpool's own queue, which records none (profiling costs
    NVIDIA's driver host time on every enqueue)."""
    key = rt.context.int_ptr
    if key not in _profiling_queues:
        profiling = cl.command_queue_properties.PROFILING_ENABLE
        _profiling_queues[key] = cl.CommandQueue(rt.context, properties=profiling)
    return _profiling_queues[key]


def _on(queue: cl.CommandQueue, args: Record) -> Record:
    """`args` with each device array a view on `queue` (an op runs on its input's queue)."""
    return {k: v.with_queue(queue) if isinstance(v, cla.Array) else v for k, v in args.items()}


def kernel_us(call: Callable[[], object], queue: cl.CommandQueue, calls: int) -> float:
    """Kernel time (us) per call, back to back, of a call that enqueues on `queue` (a
    profiling one), after one untimed call: the median over `calls` calls of the SUM of the
    profiling times (end - start) of every kernel the call launched (input copies and every
    step of its plans, a fallback plan's too), not their span: the device's busy time,
    without the gaps between kernels (such as unpooling's host read of its flag)."""
    call()  # warm: the queue's own plans and memory pool
    queue.finish()
    launched = []
    for _ in range(calls):
        with kernels.recording() as events:
            call()
        launched.append(events)
    queue.finish()
    return _median_us(sum(e.profile.end - e.profile.start for e in es) * 1e-9 for es in launched)


def copy_bandwidth(rt: Runtime, nbytes: int, repeats: int = 10) -> float:
    """Device-to-device copy bandwidth in GB/s, counting the read and the write."""
    src = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE, nbytes)
    dst = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE, nbytes)
    queue = profiling_queue(rt)
    cl.enqueue_fill_buffer(queue, src, np.float32(1), 0, nbytes)
    times = []
    for _ in range(repeats + 2):
        event = cl.enqueue_copy(queue, dst, src, byte_count=nbytes)
        event.wait()
        times.append((event.profile.end - event.profile.start) * 1e-9)
    return 2 * nbytes / statistics.median(times[2:]) / 1e9


def _out_hw(case: Case) -> tuple[int, ...]:
    """The output plane (or volume) of a case, by the formula the ops check with."""
    p = case.params
    if "output_size" in p:
        return (p["output_size"],) * (len(case.shape) - 2)
    k, s, pad = p["kernel_size"], p["stride"], p["padding"]
    return tuple(shapes.output_size(side, k, s, pad, 1, False) for side in case.shape[2:])


def _data(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Standard normal values in `dtype` (a name; bfloat16 is ml_dtypes')."""
    return rng.standard_normal(shape).astype(bfloat16.as_dtype(dtype))


def _tensor(a: np.ndarray) -> torch.Tensor:
    """Host array `a` as a CPU torch tensor (bfloat16 as torch.bfloat16)."""
    import torch

    return adopt.bfloat16_tensor(a) if bfloat16.is_bfloat16(a.dtype) else torch.from_numpy(a)


def _device_array(rt: Runtime, a: np.ndarray, layout: str) -> cla.Array:
    """`a` on the device, laid out NCHW or channels-last (`layout` "nhwc": NHWC, NDHWC)."""
    if layout == "nhwc":
        return launch.channels_last_array(rt.queue, a)
    return cla.to_device(rt.queue, a)


def _max_with_indices(x: cla.Array, case: Case) -> tuple[cla.Array, cla.Array]:
    """Max pooling of device array `x` with the case's window: values and int64 indices."""
    rank = len(case.shape) - 2
    if rank == 1:  # no max_pool1d_with_indices: return_indices, as torch's
        pair = clpool.max_pool1d(x, **case.params, return_indices=True)
    else:
        pair = getattr(clpool, f"max_pool{rank}d_with_indices")(x, **case.params)
    return cast(tuple[cla.Array, cla.Array], pair)


def _inputs(case: Case, rt: Runtime, seed: int = 0) -> tuple[Record, int]:
    """Device inputs of a case and the bytes the op must move (read once, write once)."""
    rng = np.random.default_rng(seed)
    out_shape = (*case.shape[:2], *_out_hw(case))
    x = _device_array(rt, _data(rng, case.shape, case.dtype), case.layout)
    grad = _device_array(rt, _data(rng, out_shape, case.dtype), case.layout)
    big, small = x.nbytes, grad.nbytes
    if case.op.startswith("max_pool") and case.op.endswith("_with_indices_backward"):
        indices = _max_with_indices(x, case)[1]
        return dict(grad_output=grad, input=x, indices=indices), small + indices.nbytes + big
    if case.op.startswith("max_unpool"):  # of the pooled values and indices, to x's size
        pooled, indices = _max_with_indices(x, case)
        found = dict(input=pooled, indices=indices, output_size=case.shape[2:])
        if case.op.endswith("_backward"):  # x as the gradient: one read per pooled value
            return dict(grad_output=x, **found), 2 * pooled.nbytes + indices.nbytes
        return found, pooled.nbytes + indices.nbytes + big
    if case.op.startswith("adaptive_max") and case.op.endswith("_backward"):
        forward = getattr(clpool, case.op.removesuffix("_backward"))
        pair = forward(x, **case.params, return_indices=True)
        indices = cast(tuple[cla.Array, cla.Array], pair)[1]
        return dict(grad_output=grad, input=x, indices=indices), small + indices.nbytes + big
    if case.op.endswith("backward"):
        return dict(grad_output=grad, input=x), small + big
    extra = 2 * small if case.op.endswith("_with_indices") else 0  # int64 indices
    return dict(input=x), big + small + extra


def time_clpool(case: Case, rt: Runtime, loops: int, min_time: float = MIN_TIME) -> Record:
    """clpool on one case with device-resident inputs: wall_us and kernel_us per call
    back to back, the calls in each timed loop, and the bytes the op moves."""
    inputs, nbytes = _inputs(case, rt)
    fn = getattr(clpool, case.op)
    adaptive_backward = case.op.startswith("adaptive") and case.op.endswith("backward")
    params = {} if adaptive_backward else case.params

    queue = profiling_queue(rt)
    profiled = _on(queue, inputs)
    wall, n = wall_us(lambda: fn(**inputs, **params), rt.queue.finish, loops, min_time)
    calls = max(loops, min(n, KERNEL_CALLS))
    kernel = kernel_us(lambda: fn(**profiled, **params), queue, calls)
    return dict(wall_us=wall, kernel_us=kernel, calls=n, bytes=nbytes)


def _torch_call(case: Case, t: Record) -> Callable[[], object]:
    import torch
    import torch.nn.functional as F  # noqa: N812

    p, aten = case.params, torch.ops.aten
    dims = len(case.shape) - 2
    if dims == 1 and case.op.endswith("_backward") and not case.op.startswith("max_unpool"):
        # torch's 1-D ops run its 2-D ones on rows of one, and so do their backward ops
        rows = {key: v.unsqueeze(-2) for key, v in t.items()}
        params = {key: (0 if key == "padding" else 1, v) for key, v in p.items()}
        shape = (*case.shape[:2], 1, case.shape[2])
        return _torch_call(Case(case.op.replace("1d", "2d"), shape, params), rows)

    def axes(key: str) -> list[int]:
        v = p[key]
        return list(v) if isinstance(v, tuple) else [v] * dims

    if case.op.startswith("adaptive_max"):
        o = axes("output_size")
        if case.op.endswith("backward"):
            back = getattr(aten, f"adaptive_max_pool{dims}d_backward")
            return lambda: back(t["grad_output"], t["x"], t["indices"])
        return lambda: getattr(F, f"adaptive_max_pool{dims}d")(t["x"], o)
    if "output_size" in p:
        o = axes("output_size")
        if case.op.endswith("backward"):
            back = getattr(aten, f"_adaptive_avg_pool{dims}d_backward")
            return lambda: back(t["grad_output"], t["x"])
        return lambda: getattr(F, f"adaptive_avg_pool{dims}d")(t["x"], o)
    k, s, pad = axes("kernel_size"), axes("stride"), axes("padding")
    if case.op.startswith("max_unpool"):
        if case.op.endswith("_backward"):  # autograd's: the gradient at each index
            return lambda: t["x"].flatten(2).gather(2, t["indices"].flatten(2))
        unpool, size = getattr(F, f"max_unpool{dims}d"), list(case.shape[2:])
        return lambda: unpool(t["pooled"], t["indices"], k, s, pad, size)
    return {
        "max_pool1d": lambda: F.max_pool1d(t["x"], k, s, pad),
        "avg_pool1d": lambda: F.avg_pool1d(t["x"], k, s, pad),
        "max_pool3d": lambda: F.max_pool3d(t["x"], k, s, pad),
        "max_pool3d_with_indices": lambda: F.max_pool3d(t["x"], k, s, pad, return_indices=True),
        "max_pool3d_with_indices_backward": lambda: aten.max_pool3d_with_indices_backward(
            t["grad_output"], t["x"], k, s, pad, [1] * 3, False, t["indices"]
        ),
        "avg_pool3d": lambda: F.avg_pool3d(t["x"], k, s, pad),
        "avg_pool3d_backward": lambda: aten.avg_pool3d_backward(
            t["grad_output"], t["x"], k, s, pad, False, True, None
        ),
        "max_pool2d": lambda: F.max_pool2d(t["x"], k, s, pad),
        "max_pool2d_with_indices": lambda: F.max_pool2d(t["x"], k, s, pad, return_indices=True),
        "max_pool2d_with_indices_backward": lambda: aten.max_pool2d_with_indices_backward(
            t["grad_output"], t["x"], k, s, pad, [1, 1], False, t["indices"]
        ),
        "avg_pool2d": lambda: F.avg_pool2d(t["x"], k, s, pad),
        "avg_pool2d_backward": lambda: aten.avg_pool2d_backward(
            t["grad_output"], t["x"], k, s, pad, False, True, None
        ),
    }[case.op]


def torch_device(rt: Runtime) -> str | None:
    """Where PyTorch runs beside the OpenCL device: CUDA beside an NVIDIA GPU, else CPU;
    None without torch."""
    try:
        import torch
    except ImportError:
        return None
    nvidia = "nvidia" in rt.device.vendor.lower() and rt.device.type & cl.device_type.GPU
    return "cuda" if nvidia and torch.cuda.is_available() else "cpu"


def time_torch(case: Case, where: str, loops: int, min_time: float = MIN_TIME) -> float:
    """PyTorch's wall time (us) per call of the same op, timed as wall_us times clpool:
    back to back, torch.cuda.synchronize() before and after each loop on CUDA."""
    import torch

    rng = np.random.default_rng(0)
    out_shape = (*case.shape[:2], *_out_hw(case))
    layout = torch.contiguous_format
    if case.layout == "nhwc":
        layout = torch.channels_last_3d if len(case.shape) == 5 else torch.channels_last
    x = _tensor(_data(rng, case.shape, case.dtype)).to(where)
    grad = _tensor(_data(rng, out_shape, case.dtype)).to(where)
    x, grad = x.contiguous(memory_format=layout), grad.contiguous(memory_format=layout)
    t = dict(x=x, grad_output=grad)
    if case.op.endswith("_with_indices_backward") or case.op.startswith("max_unpool"):
        p = case.params  # max pooling's values and indices, as _max_with_indices's
        pool = getattr(torch.nn.functional, f"max_pool{len(case.shape) - 2}d")
        t["pooled"], t["indices"] = pool(
            x, p["kernel_size"], p["stride"], p["padding"], return_indices=True
        )
    if case.op.startswith("adaptive_max") and case.op.endswith("_backward"):
        forward = getattr(torch.nn.functional, case.op.removesuffix("_backward"))
        t["indices"] = forward(x, case.params["output_size"], return_indices=True)[1]
    finish = torch.cuda.synchronize if where == "cuda" else lambda: None
    return wall_us(_torch_call(case, t), finish, loops, min_time)[0]


def host_overhead_us(rt: Runtime, loops: int, min_time: float = MIN_TIME) -> Record:
    """Per warm call on a tiny (1,1,4,4) device array, wall time back to back (us):
    clpool's max_pool2d k2, PyOpenCL's own `x * 2` on the same array and queue, and the
    bare enqueue of an empty kernel; clpool's kernel time; clpool / (x * 2); and clpool's
    max_pool2d k2 of a channels-last (1,4,4,4) array (its view's offset is an argument)."""
    x = cla.to_device(rt.queue, np.ones((1, 1, 4, 4), np.float32))
    last_shape = [1, 4, 4, 4]
    last = launch.channels_last_array(rt.queue, np.ones(last_shape, np.float32))
    finish = rt.queue.finish

    def pool() -> object:
        return ops.max_pool2d(x, 2)

    wall, _ = wall_us(pool, finish, loops, min_time)
    last_wall, _ = wall_us(lambda: ops.max_pool2d(last, 2), finish, loops, min_time)
    profiled = x.with_queue(profiling_queue(rt))
    kernel = kernel_us(lambda: ops.max_pool2d(profiled, 2), profiled.queue, KERNEL_CALLS)
    mul, _ = wall_us(lambda: x * 2, finish, loops, min_time)
    program = cl.Program(rt.context, "__kernel void empty(__global float *a) {}").build()
    empty = cl.Kernel(program, "empty")
    # pyopencl's stub takes a Buffer, not the MemoryObjectHolder an Array's data is
    empty.set_arg(0, x.data)  # type: ignore[arg-type]
    bare, _ = wall_us(
        lambda: cl.enqueue_nd_range_kernel(rt.queue, empty, (1,), None), finish, loops, min_time
    )
    return dict(
        shape=[1, 1, 4, 4],
        wall_us=wall,
        kernel_us=kernel,
        pyopencl_mul_us=mul,
        bare_enqueue_us=bare,
        ratio_to_mul=wall / mul,
        channels_last_shape=last_shape,
        channels_last_wall_us=last_wall,
    )


def stream(rt: Runtime, cpu: bool, loops: int, min_time: float = MIN_TIME) -> Record:
    """The stream of stream_case() back to back: wall and kernel time per call (us) and
    wall / kernel (the target: at most 1.15 on a GPU)."""
    case = stream_case(cpu)
    t = time_clpool(case, rt, loops, min_time)
    return dict(
        op=case.op,
        shape=list(case.shape),
        params=case.label,
        wall_us=t["wall_us"],
        kernel_us=t["kernel_us"],
        calls=t["calls"],
        wall_over_kernel=t["wall_us"] / t["kernel_us"],
    )


def _torch_setup(rt: Runtime, with_torch: bool) -> tuple[str | None, int | None]:
    """Where PyTorch runs (None: not timed) and, on a CPU, its threads: as many as the
    OpenCL device has compute units."""
    where = torch_device(rt) if with_torch else None
    if where is None:
        return None, None
    import torch

    torch.backends.cudnn.benchmark = True
    if where == "cuda":
        return where, None
    torch.set_num_threads(rt.device.max_compute_units)
    return where, torch.get_num_threads()


def run(
    rt: Runtime,
    cases: Iterable[Case],
    loops: int,
    copy_gbps: float,
    with_torch: bool = True,
    min_time: float = MIN_TIME,
) -> Iterator[Record]:
    """Time every case; yields one row per case (times in us per call)."""
    where, threads = _torch_setup(rt, with_torch)
    for case in cases:
        t = time_clpool(case, rt, loops, min_time)
        nbytes = t["bytes"]
        row: Record = dict(op=case.op, shape=list(case.shape), params=case.label, args=case.params)
        row.update(dtype=case.dtype, layout=case.layout, **t)
        row["wall_gbps"] = nbytes / t["wall_us"] / 1e3
        row["kernel_gbps"] = nbytes / t["kernel_us"] / 1e3
        row["kernel_fraction"] = row["kernel_gbps"] / copy_gbps
        torch_us = _torch_us(case, where, loops, min_time) if where is not None else None
        if torch_us is not None:
            row["torch"] = where
            if threads is not None:
                row["torch_threads"] = threads
            row["torch_wall_us"] = torch_us
            row["torch_wall_gbps"] = nbytes / row["torch_wall_us"] / 1e3
            row["speedup"] = row["torch_wall_us"] / t["wall_us"]
        yield row


def _torch_us(case: Case, where: str, loops: int, min_time: float) -> float | None:
    """time_torch, or None where PyTorch has no kernel of the op in its dtype there (on a
    CPU, bfloat16 avg_pool3d): the row goes without PyTorch's columns."""
    try:
        return time_torch(case, where, loops, min_time)
    except NotImplementedError:
        return None


def versions(rt: Runtime, with_torch: bool) -> dict[str, str]:
    """The versions a run's numbers depend on: clpool, PyOpenCL, the OpenCL driver and
    platform, and PyTorch where it is timed."""
    found = dict(
        clpool=__version__,
        pyopencl=cl.VERSION_TEXT,
        driver=rt.device.driver_version.strip(),
        platform=rt.device.platform.version.strip(),
    )
    if with_torch and torch_device(rt) is not None:
        import torch

        found["torch"] = torch.__version__
    return found


def report(
    rt: Runtime,
    cases: list[Case],
    loops: int = 5,
    with_torch: bool = True,
    min_time: float = MIN_TIME,
    progress: Callable[[str], None] | None = None,
) -> Record:
    """The whole benchmark of one run: the device, copy bandwidth, the stream, one row per
    case and the host cost, measured in that order (the device busy from the copy on);
    `progress` is told the name of each step ("stream", one per case, "host") as it ends."""
    tell = progress or (lambda _: None)
    cpu = not rt.device.type & cl.device_type.GPU
    largest = max((4 * math.prod(c.shape) for c in cases), default=0)
    copy = copy_bandwidth(rt, max(2**26, largest))
    stream(rt, cpu, 1, min_time)  # thrown away: the first seconds of a process run slow
    streamed = stream(rt, cpu, loops, min_time)
    tell("stream")
    rows = []
    for row in run(rt, cases, loops, copy, with_torch, min_time):
        rows.append(row)
        tell(f"{row['op']} {'x'.join(map(str, row['shape']))} {row['params']}")
    host = host_overhead_us(rt, loops, min_time)
    tell("host")
    return dict(
        device=rt.device.name.strip(),
        platform=rt.device.platform.name.strip(),
        date=time.strftime("%Y-%m-%d"),
        versions=versions(rt, with_torch),
        torch_device=torch_device(rt) if with_torch else None,
        copy_gbps=copy,
        loops=loops,
        min_time_s=min_time,
        host=host,
        stream=streamed,
        rows=rows,
    )
