"""The 1-D pooling ops of torch.nn.functional, run on the 2-D kernels with H = 1: an
(N, C, L) input is seen as (N, C, 1, L) and each 1-D size k as (1, k), so one with its
channels innermost ((N, L, C) memory) is read as the 2-D ops read a channels-last one.
Indices along L are the 2-D kernels' flat h * W + w indices with h = 0. (adaptive max
pooling's 1-D op, in adaptive_max.py, runs through `_run` too.)"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar, cast

import numpy as np
import numpy.typing as npt
import pyopencl as cl
import pyopencl.array as cla

from . import adopt, launch, ops, plans
from .errors import PoolArgumentError, Problem, relabeled, reporting
from .types import OptionalSize, Out, Size, Tensor

R = TypeVar("R")


def _size(value: object, name: str, fill: int) -> object:
    """A 1-D size (an int or a sequence of one) as its 2-D form (fill, value); None and
    an empty sequence stay as they are (stride: the kernel size)."""
    if value is None or (isinstance(value, (tuple, list)) and len(value) == 0):
        return value
    if isinstance(value, (tuple, list)):
        if len(value) != 1:
            raise Problem(PoolArgumentError, f"{name} must be an int or a tuple of one int, got "
                          f"{value!r}")  # fmt: skip
        value = value[0]
    return (fill, value)


def _window(
    kernel_size: object, stride: object, padding: object, *dilation: object
) -> tuple[object, ...]:
    """kernel_size, stride, padding (and dilation) of a 1-D op in their 2-D forms."""
    names = ("kernel_size", "stride", "padding", "dilation")
    fills = (1, 1, 0, 1)
    values = (kernel_size, stride, padding, *dilation)
    return tuple(_size(v, n, f) for v, n, f in zip(values, names, fills, strict=False))


def _rank(a: object) -> int:
    # anything else: numpy judges it
    return (
        len(a.shape) if isinstance(a, (np.ndarray, cla.Array)) else np.ndim(cast(npt.ArrayLike, a))
    )


def _widen(a: object) -> np.ndarray | cla.Array:
    """An (N, C, L) or (C, L) input as (N, C, 1, L) or (C, 1, L), sharing its memory."""
    if isinstance(a, cla.Array):
        shape = (*a.shape[:-1], 1, a.shape[-1])
        strides = (*a.strides[:-1], a.shape[-1] * a.strides[-1], a.strides[-1])
        return launch.view(a, shape, strides)
    return np.expand_dims(np.asarray(a), -2)


def _narrow(a: np.ndarray | cla.Array) -> np.ndarray | cla.Array:
    """A 2-D op's (..., 1, L) result as (..., L)."""
    if isinstance(a, cla.Array):
        return launch.view(a, (*a.shape[:-2], a.shape[-1]), (*a.strides[:-2], a.strides[-1]))
    return a[..., 0, :]


def _run(
    label: str,
    op: Callable[..., R],
    arrays: tuple[object, ...],
    args: Callable[[], tuple[object, ...]] = tuple,
    **kw: object,
) -> R:
    """Run the 2-D `op` on the 1-D `arrays` and the 2-D forms of its other arguments,
    `args()`, under `label`: ranks checked, inputs widened, results narrowed and returned in
    the inputs' kind; its errors named for `label`, and for the device and dtype the call
    would run on, as the 2-D ops name them."""
    with relabeled(label), reporting(label) as where:
        arrays, like = adopt.inputs(arrays, 1 if label.endswith("_backward") else 0)
        try:
            for a in arrays:
                if a is not None and _rank(a) not in (2, 3):
                    raise Problem(
                        PoolArgumentError,
                        "expected a 2-D (C, L) or 3-D (N, C, L) input, got shape "
                        f"{np.shape(cast(npt.ArrayLike, a))}",
                    )
            sizes = args()
        except Problem:
            given = tuple(a for a in arrays if a is not None)
            queue = cast("cl.CommandQueue | None", kw.get("queue"))
            plans.Planner(where, label, kw.get("device"), given, queue)  # names them
            raise
        if kw.get("out") is not None:
            out = kw["out"]
            kw["out"] = tuple(map(_widen, out)) if isinstance(out, tuple) else _widen(out)
        got = op(*map(_widen, arrays), *sizes, **kw)
    # the 2-D ops' results for adopted inputs: numpy arrays or pyopencl Arrays
    parts = cast(tuple[np.ndarray | cla.Array, ...], got if isinstance(got, tuple) else (got,))
    results: Sequence[Tensor] = [_narrow(r) for r in parts]
    if like is not None and isinstance(results[0], np.ndarray):
        results = adopt.tensors(cast(list[np.ndarray], results), like)
    return cast(R, tuple(results) if isinstance(got, tuple) else results[0])


def max_pool1d(
    input: Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    dilation: Size = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
    *,
    index_dtype: npt.DTypeLike = "int64",
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """1-D max pooling, as torch.nn.functional.max_pool1d; with return_indices, also the
    index of each maximum along L."""
    op = ops.max_pool2d_with_indices if return_indices else ops.max_pool2d
    extra = dict(index_dtype=index_dtype) if return_indices else {}
    return _run(
        "max_pool1d",
        op,
        (input,),
        lambda: (*_window(kernel_size, stride, padding, dilation), ceil_mode),
        device=device,
        queue=queue,
        out=out,
        **extra,
    )


def max_pool1d_with_indices_backward(
    grad_output: Tensor,
    input: Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    dilation: Size = 1,
    ceil_mode: bool = False,
    indices: Tensor | None = None,
    *,
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor:
    """Gradient of max_pool1d (return_indices=True) with respect to its input."""

    def sizes() -> tuple[object, ...]:
        if indices is None:
            raise Problem(PoolArgumentError, "indices is required (the forward's indices)")
        return _window(kernel_size, stride, padding, dilation)

    def op(
        g: Tensor, x: Tensor, i: Tensor, k: Size, s: Size | None, p: Size, d: Size, *,
        device: object, queue: cl.CommandQueue | None, out: Out,
    ) -> Tensor:  # fmt: skip
        return ops.max_pool2d_with_indices_backward(
            g, x, k, s, p, d, ceil_mode, i, device=device, queue=queue, out=out
        )

    return _run("max_pool1d_with_indices_backward", op, (grad_output, input, indices), sizes,
                device=device, queue=queue, out=out)  # fmt: skip


def avg_pool1d(
    input: Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    *,
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor:
    """1-D average pooling, as torch.nn.functional.avg_pool1d."""
    return _run("avg_pool1d", ops.avg_pool2d, (input,),
                lambda: (*_window(kernel_size, stride, padding), ceil_mode, count_include_pad),
                device=device, queue=queue, out=out)  # fmt: skip


def avg_pool1d_backward(
    grad_output: Tensor,
    input: Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    *,
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor:
    """Gradient of avg_pool1d with respect to its input."""
    return _run("avg_pool1d_backward", ops.avg_pool2d_backward, (grad_output, input),
                lambda: (*_window(kernel_size, stride, padding), ceil_mode, count_include_pad),
                device=device, queue=queue, out=out)  # fmt: skip


def adaptive_avg_pool1d(
    input: Tensor,
    output_size: OptionalSize,
    *,
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor:
    """1-D adaptive average pooling, as torch.nn.functional.adaptive_avg_pool1d."""
    return _run("adaptive_avg_pool1d", ops.adaptive_avg_pool2d, (input,),
                lambda: (_size(output_size, "output_size", 1),), device=device, queue=queue,
                out=out)  # fmt: skip


def adaptive_avg_pool1d_backward(
    grad_output: Tensor,
    input: Tensor,
    *,
    device: object = None,
    queue: cl.CommandQueue | None = None,
    out: Out = None,
) -> Tensor:
    """Gradient of adaptive_avg_pool1d with respect to its input; the output size is
    grad_output's."""
    return _run("adaptive_avg_pool1d_backward", ops.adaptive_avg_pool2d_backward,
                (grad_output, input), device=device, queue=queue, out=out)  # fmt: skip
