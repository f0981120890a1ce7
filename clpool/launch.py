"""Running a plan: numpy inputs uploaded, device inputs' events waited on, outputs
allocated from the queue's memory pool, kernels enqueued in order by events, and the
outputs returned carrying their events (numpy outputs for numpy inputs)."""

from __future__ import annotations

import inspect
from typing import TypeAlias, cast

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pyopencl.tools as cl_tools

from . import kernels, plans, policy
from .errors import PoolArgumentError, Problem
from .lru import LRU

# A queue and the memory pool of its outputs and uploads.
_Held: TypeAlias = tuple[cl.CommandQueue, cl_tools.MemoryPool]


def _drop_queue(held: _Held) -> None:
    queue, pool = held
    pool.free_held()
    plans.forget_queue(queue.int_ptr)


# queue -> (queue, its memory pool), for the policy's number of queues; a queue dropped
# takes its pool and plans with it.
_pools: LRU[_Held] = LRU(lambda: policy.current().queues_kept, _drop_queue)


def memory_pool(queue: cl.CommandQueue) -> cl_tools.MemoryPool:
    """The pool clpool allocates outputs and uploads from on `queue`, one per queue so that
    a reused block is only ever touched in that queue's order. Reuse spares a CPU device
    the page faults of fresh memory and every device the cost of creating buffers."""
    held = _pools.get(queue.int_ptr)
    if held is None:
        pool = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(queue))
        held = _pools.put(queue.int_ptr, (queue, pool))
    return held[1]


def empty_cache() -> None:
    """Give the memory clpool keeps for reuse back to the OpenCL runtime (arrays still in
    use stay), like torch.cuda.empty_cache()."""
    for _, pool in _pools.values():
        pool.free_held()


# PyOpenCL's own operations make their results through Array's fast path, which skips
# re-checking a shape and strides already known good; so do plans (an output's shape and
# strides are checked when it is planned). Without that path, the public constructor.
_FAST = "_fast" in inspect.signature(cla.Array.__init__).parameters


def _empty(plan: plans.Plan, spec: plans.Output, pool: cl_tools.MemoryPool | None) -> cla.Array:
    """A new array for output `spec` of `plan`."""
    if _FAST:
        return cla.Array(
            None,
            spec.shape,
            spec.dtype,
            allocator=pool,
            strides=spec.strides,
            _fast=True,
            _size=spec.size,
            _context=plan.context,
            _queue=plan.queue,
        )
    return cla.Array(plan.queue, spec.shape, spec.dtype, strides=spec.strides, allocator=pool)


def view(a: cla.Array, shape: tuple[int, ...], strides: tuple[int, ...]) -> cla.Array:
    """Array `a`'s memory seen with another shape and strides (the same elements), sharing
    its events: the 1-D ops' (N, C, L) arrays as (N, C, 1, L) and back."""
    if _FAST:
        return cla.Array(None, shape, a.dtype, data=a.base_data, offset=a.offset,
                         strides=strides, events=a.events, _fast=True, _size=a.size,
                         _context=a.context, _queue=a.queue)  # fmt: skip
    return cla.Array(a.queue, shape, a.dtype, data=a.base_data, offset=a.offset,
                     strides=strides, events=a.events)  # fmt: skip


def channels_last_array(
    queue: cl.CommandQueue, a: np.ndarray, pool: cl_tools.MemoryPool | None = None
) -> cla.Array:
    """Host array `a` (N, C, ...) on the device with its channels innermost (NHWC memory,
    NDHWC for 5-D), as a view of `a`'s shape."""
    order = (0, *range(2, a.ndim), 1)
    dense = cla.to_device(queue, np.ascontiguousarray(a.transpose(order)), allocator=pool)
    back = tuple(int(i) for i in np.argsort(order))
    # pyopencl's Array.transpose has no annotations
    return cast(cla.Array, dense.transpose(back))  # type: ignore[no-untyped-call]


def _upload(
    queue: cl.CommandQueue, value: object, pool: cl_tools.MemoryPool | None, as_is: bool
) -> cla.Array:
    """A numpy input on the device (a blocking copy: no event to wait on), C-contiguous;
    for a plan that reads its inputs as they are (`as_is`), a channels-last one
    channels-last (plans.uploads_nhwc), as its own bytes where it is dense."""
    try:
        a = plans.host_array(value)
        if as_is and plans.uploads_nhwc(a):
            return channels_last_array(queue, a, pool)
        a = np.ascontiguousarray(a)
    except MemoryError:
        nbytes = np.asarray(value).nbytes
        raise Problem(
            PoolArgumentError, f"the input ({nbytes} bytes) does not fit in host memory"
        ) from None
    return cla.to_device(queue, a, allocator=pool)


def to_host(a: cla.Array) -> np.ndarray:
    """Output `a` on the host, with its strides (a channels-last one, or any dense
    permutation of its axes, as its own bytes)."""
    if a.flags.c_contiguous:
        host: np.ndarray = a.get()
        return host
    order = sorted(range(a.ndim), key=lambda axis: -a.strides[axis])  # outermost first
    # pyopencl's Array.transpose has no annotations
    dense: np.ndarray = a.transpose(order).get()  # type: ignore[no-untyped-call]
    back: np.ndarray = dense.transpose(np.argsort(order))
    return back


def run(
    plan: plans.Plan, arrays: tuple[object, ...], out: list[cla.Array] | None = None
) -> list[cla.Array] | list[np.ndarray]:
    """Run `plan` on the call's input arrays; its outputs, in the inputs' kind, or written
    into `out` (Arrays already checked against the plan's outputs) and returned."""
    queue = plan.queue
    pool = memory_pool(queue) if plan.pooled else None
    slots: dict[str, kernels.Slot] = {}
    waits: list[cl.Event] = []
    for a, slot, copy in zip(arrays, plan.inputs, plan.copies, strict=True):
        if slot is None:
            continue
        if not isinstance(a, cla.Array):
            a = _upload(queue, a, pool, plan.as_is)
        if copy is None:
            slots[slot] = a.base_data
            slots[f"{slot}_offset"] = np.int64(a.offset // a.dtype.itemsize)
            waits.extend(a.events)
            continue
        dense = cla.empty(queue, a.shape, a.dtype, allocator=pool)
        slots[f"{slot}:src"] = a.base_data
        slots[f"{slot}:offset"] = np.int64(a.offset // a.dtype.itemsize)
        slots[slot] = dense.base_data
        waits.append(copy.enqueue(queue, slots, a.events or None))
    outputs = []
    for i, spec in enumerate(plan.outputs):
        if out is None:
            array = _empty(plan, spec, pool)
        else:
            array = out[i]
            waits.extend(array.events)  # written only once earlier work on it is done
        slots[spec.slot] = array.base_data
        outputs.append(array)
    event = None
    for step in plan.steps:
        event = step.enqueue(queue, slots, waits or None)
        waits = [event]
    if event is not None:
        for a in outputs:
            a.add_event(event)
    return [to_host(a) for a in outputs] if plan.host and out is None else outputs
