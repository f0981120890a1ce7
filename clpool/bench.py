"""Benchmark harness behind `clpool bench`: device time of each op from OpenCL profiling
events, bytes moved, GB/s, the fraction of the device's own copy bandwidth, and PyTorch on
the same machine beside it when torch is importable."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from . import ops
from .discovery import Runtime

OPS = (
    "max_pool2d",
    "max_pool2d_with_indices",
    "max_pool2d_with_indices_backward",
    "avg_pool2d",
    "avg_pool2d_backward",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool2d_backward",
)
WINDOWED = OPS[:5]
# (shape, window) of the default sweep: f32 NCHW, sizes for a GPU; a CPU gets N / 4.
SHAPES = (
    ((32, 64, 112, 112), dict(kernel_size=3, stride=2, padding=1)),
    ((64, 256, 56, 56), dict(kernel_size=2, stride=2, padding=0)),
    ((128, 64, 128, 128), dict(kernel_size=3, stride=1, padding=1)),
)
ADAPTIVE_OUTPUTS = (7, 1)


@dataclass
class Case:
    """One op on one input shape with its parameters."""

    op: str
    shape: tuple[int, int, int, int]
    params: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        p = self.params
        if "output_size" in p:
            return f"out {p['output_size']}"
        return f"k{p['kernel_size']} s{p['stride']} p{p['padding']}"


def default_cases(
    cpu: bool, ops_wanted: tuple[str, ...] = OPS, shape: tuple[int, ...] | None = None
) -> list[Case]:
    """The default sweep (or every op on one given shape with k3 s2 p1)."""
    shapes = SHAPES if shape is None else ((tuple(shape), SHAPES[0][1]),)
    if cpu and shape is None:
        shapes = tuple(((max(1, s[0] // 4), *s[1:]), w) for s, w in shapes)
    cases = []
    for i, (s, window) in enumerate(shapes):
        cases += [Case(op, s, dict(window)) for op in WINDOWED if op in ops_wanted]
        if i < 2 or shape is not None:
            cases += [
                Case(op, s, dict(output_size=o))
                for o in ADAPTIVE_OUTPUTS
                for op in OPS[5:]
                if op in ops_wanted
            ]
    return cases


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def device_seconds(events: list[cl.Event]) -> float:
    """Time from the first kernel's start to the last one's end, from profiling events."""
    cl.wait_for_events(events)
    return (events[-1].profile.end - events[0].profile.start) * 1e-9


def copy_bandwidth(rt: Runtime, nbytes: int, repeats: int = 10) -> float:
    """Device-to-device copy bandwidth in GB/s, counting the read and the write."""
    src = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE, nbytes)
    dst = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE, nbytes)
    cl.enqueue_fill_buffer(rt.queue, src, np.float32(1), 0, nbytes)
    times = []
    for _ in range(repeats + 2):
        event = cl.enqueue_copy(rt.queue, dst, src, byte_count=nbytes)
        event.wait()
        times.append((event.profile.end - event.profile.start) * 1e-9)
    return 2 * nbytes / statistics.median(times[2:]) / 1e9


def _out_hw(case: Case) -> tuple[int, int]:
    n, c, h, w = case.shape
    p = case.params
    if "output_size" in p:
        return p["output_size"], p["output_size"]
    k, s, pad = p["kernel_size"], p["stride"], p["padding"]
    return (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1


def _inputs(case: Case, rt: Runtime, seed: int = 0) -> tuple[dict, int]:
    """Device inputs of a case and the bytes the op must move (read once, write once)."""
    rng = np.random.default_rng(seed)
    n, c, h, w = case.shape
    oh, ow = _out_hw(case)
    x = cla.to_device(rt.queue, rng.standard_normal(case.shape, dtype=np.float32))
    grad = cla.to_device(rt.queue, rng.standard_normal((n, c, oh, ow), dtype=np.float32))
    big, small = x.nbytes, grad.nbytes
    if case.op == "max_pool2d_with_indices_backward":
        _, indices = ops.max_pool2d_with_indices(x, **case.params)
        return dict(grad_output=grad, x=x, indices=indices), small + indices.nbytes + big
    if case.op.endswith("backward"):
        return dict(grad_output=grad, x=x), small + big
    extra = 2 * small if case.op == "max_pool2d_with_indices" else 0
    return dict(x=x), big + small + extra


def time_clpool(case: Case, rt: Runtime, repeats: int) -> tuple[float, int]:
    """Median device time (us) of one call of the op, and the bytes it moves."""
    inputs, nbytes = _inputs(case, rt)
    fn = getattr(ops, case.op)
    params = {} if case.op == "adaptive_avg_pool2d_backward" else case.params
    samples = []
    for i in range(repeats + 3):
        with ops.recording() as events:
            fn(**inputs, **params)
        if i >= 3:
            samples.append(device_seconds(events))
    return _median_us(samples), nbytes


def _torch_call(case: Case, t: dict) -> Callable[[], object]:
    import torch
    import torch.nn.functional as F  # noqa: N812

    p, aten = case.params, torch.ops.aten
    if "output_size" in p:
        o = [p["output_size"]] * 2
        if case.op.endswith("backward"):
            return lambda: aten._adaptive_avg_pool2d_backward(t["grad_output"], t["x"])
        return lambda: F.adaptive_avg_pool2d(t["x"], o)
    k, s, pad = [p["kernel_size"]] * 2, [p["stride"]] * 2, [p["padding"]] * 2
    return {
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


def time_torch(case: Case, where: str, repeats: int) -> float:
    """Median time (us) of the same op in PyTorch: CUDA events on a GPU, wall clock on CPU."""
    import torch

    rng = np.random.default_rng(0)
    n, c, _, _ = case.shape
    oh, ow = _out_hw(case)
    x = torch.from_numpy(rng.standard_normal(case.shape, dtype=np.float32)).to(where)
    grad = torch.from_numpy(rng.standard_normal((n, c, oh, ow), dtype=np.float32)).to(where)
    t = dict(x=x, grad_output=grad)
    if case.op == "max_pool2d_with_indices_backward":
        p = case.params
        t["indices"] = torch.nn.functional.max_pool2d(
            x, p["kernel_size"], p["stride"], p["padding"], return_indices=True
        )[1]
    call = _torch_call(case, t)
    samples = []
    for i in range(repeats + 3):
        if where == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            torch.cuda.synchronize()
            seconds = start.elapsed_time(end) * 1e-3
        else:
            t0 = time.perf_counter()
            call()
            seconds = time.perf_counter() - t0
        if i >= 3:
            samples.append(seconds)
    return _median_us(samples)


def host_overhead_us(rt: Runtime, calls: int = 2000) -> dict[str, float]:
    """Per warm call on a tiny device-resident array (us): clpool's wall time, the kernel's
    device time, and the wall time of enqueueing an empty kernel with PyOpenCL alone (the
    driver's share: the rest is clpool's Python)."""
    x = cla.to_device(rt.queue, np.ones((1, 1, 4, 4), np.float32))
    ops.max_pool2d(x, 2)
    rt.queue.finish()
    t0 = time.perf_counter()
    with ops.recording() as events:
        for _ in range(calls):
            ops.max_pool2d(x, 2)
        rt.queue.finish()
    wall = (time.perf_counter() - t0) / calls
    kernel = statistics.median((e.profile.end - e.profile.start) * 1e-9 for e in events)
    empty = cl.Program(rt.context, "__kernel void empty(__global float *a) {}").build()
    empty = cl.Kernel(empty, "empty")
    empty(rt.queue, (1,), None, x.data)
    rt.queue.finish()
    t0 = time.perf_counter()
    for _ in range(calls):
        empty(rt.queue, (1,), None, x.data)
    rt.queue.finish()
    bare = (time.perf_counter() - t0) / calls
    return dict(
        host_call_us=wall * 1e6, host_call_kernel_us=kernel * 1e6, bare_enqueue_us=bare * 1e6
    )


def run(
    rt: Runtime, cases: Iterable[Case], repeats: int, with_torch: bool = True
) -> Iterator[dict]:
    """Time every case; yields one result row per case. PyTorch on a CPU runs as many
    threads as the OpenCL device has compute units."""
    where = torch_device(rt) if with_torch else None
    if where is not None:
        import torch

        torch.backends.cudnn.benchmark = True
        if where == "cpu":
            torch.set_num_threads(rt.device.max_compute_units)
    for case in cases:
        us, nbytes = time_clpool(case, rt, repeats)
        row = dict(
            op=case.op,
            shape=list(case.shape),
            params=case.label,
            us=us,
            bytes=nbytes,
            gbps=nbytes / us / 1e3,
        )
        if where is not None:
            row["torch"] = where
            if where == "cpu":
                row["torch_threads"] = torch.get_num_threads()
            row["torch_us"] = time_torch(case, where, repeats)
            row["speedup"] = row["torch_us"] / us
        yield row
