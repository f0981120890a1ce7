"""clpool for PyTorch: torch.nn.functional's pooling functions and torch.nn's pooling
modules, computed by clpool's OpenCL kernels, with autograd through clpool's backward
kernels.

Tensors go in and tensors come out, keeping dtype, torch device and memory format. A
tensor on any torch device is copied to the host, pooled on clpool's OpenCL device (the
keyword-only ``device=``, else clpool's default) and the result moved back. Needs the
extra ``torch``; ``import clpool`` itself never imports torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.autograd.function import FunctionCtx, once_differentiable

from clpool import ops as _ops
from clpool.adopt import tensor_channels_last
from clpool.errors import Problem, UnsupportedDtypeError, reporting

__all__ = [
    "AdaptiveAvgPool2d",
    "AvgPool2d",
    "MaxPool2d",
    "adaptive_avg_pool2d",
    "avg_pool2d",
    "max_pool2d",
]

_size_2_t = int | tuple[int, ...]
_size_opt_t = int | None | tuple[int | None, ...]


# --- tensors <-> host arrays ---------------------------------------------------------


def _host(t: torch.Tensor, label: str) -> np.ndarray:
    """`t` as a host numpy array: a view of a channels-last tensor, else C-contiguous (a
    copy where it must be)."""
    t = t.detach().cpu()
    if not tensor_channels_last(t):
        t = t.contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: clpool refuses it for now
        with reporting(label) as where:
            where.dtype = "bfloat16"
            raise Problem(
                UnsupportedDtypeError,
                "dtype bfloat16 is not supported (float16, float32 or float64)",
            )
    return t.numpy()


def _tensor(a: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    """Host result `a` as a tensor on `like`'s torch device, with `a`'s strides (clpool
    gives a channels-last input's results channels-last)."""
    return torch.from_numpy(a).to(like.device)


def _tracked(input: torch.Tensor) -> bool:
    """True when autograd records operations on `input` here."""
    return torch.is_grad_enabled() and input.requires_grad


# --- autograd functions --------------------------------------------------------------


class MaxPool2dFunction(torch.autograd.Function):
    """max_pool2d with indices; backward runs clpool.max_pool2d_with_indices_backward."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: FunctionCtx,
        input: torch.Tensor,
        kernel_size: _size_2_t,
        stride: _size_2_t | None,
        padding: _size_2_t,
        dilation: _size_2_t,
        ceil_mode: bool,
        device: object,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        label = "max_pool2d_with_indices"
        out, indices = _ops.max_pool2d_with_indices(
            _host(input, label), kernel_size, stride, padding, dilation, ceil_mode,
            index_dtype="int64", device=device,
        )  # fmt: skip
        out_t, indices_t = _tensor(out, input), _tensor(indices, input)
        ctx.save_for_backward(input, indices_t)
        ctx.params = (kernel_size, stride, padding, dilation, ceil_mode, device)  # type: ignore[attr-defined]
        ctx.mark_non_differentiable(indices_t)
        return out_t, indices_t

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_output: torch.Tensor, _grad_indices: Any) -> tuple:
        input, indices = ctx.saved_tensors
        kernel_size, stride, padding, dilation, ceil_mode, device = ctx.params
        label = "max_pool2d_with_indices_backward"
        grad = _ops.max_pool2d_with_indices_backward(
            _host(grad_output, label),
            _host(input, label),
            indices=_host(indices, label),
            kernel_size=kernel_size,
            stride=stride,
            padding=padding,
            dilation=dilation,
            ceil_mode=ceil_mode,
            device=device,
        )
        return _tensor(grad, input), None, None, None, None, None, None


class AvgPool2dFunction(torch.autograd.Function):
    """avg_pool2d; backward runs clpool.avg_pool2d_backward."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: FunctionCtx,
        input: torch.Tensor,
        kernel_size: _size_2_t,
        stride: _size_2_t | None,
        padding: _size_2_t,
        ceil_mode: bool,
        count_include_pad: bool,
        divisor_override: int | None,
        device: object,
    ) -> torch.Tensor:
        out = _ops.avg_pool2d(
            _host(input, "avg_pool2d"), kernel_size, stride, padding, ceil_mode,
            count_include_pad, divisor_override, device=device,
        )  # fmt: skip
        ctx.save_for_backward(input)
        ctx.params = (  # type: ignore[attr-defined]
            kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, device
        )  # fmt: skip
        return _tensor(out, input)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple:
        (input,) = ctx.saved_tensors
        kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, device = (
            ctx.params
        )
        label = "avg_pool2d_backward"
        grad = _ops.avg_pool2d_backward(
            _host(grad_output, label),
            _host(input, label),
            kernel_size=kernel_size,
            stride=stride,
            padding=padding,
            ceil_mode=ceil_mode,
            count_include_pad=count_include_pad,
            divisor_override=divisor_override,
            device=device,
        )
        return _tensor(grad, input), None, None, None, None, None, None, None


class AdaptiveAvgPool2dFunction(torch.autograd.Function):
    """adaptive_avg_pool2d; backward runs clpool.adaptive_avg_pool2d_backward."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: FunctionCtx, input: torch.Tensor, output_size: _size_opt_t, device: object
    ) -> torch.Tensor:
        out = _ops.adaptive_avg_pool2d(
            _host(input, "adaptive_avg_pool2d"), output_size, device=device
        )
        ctx.save_for_backward(input)
        ctx.device = device  # type: ignore[attr-defined]
        return _tensor(out, input)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple:
        (input,) = ctx.saved_tensors
        label = "adaptive_avg_pool2d_backward"
        grad = _ops.adaptive_avg_pool2d_backward(
            _host(grad_output, label), _host(input, label), device=ctx.device
        )
        return _tensor(grad, input), None, None


# --- functions with torch.nn.functional's names and signatures -----------------------


def max_pool2d(
    input: torch.Tensor,
    kernel_size: _size_2_t,
    stride: _size_2_t | None = None,
    padding: _size_2_t = 0,
    dilation: _size_2_t = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
    *,
    device: object = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """2-D max pooling, as torch.nn.functional.max_pool2d; with return_indices, also the
    int64 flat index of each maximum in its input plane."""
    if not return_indices and not _tracked(input):
        out = _ops.max_pool2d(
            _host(input, "max_pool2d"), kernel_size, stride, padding, dilation, ceil_mode,
            device=device,
        )  # fmt: skip
        return _tensor(out, input)
    out, indices = MaxPool2dFunction.apply(
        input, kernel_size, stride, padding, dilation, ceil_mode, device
    )
    return (out, indices) if return_indices else out


def avg_pool2d(
    input: torch.Tensor,
    kernel_size: _size_2_t,
    stride: _size_2_t | None = None,
    padding: _size_2_t = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
    *,
    device: object = None,
) -> torch.Tensor:
    """2-D average pooling, as torch.nn.functional.avg_pool2d."""
    return AvgPool2dFunction.apply(
        input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
        device,
    )  # fmt: skip


def adaptive_avg_pool2d(
    input: torch.Tensor, output_size: _size_opt_t, *, device: object = None
) -> torch.Tensor:
    """2-D adaptive average pooling, as torch.nn.functional.adaptive_avg_pool2d."""
    return AdaptiveAvgPool2dFunction.apply(input, output_size, device)


# --- modules mirroring torch.nn ------------------------------------------------------


class MaxPool2d(torch.nn.Module):
    """torch.nn.MaxPool2d on clpool: same arguments, attributes and repr."""

    __constants__ = ["kernel_size", "stride", "padding", "dilation", "return_indices", "ceil_mode"]

    def __init__(
        self,
        kernel_size: _size_2_t,
        stride: _size_2_t | None = None,
        padding: _size_2_t = 0,
        dilation: _size_2_t = 1,
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
        return max_pool2d(
            input, self.kernel_size, self.stride, self.padding, self.dilation,
            ceil_mode=self.ceil_mode, return_indices=self.return_indices,
        )  # fmt: skip


class AvgPool2d(torch.nn.Module):
    """torch.nn.AvgPool2d on clpool: same arguments, attributes and repr."""

    __constants__ = [
        "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"
    ]  # fmt: skip

    def __init__(
        self,
        kernel_size: _size_2_t,
        stride: _size_2_t | None = None,
        padding: _size_2_t = 0,
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
        return avg_pool2d(
            input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
            self.count_include_pad, self.divisor_override,
        )  # fmt: skip


class AdaptiveAvgPool2d(torch.nn.Module):
    """torch.nn.AdaptiveAvgPool2d on clpool: same argument, attribute and repr."""

    __constants__ = ["output_size"]

    def __init__(self, output_size: _size_opt_t) -> None:
        super().__init__()
        self.output_size = output_size

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return adaptive_avg_pool2d(input, self.output_size)
