"""clpool for PyTorch: torch.nn.functional's pooling functions and torch.nn's pooling
modules, computed by clpool's OpenCL kernels, with autograd through clpool's backward
kernels.

Tensors go in and tensors come out, keeping dtype, torch device and memory format. A
tensor on any torch device is copied to the host, pooled on clpool's OpenCL device (the
keyword-only ``device=``, else clpool's default) and the result moved back. Needs the
extra ``torch``; ``import clpool`` itself never imports torch.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import torch
from torch.autograd.function import FunctionCtx, once_differentiable

from clpool import adaptive_max as _adaptive_max
from clpool import adopt as _adopt
from clpool import ops as _ops
from clpool import pool1d as _pool1d
from clpool import pool3d as _pool3d
from clpool import unpool as _unpool
from clpool.errors import PoolArgumentError, Problem, relabeled, reporting
from clpool.types import OptionalSize, Size, Tensor

__all__ = [
    "AdaptiveAvgPool2d",
    "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d",
    "AdaptiveMaxPool3d",
    "AvgPool2d",
    "MaxPool2d",
    "adaptive_avg_pool2d",
    "adaptive_max_pool1d",
    "adaptive_max_pool2d",
    "adaptive_max_pool3d",
    "avg_pool2d",
    "max_pool2d",
    "AdaptiveAvgPool3d",
    "AvgPool3d",
    "MaxPool3d",
    "adaptive_avg_pool3d",
    "avg_pool3d",
    "max_pool3d",
    "AdaptiveAvgPool1d",
    "AvgPool1d",
    "MaxPool1d",
    "adaptive_avg_pool1d",
    "avg_pool1d",
    "max_pool1d",
]

# --- tensors <-> host arrays ---------------------------------------------------------


def _host(t: torch.Tensor, label: str) -> np.ndarray:
    """`t` as a host numpy array: a view of a channels-last tensor, else C-contiguous (a
    copy where it must be; bfloat16 as ml_dtypes.bfloat16, extra "bfloat16"); a dtype numpy
    lacks is an UnsupportedDtypeError."""
    with reporting(label) as where:
        where.dtype = str(t.dtype).removeprefix("torch.")
        return _adopt._from_tensor(t.cpu())


def _tensor(a: Tensor, like: torch.Tensor) -> torch.Tensor:
    """Host result `a` as a tensor on `like`'s torch device, with `a`'s strides (clpool
    gives a channels-last input's results channels-last)."""
    return _adopt.tensors([cast(np.ndarray, a)], like)[0]  # a host input's result: numpy


def _apply(function: type[torch.autograd.Function], *args: object) -> torch.Tensor:
    """`function` applied to `args`, giving one tensor."""
    out: torch.Tensor = function.apply(*args)  # type: ignore[no-untyped-call]  # unannotated
    return out


def _apply_pair(
    function: type[torch.autograd.Function], *args: object
) -> tuple[torch.Tensor, torch.Tensor]:
    """`function` applied to `args`, giving (values, indices)."""
    out: tuple[torch.Tensor, torch.Tensor] = function.apply(*args)  # type: ignore[no-untyped-call]  # unannotated
    return out


def _tracked(input: torch.Tensor) -> bool:
    """True when autograd records operations on `input` here."""
    return torch.is_grad_enabled() and input.requires_grad


# --- autograd functions --------------------------------------------------------------


def _window_op(rank: int, name: str) -> Any:
    """clpool's op `name` of rank 2 (clpool.ops) or 3 (clpool.pool3d)."""
    return getattr(_pool3d if rank == 3 else _ops, name)


class MaxPoolFunction(torch.autograd.Function):
    """max_pool2d/3d (by `rank`) with indices; backward runs clpool's
    max_pool{rank}d_with_indices_backward."""

    @staticmethod
    def forward(
        ctx: FunctionCtx,
        input: torch.Tensor,
        rank: int,
        kernel_size: Size,
        stride: Size | None,
        padding: Size,
        dilation: Size,
        ceil_mode: bool,
        device: object,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        label = f"max_pool{rank}d_with_indices"
        params = (kernel_size, stride, padding, dilation, ceil_mode)
        out, indices = _window_op(rank, label)(
            _host(input, label), *params, index_dtype="int64", device=device
        )
        out_t, indices_t = _tensor(out, input), _tensor(indices, input)
        ctx.save_for_backward(input, indices_t)
        ctx.params = (rank, params, device)  # type: ignore[attr-defined]
        ctx.mark_non_differentiable(indices_t)
        return out_t, indices_t

    @staticmethod
    @once_differentiable
    def backward(
        ctx: Any, grad_output: torch.Tensor, _grad_indices: Any
    ) -> tuple[torch.Tensor | None, ...]:
        input, indices = ctx.saved_tensors
        rank, params, device = ctx.params
        label = f"max_pool{rank}d_with_indices_backward"
        grad = _window_op(rank, label)(
            _host(grad_output, label), _host(input, label), *params, _host(indices, label),
            device=device,
        )  # fmt: skip
        return _tensor(grad, input), None, None, None, None, None, None, None


class AvgPoolFunction(torch.autograd.Function):
    """avg_pool2d/3d (by `rank`); backward runs clpool's avg_pool{rank}d_backward."""

    @staticmethod
    def forward(
        ctx: FunctionCtx,
        input: torch.Tensor,
        rank: int,
        kernel_size: Size,
        stride: Size | None,
        padding: Size,
        ceil_mode: bool,
        count_include_pad: bool,
        divisor_override: int | None,
        device: object,
    ) -> torch.Tensor:
        label = f"avg_pool{rank}d"
        params = (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
        out = _window_op(rank, label)(_host(input, label), *params, device=device)
        ctx.save_for_backward(input)
        ctx.params = (rank, params, device)  # type: ignore[attr-defined]
        return _tensor(out, input)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (input,) = ctx.saved_tensors
        rank, params, device = ctx.params
        label = f"avg_pool{rank}d_backward"
        grad = _window_op(rank, label)(
            _host(grad_output, label), _host(input, label), *params, device=device
        )
        return _tensor(grad, input), None, None, None, None, None, None, None, None


class AdaptiveAvgPoolFunction(torch.autograd.Function):
    """adaptive_avg_pool2d/3d (by `rank`); backward runs clpool's
    adaptive_avg_pool{rank}d_backward."""

    @staticmethod
    def forward(
        ctx: FunctionCtx, input: torch.Tensor, rank: int, output_size: OptionalSize, device: object
    ) -> torch.Tensor:
        label = f"adaptive_avg_pool{rank}d"
        out = _window_op(rank, label)(_host(input, label), output_size, device=device)
        ctx.save_for_backward(input)
        ctx.params = (rank, device)  # type: ignore[attr-defined]
        return _tensor(out, input)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (input,) = ctx.saved_tensors
        rank, device = ctx.params
        label = f"adaptive_avg_pool{rank}d_backward"
        grad = _window_op(rank, label)(
            _host(grad_output, label), _host(input, label), device=device
        )
        return _tensor(grad, input), None, None, None


def _max_pool(
    rank: int, input: torch.Tensor, kernel_size: Size, stride: Size | None, padding: Size,
    dilation: Size, ceil_mode: bool, return_indices: bool, device: object,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """max_pool{rank}d: without indices and autograd, the forward kernel alone."""
    params = (kernel_size, stride, padding, dilation, ceil_mode)
    if not return_indices and not _tracked(input):
        label = f"max_pool{rank}d"
        out = _window_op(rank, label)(_host(input, label), *params, device=device)
        return _tensor(cast(Tensor, out), input)  # no return_indices: one array
    out, indices = _apply_pair(MaxPoolFunction, input, rank, *params, device)
    return (out, indices) if return_indices else out


# --- functions with torch.nn.functional's names and signatures -----------------------


def max_pool2d(
    input: torch.Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    dilation: Size = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
    *,
    device: object = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """2-D max pooling, as torch.nn.functional.max_pool2d; with return_indices, also the
    int64 flat index of each maximum in its input plane."""
    return _max_pool(
        2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, device
    )


def avg_pool2d(
    input: torch.Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
    *,
    device: object = None,
) -> torch.Tensor:
    """2-D average pooling, as torch.nn.functional.avg_pool2d."""
    return _apply(
        AvgPoolFunction, input, 2, kernel_size, stride, padding, ceil_mode, count_include_pad,
        divisor_override, device,
    )  # fmt: skip


def adaptive_avg_pool2d(
    input: torch.Tensor, output_size: OptionalSize, *, device: object = None
) -> torch.Tensor:
    """2-D adaptive average pooling, as torch.nn.functional.adaptive_avg_pool2d."""
    return _apply(AdaptiveAvgPoolFunction, input, 2, output_size, device)


# --- modules mirroring torch.nn ------------------------------------------------------


class MaxPool2d(torch.nn.Module):
    """torch.nn.MaxPool2d on clpool: same arguments, attributes and repr."""

    __constants__ = ["kernel_size", "stride", "padding", "dilation", "return_indices", "ceil_mode"]
    rank = 2

    def __init__(
        self,
        kernel_size: Size,
        stride: Size | None = None,
        padding: Size = 0,
        dilation: Size = 1,
        return_indices: bool = False,
        ceil_mode: bool = False,
    ) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"
            f", dilation={self.dilation}, ceil_mode={self.ceil_mode}"
        )

    def forward(self, input: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        return _max_pool(
            self.rank, input, self.kernel_size, self.stride, self.padding, self.dilation,
            self.ceil_mode, self.return_indices, None,
        )  # fmt: skip


class AvgPool2d(torch.nn.Module):
    """torch.nn.AvgPool2d on clpool: same arguments, attributes and repr."""

    __constants__ = [
        "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"
    ]  # fmt: skip
    rank = 2

    def __init__(
        self,
        kernel_size: Size,
        stride: Size | None = None,
        padding: Size = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return _apply(
            AvgPoolFunction, input, self.rank, self.kernel_size, self.stride, self.padding,
            self.ceil_mode, self.count_include_pad, self.divisor_override, None,
        )  # fmt: skip


class AdaptiveAvgPool2d(torch.nn.Module):
    """torch.nn.AdaptiveAvgPool2d on clpool: same argument, attribute and repr."""

    __constants__ = ["output_size"]
    rank = 2

    def __init__(self, output_size: OptionalSize) -> None:
        super().__init__()
        self.output_size = output_size

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return _apply(AdaptiveAvgPoolFunction, input, self.rank, self.output_size, None)


# --- max unpooling: functions and modules ---------------------------------------------


class MaxUnpoolFunction(torch.autograd.Function):
    """max_unpool1d/2d/3d; backward runs clpool.max_unpool*d_backward (a gather)."""

    @staticmethod
    def forward(
        ctx: FunctionCtx,
        input: torch.Tensor,
        indices: torch.Tensor,
        spatial: int,
        kernel_size: Size,
        stride: Size | None,
        padding: Size,
        output_size: Any,
        device: object,
    ) -> torch.Tensor:
        label = f"max_unpool{spatial}d"
        out = getattr(_unpool, label)(
            _host(input, label), _host(indices, label), kernel_size, stride, padding,
            output_size, device=device,
        )  # fmt: skip
        ctx.save_for_backward(input, indices)
        ctx.params = (spatial, kernel_size, stride, padding, output_size, device)  # type: ignore[attr-defined]
        return _tensor(out, input)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        input, indices = ctx.saved_tensors
        spatial, kernel_size, stride, padding, output_size, device = ctx.params
        label = f"max_unpool{spatial}d_backward"
        grad = getattr(_unpool, label)(
            _host(grad_output, label), _host(input, label), _host(indices, label), kernel_size,
            stride, padding, output_size, device=device,
        )  # fmt: skip
        return _tensor(grad, input), None, None, None, None, None, None, None


def max_unpool1d(
    input: torch.Tensor,
    indices: torch.Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    output_size: Any = None,
    *,
    device: object = None,
) -> torch.Tensor:
    """1-D max unpooling, as torch.nn.functional.max_unpool1d."""
    return _apply(MaxUnpoolFunction, input, indices, 1, kernel_size, stride, padding, output_size,
                  device)  # fmt: skip


def max_unpool2d(
    input: torch.Tensor,
    indices: torch.Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    output_size: Any = None,
    *,
    device: object = None,
) -> torch.Tensor:
    """2-D max unpooling, as torch.nn.functional.max_unpool2d."""
    return _apply(MaxUnpoolFunction, input, indices, 2, kernel_size, stride, padding, output_size,
                  device)  # fmt: skip


def max_unpool3d(
    input: torch.Tensor,
    indices: torch.Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    output_size: Any = None,
    *,
    device: object = None,
) -> torch.Tensor:
    """3-D max unpooling, as torch.nn.functional.max_unpool3d."""
    return _apply(MaxUnpoolFunction, input, indices, 3, kernel_size, stride, padding, output_size,
                  device)  # fmt: skip


def _n_tuple(value: Size, n: int) -> tuple[int, ...]:
    """torch's _single / _pair / _triple: an int repeated n times, a sequence as a tuple."""
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n


class _MaxUnpoolNd(torch.nn.Module):
    """torch.nn.MaxUnpool1d/2d/3d on clpool: same arguments, attributes and repr."""

    spatial = 2

    def __init__(self, kernel_size: Size, stride: Size | None = None, padding: Size = 0) -> None:
        super().__init__()
        n = self.spatial
        self.kernel_size = _n_tuple(kernel_size, n)
        self.stride = _n_tuple(stride if stride is not None else kernel_size, n)
        self.padding = _n_tuple(padding, n)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"

    def forward(
        self, input: torch.Tensor, indices: torch.Tensor, output_size: Any = None
    ) -> torch.Tensor:
        return _apply(
            MaxUnpoolFunction, input, indices, self.spatial, self.kernel_size, self.stride,
            self.padding, output_size, None,
        )  # fmt: skip


class MaxUnpool1d(_MaxUnpoolNd):
    spatial = 1


class MaxUnpool2d(_MaxUnpoolNd):
    spatial = 2


class MaxUnpool3d(_MaxUnpoolNd):
    spatial = 3


__all__ += ["MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d", "max_unpool1d", "max_unpool2d",
            "max_unpool3d"]  # fmt: skip


# --- adaptive max pooling in 1-D, 2-D and 3-D ------------------------------------------


class AdaptiveMaxPoolFunction(torch.autograd.Function):
    """adaptive_max_pool1d/2d/3d (by `rank`) with indices; backward runs clpool's
    adaptive_max_pool{rank}d_backward."""

    @staticmethod
    def forward(
        ctx: FunctionCtx, input: torch.Tensor, output_size: OptionalSize, rank: int, device: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        label = f"adaptive_max_pool{rank}d"
        out, indices = getattr(_adaptive_max, label)(
            _host(input, label), output_size, True, index_dtype="int64", device=device
        )
        out_t, indices_t = _tensor(out, input), _tensor(indices, input)
        ctx.save_for_backward(input, indices_t)
        ctx.params = (rank, device)  # type: ignore[attr-defined]
        ctx.mark_non_differentiable(indices_t)
        return out_t, indices_t

    @staticmethod
    @once_differentiable
    def backward(
        ctx: Any, grad_output: torch.Tensor, _grad_indices: Any
    ) -> tuple[torch.Tensor | None, ...]:
        input, indices = ctx.saved_tensors
        rank, device = ctx.params
        label = f"adaptive_max_pool{rank}d_backward"
        grad = getattr(_adaptive_max, label)(
            _host(grad_output, label), _host(input, label), _host(indices, label), device=device
        )
        return _tensor(grad, input), None, None, None


def _adaptive_max_pool(
    rank: int, input: torch.Tensor, output_size: OptionalSize, return_indices: bool, device: object
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    if not return_indices and not _tracked(input):
        label = f"adaptive_max_pool{rank}d"
        out = getattr(_adaptive_max, label)(_host(input, label), output_size, device=device)
        return _tensor(out, input)
    out, indices = _apply_pair(AdaptiveMaxPoolFunction, input, output_size, rank, device)
    return (out, indices) if return_indices else out


def adaptive_max_pool1d(
    input: torch.Tensor, output_size: OptionalSize, return_indices: bool = False, *,
    device: object = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """1-D adaptive max pooling, as torch.nn.functional.adaptive_max_pool1d."""
    return _adaptive_max_pool(1, input, output_size, return_indices, device)


def adaptive_max_pool2d(
    input: torch.Tensor, output_size: OptionalSize, return_indices: bool = False, *,
    device: object = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """2-D adaptive max pooling, as torch.nn.functional.adaptive_max_pool2d."""
    return _adaptive_max_pool(2, input, output_size, return_indices, device)


def adaptive_max_pool3d(
    input: torch.Tensor, output_size: OptionalSize, return_indices: bool = False, *,
    device: object = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """3-D adaptive max pooling, as torch.nn.functional.adaptive_max_pool3d."""
    return _adaptive_max_pool(3, input, output_size, return_indices, device)


class _AdaptiveMaxPoolNd(torch.nn.Module):
    """torch.nn.AdaptiveMaxPool{rank}d on clpool: same arguments, attributes and repr."""

    __constants__ = ["output_size", "return_indices"]
    rank = 0

    def __init__(self, output_size: OptionalSize, return_indices: bool = False) -> None:
        super().__init__()
        self.output_size = output_size
        self.return_indices = return_indices

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"

    def forward(self, input: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        return _adaptive_max_pool(self.rank, input, self.output_size, self.return_indices, None)


class AdaptiveMaxPool1d(_AdaptiveMaxPoolNd):
    """torch.nn.AdaptiveMaxPool1d on clpool: same arguments, attributes and repr."""

    rank = 1


class AdaptiveMaxPool2d(_AdaptiveMaxPoolNd):
    """torch.nn.AdaptiveMaxPool2d on clpool: same arguments, attributes and repr."""

    rank = 2


class AdaptiveMaxPool3d(_AdaptiveMaxPoolNd):
    """torch.nn.AdaptiveMaxPool3d on clpool: same arguments, attributes and repr."""

    rank = 3


# --- 3-D: functions and modules (the rank-parameterised autograd functions above) ------


def max_pool3d(
    input: torch.Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    dilation: Size = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
    *,
    device: object = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """3-D max pooling, as torch.nn.functional.max_pool3d; with return_indices, also the
    int64 flat index of each maximum in its input volume."""
    return _max_pool(
        3, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, device
    )


def avg_pool3d(
    input: torch.Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
    *,
    device: object = None,
) -> torch.Tensor:
    """3-D average pooling, as torch.nn.functional.avg_pool3d."""
    return _apply(
        AvgPoolFunction, input, 3, kernel_size, stride, padding, ceil_mode, count_include_pad,
        divisor_override, device,
    )  # fmt: skip


def adaptive_avg_pool3d(
    input: torch.Tensor, output_size: OptionalSize, *, device: object = None
) -> torch.Tensor:
    """3-D adaptive average pooling, as torch.nn.functional.adaptive_avg_pool3d."""
    return _apply(AdaptiveAvgPoolFunction, input, 3, output_size, device)


class MaxPool3d(MaxPool2d):
    """torch.nn.MaxPool3d on clpool: same arguments, attributes and repr."""

    rank = 3


class AvgPool3d(AvgPool2d):
    """torch.nn.AvgPool3d on clpool: same arguments, attributes and repr."""

    rank = 3


class AdaptiveAvgPool3d(AdaptiveAvgPool2d):
    """torch.nn.AdaptiveAvgPool3d on clpool: same argument, attribute and repr."""

    rank = 3


# --- 1-D: the 2-D functions on (N, C, 1, L), as clpool.pool1d runs the 2-D kernels ------


def _widened(input: torch.Tensor, label: str) -> torch.Tensor:
    """A (C, L) or (N, C, L) input as (C, 1, L) or (N, C, 1, L)."""
    if input.dim() not in (2, 3):
        with reporting(label) as where:
            where.dtype = str(input.dtype).removeprefix("torch.")
            raise Problem(
                PoolArgumentError,
                f"expected a 2-D (C, L) or 3-D (N, C, L) input, got shape {tuple(input.shape)}",
            )
    return input.unsqueeze(-2)


def max_pool1d(
    input: torch.Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    dilation: Size = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
    *,
    device: object = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """1-D max pooling, as torch.nn.functional.max_pool1d; with return_indices, also the
    int64 index of each maximum along L."""
    with relabeled("max_pool1d"), reporting("max_pool1d"):
        # the sizes' 2-D forms, of the types the 2-D functions take
        k, s, p, d = cast(tuple[Any, ...], _pool1d._window(kernel_size, stride, padding, dilation))
        got = max_pool2d(
            _widened(input, "max_pool1d"), k, s, p, d, ceil_mode, return_indices, device=device
        )
    if isinstance(got, tuple):
        return got[0].squeeze(-2), got[1].squeeze(-2)
    return got.squeeze(-2)


def avg_pool1d(
    input: torch.Tensor,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    *,
    device: object = None,
) -> torch.Tensor:
    """1-D average pooling, as torch.nn.functional.avg_pool1d."""
    with relabeled("avg_pool1d"), reporting("avg_pool1d"):
        k, s, p = cast(tuple[Any, ...], _pool1d._window(kernel_size, stride, padding))
        got = avg_pool2d(
            _widened(input, "avg_pool1d"), k, s, p, ceil_mode, count_include_pad, device=device
        )
    return got.squeeze(-2)


def adaptive_avg_pool1d(
    input: torch.Tensor, output_size: OptionalSize, *, device: object = None
) -> torch.Tensor:
    """1-D adaptive average pooling, as torch.nn.functional.adaptive_avg_pool1d."""
    label = "adaptive_avg_pool1d"
    with relabeled(label), reporting(label):
        size = cast(OptionalSize, _pool1d._size(output_size, "output_size", 1))
        got = adaptive_avg_pool2d(_widened(input, label), size, device=device)
    return got.squeeze(-2)


class MaxPool1d(MaxPool2d):
    """torch.nn.MaxPool1d on clpool: same arguments, attributes and repr."""

    def forward(self, input: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        return max_pool1d(
            input, self.kernel_size, self.stride, self.padding, self.dilation,
            ceil_mode=self.ceil_mode, return_indices=self.return_indices,
        )  # fmt: skip


class AvgPool1d(torch.nn.Module):
    """torch.nn.AvgPool1d on clpool: same arguments, attributes (one-element tuples, as
    torch's) and repr."""

    __constants__ = ["kernel_size", "stride", "padding", "ceil_mode", "count_include_pad"]

    def __init__(
        self,
        kernel_size: Size,
        stride: Size | None = None,
        padding: Size = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> None:
        super().__init__()
        self.kernel_size = _single(kernel_size)
        self.stride = _single(stride if stride is not None else kernel_size)
        self.padding = _single(padding)
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return avg_pool1d(
            input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
            self.count_include_pad,
        )  # fmt: skip


def _single(value: Size) -> tuple[int, ...]:
    """A 1-D size as torch.nn's modules keep it: a tuple of one."""
    return tuple(value) if isinstance(value, tuple) else (value,)


class AdaptiveAvgPool1d(AdaptiveAvgPool2d):
    """torch.nn.AdaptiveAvgPool1d on clpool: same argument, attribute and repr."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return adaptive_avg_pool1d(input, self.output_size)
