"""Each kernel's signature, declared once, and launches bound to it: a kernel instance of
its own with its scalar arguments set and typed when planned, and its buffers set at each
call."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import SupportsInt, TypeAlias

import numpy as np
import pyopencl as cl

from .errors import PoolArgumentError, Problem

GLOBAL, LOCAL, INT, LONG = "global", "local", "int", "long"
# What a call slot holds: a buffer, or the element offset of a view into one.
Slot: TypeAlias = cl.MemoryObjectHolder | cl.SVMPointer | np.int64 | None


def _ints(*names: str) -> tuple[tuple[str, str], ...]:
    return tuple((name, INT) for name in names)


# The argument lists of kernels_cl/*.cl, in order (tests/test_plans.py reads the .cl
# files and holds the two to each other). A kernel and its `_plane` twin take the same
# (but adaptive_avg_pool3d_backward_plane, which reads grad_out through its strides, and
# adaptive_max_pool_backward and avg_pool3d_backward, whose twins read theirs
# C-contiguous).
_MAX_SIZES = _ints("H", "W", "OH", "OW", "kh", "kw", "sh", "sw", "ph", "pw", "dh", "dw")
_AVG_SIZES = _ints(
    "H", "W", "OH", "OW", "kh", "kw", "sh", "sw", "ph", "pw", "count_include_pad",
    "divisor_override",
)  # fmt: skip
_ADAPTIVE_SIZES = _ints("H", "W", "OH", "OW")
# unpool.cl: flat input and output planes, and each array's view of them
_UNPOOL_SIZES = (
    ("IP", LONG), ("OP", LONG), ("C", INT),
    *((f"{view}_{axis}", LONG) for view in ("in", "idx", "out") for axis in ("sn", "sc", "step")),
)  # fmt: skip
# unpool.cl's fast paths: values and indices in, the output and the queue's flag
_UNPOOL_BUFFERS = (("x", GLOBAL), ("indices", GLOBAL), ("out", GLOBAL), ("flag", GLOBAL))
_UNPOOL_WINDOW_SIZES = _ints(
    "ID", "IH", "IW", "OD", "OH", "OW", "kd", "kh", "kw", "sd", "sh", "sw", "pd", "ph", "pw"
)  # unpool.cl: the window gather's axes
_ADAPTIVE_MAX_SIZES = _ints("D", "H", "W", "OD", "OH", "OW")
_CONTIGUOUS = (
    ("in", GLOBAL), ("out", GLOBAL), ("offset", LONG), *_ints("C", "D", "H", "W"),
    ("sn", LONG), ("sc", LONG), ("sd", LONG), ("sh", LONG), ("sw", LONG),
)  # fmt: skip
_SIGNATURES: dict[str, tuple[tuple[str, str], ...]] = {
    "max_pool2d_forward": (("x", GLOBAL), ("out", GLOBAL), ("indices", GLOBAL), *_MAX_SIZES),
    "max_pool2d_backward": (
        ("grad_out", GLOBAL),
        ("indices", GLOBAL),
        ("grad_x", GLOBAL),
        *_MAX_SIZES,
    ),  # fmt: skip
    "avg_pool2d_forward": (("x", GLOBAL), ("out", GLOBAL), *_AVG_SIZES),
    "avg_pool2d_backward": (("grad_out", GLOBAL), ("grad_x", GLOBAL), *_AVG_SIZES),
    "adaptive_avg_pool2d_forward": (("x", GLOBAL), ("out", GLOBAL), *_ADAPTIVE_SIZES),
    "adaptive_avg_pool2d_band": (
        ("x", GLOBAL),
        ("out", GLOBAL),
        *_ADAPTIVE_SIZES,
        ("colsum", LOCAL),
    ),  # fmt: skip
    "adaptive_avg_pool2d_backward": (("grad_out", GLOBAL), ("grad_x", GLOBAL), *_ADAPTIVE_SIZES),
    "adaptive_avg_pool2d_global": (
        ("x", GLOBAL),
        ("out", GLOBAL),
        ("HW", LONG),
        ("OW", INT),
        ("scratch", LOCAL),
    ),
    "adaptive_avg_pool2d_plane": (("x", GLOBAL), ("out", GLOBAL), ("HW", LONG)),
    "adaptive_avg_pool2d_global_backward": (
        ("grad_out", GLOBAL),
        ("grad_x", GLOBAL),
        *_ints("W", "OW"),
    ),
    "max_unpool_window": (*_UNPOOL_BUFFERS, *_UNPOOL_SIZES, *_UNPOOL_WINDOW_SIZES),
    "max_unpool_tile": (
        *_UNPOOL_BUFFERS,
        *_UNPOOL_SIZES,
        *_ints("ID", "IH", "IW", "OD", "OH", "OW"),
    ),
    "max_unpool_tile_rows": (*_UNPOOL_BUFFERS, *_UNPOOL_SIZES, *_ints("IH", "IW", "OH", "OW")),
    "max_unpool_plane": (*_UNPOOL_BUFFERS, *_UNPOOL_SIZES),
    "max_unpool_clear": (("out", GLOBAL), ("owner", GLOBAL), ("flag", GLOBAL), *_UNPOOL_SIZES),
    "max_unpool_claim": (("indices", GLOBAL), ("owner", GLOBAL), ("flag", GLOBAL), *_UNPOOL_SIZES),
    "max_unpool_scatter": (
        ("x", GLOBAL),
        ("indices", GLOBAL),
        ("owner", GLOBAL),
        ("out", GLOBAL),
        *_UNPOOL_SIZES,
    ),
    "max_unpool_gather": (
        ("grad_out", GLOBAL),
        ("indices", GLOBAL),
        ("grad_x", GLOBAL),
        *_UNPOOL_SIZES,
    ),  # fmt: skip
    "adaptive_max_pool_forward": (
        ("x", GLOBAL),
        ("out", GLOBAL),
        ("indices", GLOBAL),
        *_ADAPTIVE_MAX_SIZES,
    ),  # fmt: skip
    "adaptive_max_pool_global": (
        ("x", GLOBAL),
        ("out", GLOBAL),
        ("indices", GLOBAL),
        ("HW", LONG),
        ("OW", INT),
        ("best_v", LOCAL),
        ("best_at", LOCAL),
    ),
    "adaptive_max_pool_backward": (
        ("grad_out", GLOBAL),
        ("indices", GLOBAL),
        ("grad_x", GLOBAL),
        *_ADAPTIVE_MAX_SIZES,
    ),  # fmt: skip
    "adaptive_max_pool_global_backward": (
        ("grad_out", GLOBAL),
        ("indices", GLOBAL),
        ("grad_x", GLOBAL),
        *_ints("W", "OW"),
    ),  # fmt: skip
    "clpool_contiguous": _CONTIGUOUS,
    "clpool_contiguous_index": _CONTIGUOUS,
}
# The 3-D kernels (kernels_cl/pool3d.cl).
_MAX3D_SIZES = _ints(
    "D", "H", "W", "OD", "OH", "OW", "kd", "kh", "kw", "sd", "sh", "sw", "pd", "ph", "pw",
    "dd", "dh", "dw",
)  # fmt: skip
_AVG3D_SIZES = _ints(
    "D", "H", "W", "OD", "OH", "OW", "kd", "kh", "kw", "sd", "sh", "sw", "pd", "ph", "pw",
    "count_include_pad", "divisor_override",
)  # fmt: skip
_ADAPTIVE3D_SIZES = _ints("D", "H", "W", "OD", "OH", "OW")
_SIGNATURES.update(
    max_pool3d_forward=(("x", GLOBAL), ("out", GLOBAL), ("indices", GLOBAL), *_MAX3D_SIZES),
    max_pool3d_backward=(
        ("grad_out", GLOBAL),
        ("indices", GLOBAL),
        ("grad_x", GLOBAL),
        *_MAX3D_SIZES,
    ),  # fmt: skip
    avg_pool3d_forward=(("x", GLOBAL), ("out", GLOBAL), *_AVG3D_SIZES),
    avg_pool3d_backward_plane=(("grad_out", GLOBAL), ("grad_x", GLOBAL), *_AVG3D_SIZES),
    adaptive_avg_pool3d_forward=(("x", GLOBAL), ("out", GLOBAL), *_ADAPTIVE3D_SIZES),
    adaptive_avg_pool3d_backward=(("grad_out", GLOBAL), ("grad_x", GLOBAL), *_ADAPTIVE3D_SIZES),
    adaptive_avg_pool3d_slab=(("grad_out", GLOBAL), ("grad_x", GLOBAL), *_ADAPTIVE3D_SIZES),
)
for _name in ("max_pool2d_forward", "max_pool2d_backward", "avg_pool2d_forward",
              "avg_pool2d_backward", "adaptive_avg_pool2d_backward"):  # fmt: skip
    _SIGNATURES[f"{_name}_plane"] = _SIGNATURES[_name]
_SIGNATURES["adaptive_max_pool_backward_plane"] = _SIGNATURES["adaptive_max_pool_backward"]
for _name in (
    "max_pool3d_forward",
    "max_pool3d_backward",
    "avg_pool3d_forward",
):
    _SIGNATURES[f"{_name}_plane"] = _SIGNATURES[_name]


def _view(name: str, offset: bool = True) -> tuple[tuple[str, str], ...]:
    """The element offset (an input's) and strides of a _strided kernel's 4-D view."""
    axes = ("sn", "sc", "sh", "sw")
    return tuple((f"{name}_{axis}", LONG) for axis in ("offset",) * offset + axes)


# The _strided kernels: any input strides, results through their own (clpool.h).
_STRIDED_FORWARD = (*_view("x"), *_view("out", offset=False), *_ints("C", "channels_inner"))
_STRIDED_BACKWARD = (
    *_view("grad_out"), *_view("grad_x", offset=False), *_ints("C", "channels_inner"),
)  # fmt: skip
_SIGNATURES.update({
    "max_pool2d_forward_strided": (
        ("x", GLOBAL), ("out", GLOBAL), ("indices", GLOBAL), *_STRIDED_FORWARD, *_MAX_SIZES,
    ),
    "max_pool2d_backward_strided": (
        ("grad_out", GLOBAL), ("indices", GLOBAL), ("grad_x", GLOBAL), *_STRIDED_BACKWARD,
        *_view("indices"), *_MAX_SIZES,
    ),
    "avg_pool2d_forward_strided": (("x", GLOBAL), ("out", GLOBAL), *_STRIDED_FORWARD, *_AVG_SIZES),
    "avg_pool2d_backward_strided": (
        ("grad_out", GLOBAL), ("grad_x", GLOBAL), *_STRIDED_BACKWARD, *_AVG_SIZES,
    ),
    "adaptive_avg_pool2d_forward_strided": (
        ("x", GLOBAL), ("out", GLOBAL), *_STRIDED_FORWARD, *_ADAPTIVE_SIZES,
    ),
    "adaptive_avg_pool2d_global_strided": (
        ("x", GLOBAL), ("out", GLOBAL), *_STRIDED_FORWARD, *_ints("H", "W"), ("scratch", LOCAL),
    ),
    "adaptive_avg_pool2d_backward_strided": (
        ("grad_out", GLOBAL), ("grad_x", GLOBAL), *_STRIDED_BACKWARD, *_ADAPTIVE_SIZES,
    ),
    "adaptive_max_pool2d_forward_strided": (
        ("x", GLOBAL), ("out", GLOBAL), ("indices", GLOBAL), *_STRIDED_FORWARD,
        *_ADAPTIVE_SIZES,
    ),
    "adaptive_max_pool2d_backward_strided": (
        ("grad_out", GLOBAL), ("indices", GLOBAL), ("grad_x", GLOBAL), *_STRIDED_BACKWARD,
        *_view("indices"), *_ADAPTIVE_SIZES,
    ),
})  # fmt: skip


def _view3d(name: str, offset: bool = True) -> tuple[tuple[str, str], ...]:
    """The element offset (an input's) and strides of a 5-D view (VIEW3D): the 3-D
    _strided kernels', adaptive_max_pool_backward's."""
    axes = ("sn", "sc", "sd", "sh", "sw")
    return tuple((f"{name}_{axis}", LONG) for axis in ("offset",) * offset + axes)


# The adaptive max backward's gather and scatter read grad_out and indices as 5-D views
# (the gather's _plane twin, above, as they are copied: C-contiguous).
_SIGNATURES["adaptive_max_pool_backward"] = (
    *_SIGNATURES["adaptive_max_pool_backward_plane"], *_view3d("grad_out"), *_view3d("indices"),
    *_ints("C"),
)  # fmt: skip
_SIGNATURES["adaptive_max_pool_scatter"] = _SIGNATURES["adaptive_max_pool_backward"]
_SIGNATURES["adaptive_max_pool_clear"] = (("grad_x", GLOBAL), *_ADAPTIVE_MAX_SIZES, *_ints("RUN"))

# avg_pool3d_backward's tile reads grad_out as a 5-D view (its _plane twin runs for a
# C-contiguous one only).
_SIGNATURES["avg_pool3d_backward"] = (
    ("grad_out", GLOBAL), ("grad_x", GLOBAL), *_AVG3D_SIZES, *_view3d("grad_out"), *_ints("C"),
)  # fmt: skip

# The 3-D _strided kernels (kernels_cl/pool3d.cl).
_STRIDED3D_FORWARD = (*_view3d("x"), *_view3d("out", offset=False), *_ints("C", "channels_inner"))
_STRIDED3D_BACKWARD = (
    *_view3d("grad_out"), *_view3d("grad_x", offset=False), *_ints("C", "channels_inner"),
)  # fmt: skip
_SIGNATURES.update({
    "max_pool3d_forward_strided": (
        ("x", GLOBAL), ("out", GLOBAL), ("indices", GLOBAL), *_STRIDED3D_FORWARD, *_MAX3D_SIZES,
    ),
    "max_pool3d_backward_strided": (
        ("grad_out", GLOBAL), ("indices", GLOBAL), ("grad_x", GLOBAL), *_STRIDED3D_BACKWARD,
        *_view3d("indices"), *_MAX3D_SIZES,
    ),
    "avg_pool3d_forward_strided": (
        ("x", GLOBAL), ("out", GLOBAL), *_STRIDED3D_FORWARD, *_AVG3D_SIZES,
    ),
    "avg_pool3d_backward_strided": (
        ("grad_out", GLOBAL), ("grad_x", GLOBAL), *_STRIDED3D_BACKWARD, *_AVG3D_SIZES,
    ),
    "adaptive_avg_pool3d_forward_strided": (
        ("x", GLOBAL), ("out", GLOBAL), *_STRIDED3D_FORWARD, *_ADAPTIVE3D_SIZES,
    ),
    "adaptive_avg_pool3d_backward_strided": (
        ("grad_out", GLOBAL), ("grad_x", GLOBAL), *_STRIDED3D_BACKWARD, *_ADAPTIVE3D_SIZES,
    ),
    "adaptive_avg_pool3d_backward_plane": (
        ("grad_out", GLOBAL), ("grad_x", GLOBAL), *_ADAPTIVE3D_SIZES, *_view3d("grad_out"),
        *_ints("C"),
    ),
    "adaptive_max_pool3d_forward_strided": (
        ("x", GLOBAL), ("out", GLOBAL), ("indices", GLOBAL), *_STRIDED3D_FORWARD,
        *_ADAPTIVE3D_SIZES,
    ),
})  # fmt: skip
SIGNATURES = _SIGNATURES

_LIMITS: dict[str, tuple[type[np.int32] | type[np.int64], int]] = {
    INT: (np.int32, 2**31),
    LONG: (np.int64, 2**63),
}


def _typed(
    kernel: str, arg: str, kind: str, value: SupportsInt
) -> cl.LocalMemory | np.int32 | np.int64:
    if kind == LOCAL:
        return cl.LocalMemory(int(value))
    ctype, limit = _LIMITS[kind]
    if not -limit <= int(value) < limit:
        raise Problem(
            PoolArgumentError,
            f"{arg}={value} is too large for the {kind} argument of kernel {kernel}",
        )
    typed: np.int32 | np.int64 = ctype(value)
    return typed


@dataclass(frozen=True)
class Launch:
    """One kernel enqueue, decided once: the kernel (an instance of its own, scalars set),
    its range, and which call slot each remaining argument takes."""

    name: str
    kernel: cl.Kernel
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    bound: tuple[tuple[int, str], ...]  # (argument index, slot) set at each call
    lock: threading.Lock = field(default_factory=threading.Lock, compare=False)
    # the offsets last set, by argument index: pyopencl's set_arg takes about 6 us for a
    # scalar (a buffer: 0.1 us), and a view's offset seldom changes from call to call
    offsets: dict[int, np.int64] = field(default_factory=dict, compare=False)

    def enqueue(
        self, queue: cl.CommandQueue, slots: dict[str, Slot], wait_for: list[cl.Event] | None
    ) -> cl.Event:
        """Set the per-call arguments from `slots` and enqueue after `wait_for`."""
        with self.lock:
            for index, slot in self.bound:
                value = slots[slot]
                offset = value if isinstance(value, np.int64) else None
                if offset is not None and self.offsets.get(index) == offset:
                    continue
                # pyopencl's stub takes a Buffer, not the MemoryObjectHolder (a pool's
                # PooledBuffer) an Array's base_data is
                self.kernel.set_arg(index, value)  # type: ignore[arg-type]
                if offset is not None:
                    self.offsets[index] = offset
            event = cl.enqueue_nd_range_kernel(
                queue, self.kernel, self.global_size, self.local_size, wait_for=wait_for
            )
        events = _RECORDED.get()
        if events is not None:
            events.append(event)
        return event


# The events of the launches enqueued inside `recording()` (in this context), else None.
_RECORDED: ContextVar[list[cl.Event] | None] = ContextVar("recorded", default=None)


@contextmanager
def recording() -> Iterator[list[cl.Event]]:
    """A list that collects the event of every kernel launch enqueued while the block runs
    (copies, every step of a plan and of a fallback plan), in order."""
    events: list[cl.Event] = []
    token = _RECORDED.set(events)
    try:
        yield events
    finally:
        _RECORDED.reset(token)


def bind(
    kernel: cl.Kernel,
    global_size: tuple[int, ...],
    local_size: tuple[int, ...] | None,
    slots: dict[str, str] | None = None,
    **scalars: SupportsInt,
) -> Launch:
    """A Launch of `kernel`, an instance of its own (programs.Program.instance): each
    argument its signature names is one of `scalars` (set now, typed by the signature) or
    a slot filled at each call (its own name, or the one `slots` maps it to)."""
    name = kernel.function_name
    signature = SIGNATURES[name]
    unknown = set(scalars) - {arg for arg, _ in signature}
    if unknown:
        raise ValueError(f"{name} takes no argument {', '.join(sorted(unknown))}")
    bound = []
    for index, (arg, kind) in enumerate(signature):
        if arg in scalars:
            # pyopencl's stub omits LocalMemory from what set_arg takes
            kernel.set_arg(index, _typed(name, arg, kind, scalars[arg]))  # type: ignore[arg-type]
        else:
            bound.append((index, (slots or {}).get(arg, arg)))
    return Launch(name, kernel, tuple(global_size), local_size, tuple(bound))
