"""Fixed-seed random pooling cases, shared by the reference, forward and backward tests."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest

from clpool import PoolArgumentError, check, discovery, launch
from clpool import reference as ref


@dataclass
class Case:
    """One pooling call: input shape and the op's arguments after the input."""

    shape: tuple[int, ...]
    kernel_size: object
    stride: object
    padding: object
    dilation: object = 1
    ceil_mode: bool = False
    avg: dict = field(default_factory=dict)  # count_include_pad, divisor_override

    @property
    def max_args(self) -> tuple:
        return (self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)

    @property
    def avg_args(self) -> tuple:
        return (
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.avg.get("count_include_pad", True),
            self.avg.get("divisor_override"),
        )

    def __str__(self) -> str:
        return (
            f"shape={self.shape} k={self.kernel_size} s={self.stride} p={self.padding} "
            f"d={self.dilation} ceil={self.ceil_mode} {self.avg}"
        )


def _form(rng: np.random.Generator, pair: tuple[int, int]) -> object:
    """A pair as an int, a tuple or a list, as users write them."""
    if pair[0] == pair[1] and rng.random() < 0.5:
        return pair[0]
    return list(pair) if rng.random() < 0.2 else pair


def _window_shape(rng: np.random.Generator, family: str) -> tuple[tuple, tuple, tuple]:
    """Random (kernel, stride, dilation); now and then a kernel too big to be specialised."""
    big = rng.random() < 0.1
    k = tuple(int(v) for v in rng.integers(9, 11, 2) if big) or tuple(
        int(v) for v in rng.integers(1, 5, 2)
    )
    d = tuple(int(v) for v in rng.integers(1, 4, 2)) if family == "max" and not big else (1, 1)
    s = tuple(int(v) for v in rng.integers(1, 5, 2))
    if rng.random() < 0.4:  # overlapping windows are the interesting ones for backward
        s = tuple(int(rng.integers(1, kk + 1)) for kk in k)
    return k, s, d


def window_cases(
    seed: int,
    count: int,
    *,
    family: str,
    torch_rule: bool = False,
    max_hw: int = 12,
    batch: tuple[int, ...] = (2, 3),
    windows: int = 8,
) -> list[Case]:
    """`count` random valid cases of the "max" or "avg" family over `windows` random
    (kernel, stride, dilation) triples: clpool builds a program per small window, so the
    number of triples, not of cases, sets the build time.

    Padding follows the contract: p <= ((k-1)*d+1)//2 for max and p <= k//2 for avg;
    with torch_rule it is p <= k//2 for both, as torch 2.x checks."""
    rng = np.random.default_rng(seed)
    triples = [_window_shape(rng, family) for _ in range(windows)]
    cases: list[Case] = []
    while len(cases) < count:
        k, s, d = triples[int(rng.integers(len(triples)))]
        limits = [
            kk // 2 if torch_rule or family == "avg" else ((kk - 1) * dd + 1) // 2
            for kk, dd in zip(k, d, strict=True)
        ]
        p = tuple(int(rng.integers(0, lim + 1)) for lim in limits)
        ceil = bool(rng.integers(2))
        hw = tuple(int(v) for v in rng.integers(1, max(max_hw, *k) + 1, 2))
        if any(ref.pooled_size(hw[a], k[a], s[a], p[a], d[a], ceil) < 1 for a in range(2)):
            continue
        lead = tuple(int(rng.integers(1, b + 1)) for b in batch)
        if rng.random() < 0.15:
            lead = lead[1:]  # unbatched (C, H, W)
        stride = None if s == k and rng.random() < 0.5 else _form(rng, s)
        avg = {}
        if family == "avg":
            avg["count_include_pad"] = bool(rng.integers(2))
            if rng.random() < 0.3:
                avg["divisor_override"] = int(rng.choice([-3, 1, 2, 5, 7]))
        cases.append(
            Case(lead + hw, _form(rng, k), stride, _form(rng, p), _form(rng, d), ceil, avg)
        )
    return cases


def adaptive_cases(seed: int, count: int, max_hw: int = 12) -> list[tuple[tuple, object]]:
    """(input shape, output_size) pairs: down- and upsampling, None entries, 1x1."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        shape = (
            int(rng.integers(1, 3)),
            int(rng.integers(1, 4)),
            int(rng.integers(1, max_hw + 1)),
            int(rng.integers(1, max_hw + 1)),
        )
        if rng.random() < 0.15:
            shape = shape[1:]
        size: object = tuple(int(v) for v in rng.integers(1, max_hw + 2, 2))
        roll = rng.random()
        if roll < 0.1:
            size = 1
        elif roll < 0.2:
            size = (None, size[1])
        out.append((shape, size))
    return out


def data(
    rng: np.random.Generator, shape: tuple[int, ...], dtype=np.float32, special: bool = False
) -> np.ndarray:
    """Random input; with `special`, often small integers (ties) and some NaN and -inf."""
    if special and rng.random() < 0.5:
        x = rng.integers(-2, 3, shape).astype(np.float64)
    else:
        x = rng.standard_normal(shape)
    if special:
        x[rng.random(shape) < 0.04] = np.nan
        x[rng.random(shape) < 0.04] = -np.inf
    return x.astype(dtype)


def scrambled(idx: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """idx with some indices swapped for any element of a plane or volume of `size` (in or
    out of their window, often one that other windows name too) and some for none (-1, -7,
    one past the end, far past it; int64: 2^32 past an element, whose low 32 bits name
    it)."""
    bad = idx.copy().reshape(-1)
    picks = rng.random(bad.size)
    anywhere, outside = picks < 0.3, picks > 0.9
    bad[anywhere] = rng.integers(0, size, int(anywhere.sum()))
    past = [-1, -7, size, size + 1000] + ([2**32 + size // 2] if bad.dtype == np.int64 else [])
    bad[outside] = rng.choice(past, int(outside.sum()))
    return bad.reshape(idx.shape)


def wrapped(idx: np.ndarray, size: tuple[int, ...], k, s, p, d, rng: np.random.Generator):
    """idx (of windows (k, s, p, d) over planes or volumes of `size`, 2 or 3 axes) with each
    index swapped, where the window has one, for an element just outside it whose flat
    offset is next to its span's: the last of the row before its first row or the first of
    the row after its last (in one of its depths), the last of the depth before its first
    or the first of the depth after its last. A check of a flat offset that drops an axis
    takes them for the window's."""
    pad, n = 3 - len(size), len(size)
    size = (1,) * pad + tuple(size)
    k, s, d = ((1,) * pad + _axes(v, n) for v in (k, s, d))
    p = (0,) * pad + _axes(p, n)
    bad = idx.copy()
    for at in np.ndindex(*idx.shape):
        out = at[:2] + (0,) * pad + at[2:]  # (n, c, od, oh, ow)
        z0, y0 = (out[2 + a] * s[a] - p[a] for a in (0, 1))
        span_d, span_h = ((k[a] - 1) * d[a] + 1 for a in (0, 1))
        z = max(z0, 0)
        near = [(z, y0 - 1, size[2] - 1), (z, y0 + span_h, 0), (z0 - 1, size[1] - 1, size[2] - 1),
                (z0 + span_d, 0, 0)]  # fmt: skip
        near = [n for n in near if all(0 <= v < size[a] for a, v in enumerate(n))]
        if near:
            zz, yy, xx = near[rng.integers(len(near))]
            bad[at] = (zz * size[1] + yy) * size[2] + xx
    return bad


def _axes(v, n: int) -> tuple[int, ...]:
    return tuple(v) if isinstance(v, tuple) else (v,) * n


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shape, dtype and bytes (NaN payloads included)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def assert_close(got, want, rtol: float = 1e-5, context: object = "") -> None:
    """|got - want| <= rtol * max(|want|, 1) elementwise: clpool.check's measure."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape} {context}"
    err = check.error(got, want)
    assert err <= rtol, f"error {err} > {rtol} {context}"


def default_queue() -> cl.CommandQueue:
    """The queue of the device clpool chooses (CLPOOL_DEVICE's)."""
    return discovery.runtime(discovery.select()).queue


def results(got) -> list:
    """An op's result, or its results, as a list."""
    return list(got) if isinstance(got, (tuple, list)) else [got]


def check_result(got, want, exact: bool, rtol: float = 1e-5) -> None:
    """clpool's result `got` (a device Array, a numpy array or a torch tensor) equals
    torch's tensor `want`: values (bit for bit where `exact`, as max pooling's and indices
    are; else within `rtol`), dtype and element strides."""
    if isinstance(got, cla.Array):
        strides = tuple(s // got.dtype.itemsize for s in got.strides)
        got = launch.to_host(got)
    elif isinstance(got, np.ndarray):
        strides = tuple(s // got.dtype.itemsize for s in got.strides)
    else:
        strides, got = got.stride(), got.numpy()
    assert strides == want.stride(), (strides, want.stride())
    if exact:
        assert same_bits(np.ascontiguousarray(got), np.ascontiguousarray(want.numpy()))
    else:
        assert_close(got, want.numpy(), rtol)


def message_re(label: str, device: cl.Device, dtype: str) -> str:
    return (
        rf"^{re.escape(label)} kernel failed \(device={re.escape(device.name.strip())}, "
        rf"dtype={dtype}\): \S"
    )


def check_error(info: pytest.ExceptionInfo, label: str, device: cl.Device, dtype: str) -> None:
    """The one-handler contract: message format and the exception's attributes."""
    e = info.value
    assert re.match(message_re(label, device, dtype), str(e)), str(e)
    assert (e.label, e.device, e.dtype) == (label, device.name.strip(), dtype)
    assert e.reason and str(e).endswith(e.reason)


def check_argument_error(call, label: str, device: cl.Device) -> None:
    """`call` raises a PoolArgumentError (a ValueError) in the one-handler format."""
    with pytest.raises(PoolArgumentError) as info:
        call()
    assert isinstance(info.value, ValueError)
    check_error(info, label, device, "float32")


def in_threads(work: Callable[[int], object], n: int = 8, timeout: float = 300) -> None:
    """Run work(0) .. work(n - 1) in n threads at once; fails with the first exception one
    of them raised."""
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            work(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not errors, errors[0]


def kernel_waits(gate: cl.UserEvent, kernel: cl.Event, queue: cl.CommandQueue) -> None:
    """Kernel `kernel` has not run while `gate` is open, then `gate` is set."""
    try:
        assert kernel.command_type == cl.command_type.NDRANGE_KERNEL
        queue.flush()
        time.sleep(0.3)  # ample for the kernel to run, had it not waited for the gate
        assert kernel.command_execution_status != cl.command_execution_status.COMPLETE
    finally:
        gate.set_status(cl.command_execution_status.COMPLETE)


_contexts: list[cl.Context] = []


def fresh_queue(device: cl.Device, **kwargs) -> cl.CommandQueue:
    """A queue on a new context of its own. The context is kept for the session: Intel's
    CPU runtime frees a context when its last Python reference goes, though a queue on it
    holds it (the queue's context is then INVALID_CONTEXT)."""
    _contexts.append(cl.Context([device]))
    return cl.CommandQueue(_contexts[-1], **kwargs)
