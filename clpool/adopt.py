"""The result follows the input: what an op takes in (numpy arrays, pyopencl Arrays, torch
tensors, any other DLPack producer) and how its results go back, plus the checks on
`queue=` and `out=`. torch is imported only when a tensor is passed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeGuard, cast

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from . import bfloat16
from .errors import PoolArgumentError, Problem, UnsupportedDtypeError
from .shapes import c_contiguous, channels_last, channels_last_1d, channels_last_3d

if TYPE_CHECKING:
    import torch

    from .plans import Output


def _is_tensor(a: object) -> TypeGuard[torch.Tensor]:
    return type(a).__module__.startswith("torch") and hasattr(a, "detach")


def _from_tensor(t: torch.Tensor) -> np.ndarray:
    """A CPU torch tensor as a host numpy array (no gradient flows; a copy where it must:
    a channels-last tensor, 1-D's (N, L, C) memory too, is a view, which goes to the device
    as its own bytes)."""
    device = t.device
    if device.type != "cpu":
        raise Problem(
            PoolArgumentError,
            f"the input tensor is on torch device {device}; clpool takes CPU tensors "
            "(move it with .cpu(), or pass a pyopencl Array)",
        )
    t = t.detach()
    shape, strides = tuple(t.shape), tuple(t.stride())
    if not any(f(shape, strides) for f in (channels_last, channels_last_3d, channels_last_1d)):
        t = t.contiguous()
    if str(t.dtype) == "torch.bfloat16":  # numpy has none
        return bfloat16_numpy(t)
    try:
        a: np.ndarray = t.numpy()
    except TypeError as e:  # a dtype numpy lacks (float8, ...)
        raise Problem(
            UnsupportedDtypeError, f"dtype {str(t.dtype).removeprefix('torch.')} is not "
            f"supported (float16, bfloat16, float32 or float64): {e}",
        ) from None  # fmt: skip
    return a


def bfloat16_numpy(t: torch.Tensor) -> np.ndarray:
    """A CPU torch.bfloat16 tensor as an ml_dtypes.bfloat16 array sharing its memory and
    strides; an UnsupportedDtypeError without ml_dtypes."""
    import torch

    dt = bfloat16.dtype()
    a: np.ndarray = t.view(torch.int16).numpy().view(dt)
    return a


def bfloat16_tensor(a: np.ndarray) -> torch.Tensor:
    """An ml_dtypes.bfloat16 array as a torch.bfloat16 tensor sharing its memory and
    strides."""
    import torch

    return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)


def _from_dlpack(a: object) -> np.ndarray:
    try:
        return np.from_dlpack(a)  # type: ignore[arg-type]  # a DLPack producer: else the except
    except (BufferError, TypeError, ValueError, RuntimeError, AttributeError) as e:
        raise Problem(
            PoolArgumentError, f"cannot read the input through DLPack: {type(e).__name__}: {e}"
        ) from None


def inputs(
    arrays: tuple[object, ...], follows: int = 0
) -> tuple[tuple[object, ...], torch.Tensor | None]:
    """The call's arrays as numpy arrays or pyopencl Arrays, and the torch tensor the
    results become tensors like (arrays[follows], the forward input, where it is a tensor,
    else the first tensor among them), or None."""
    first = arrays[follows] if follows < len(arrays) else None
    like: torch.Tensor | None = first if _is_tensor(first) else None
    out: list[object] = []
    for a in arrays:
        if isinstance(a, (np.ndarray, cla.Array)) or a is None:
            out.append(a)
        elif _is_tensor(a):
            like = like if like is not None else a
            out.append(_from_tensor(a))
        elif hasattr(a, "__dlpack__"):
            out.append(_from_dlpack(a))
        else:
            out.append(a)  # a list, a scalar...: plans.host_array judges it
    return tuple(out), like


def tensor_channels_last(t: torch.Tensor) -> bool:
    """True when torch tensor `t` is laid out channels-last (shapes.channels_last): the
    one rule for clpool and clpool.torch."""
    return channels_last(tuple(t.shape), tuple(t.stride()))


def tensors(results: list[np.ndarray], like: torch.Tensor) -> list[torch.Tensor]:
    """Host results as torch tensors on `like`'s device, in `like`'s memory format: the
    results' own strides where they are so already (the 2-D ops' channels-last results),
    else a copy made channels-last (the ops without channels-last kernels)."""
    import torch

    last = tensor_channels_last(like)
    out = []
    for r in results:
        t = bfloat16_tensor(r) if bfloat16.is_bfloat16(r.dtype) else torch.from_numpy(r)
        if last and t.dim() == 4 and not tensor_channels_last(t):
            t = t.contiguous(memory_format=torch.channels_last)
        out.append(t.to(like.device))
    return out


def check_queue(queue: object) -> None:
    if queue is not None and not isinstance(queue, cl.CommandQueue):
        raise Problem(
            PoolArgumentError, f"queue must be a pyopencl CommandQueue, got {type(queue).__name__}"
        )


def out_arrays(out: object, count: int) -> list[cla.Array] | None:
    """`out=` as a list of `count` Arrays (a pair for an op with indices), or None."""
    if out is None:
        return None
    given = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(given) != count or not all(isinstance(a, cla.Array) for a in given):
        want = "a pyopencl Array" if count == 1 else f"a tuple of {count} pyopencl Arrays"
        raise Problem(PoolArgumentError, f"out must be {want}")
    return cast(list[cla.Array], given)  # each one checked above


def check_out(given: Sequence[cla.Array], specs: Sequence[Output], context: cl.Context) -> None:
    """Refuse an out= Array the results cannot be written into as they are."""
    for a, spec in zip(given, specs, strict=True):
        what = f"out ({spec.slot})" if len(given) > 1 else "out"
        if tuple(a.shape) != tuple(spec.shape) or a.dtype != spec.dtype:
            raise Problem(
                PoolArgumentError,
                f"{what} has shape {tuple(a.shape)} and dtype {a.dtype.name}; the result has "
                f"shape {tuple(spec.shape)} and dtype {spec.dtype.name}",
            )
        dense = c_contiguous(spec.shape, tuple(s // spec.dtype.itemsize for s in spec.strides))
        if (not a.flags.c_contiguous if dense else tuple(a.strides) != spec.strides) or a.offset:
            want = "C-contiguous" if dense else f"channels-last (strides {spec.strides})"
            raise Problem(PoolArgumentError, f"{what} must be {want} with offset 0")
        if a.context != context:
            raise Problem(PoolArgumentError, f"{what} is in another context than the op runs in")
