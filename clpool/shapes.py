"""Argument checking and shape math for the pooling ops, as PyTorch defines them.

Pure Python: nothing here touches OpenCL. Failures raise `Problem`, which the op
turns into a PoolArgumentError naming the op, device and dtype.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Literal, overload

import numpy as np

from .errors import PoolArgumentError, Problem


def _bad(reason: str) -> Problem:
    return Problem(PoolArgumentError, reason)


@overload
def sizes(
    value: object, name: str, n: int, *, allow_none: Literal[False] = False
) -> tuple[int, ...]: ...
@overload
def sizes(value: object, name: str, n: int, *, allow_none: bool) -> tuple[int | None, ...]: ...
def sizes(value: object, name: str, n: int, *, allow_none: bool = False) -> tuple[int | None, ...]:
    """An int or a tuple of `n` ints (one per spatial axis) as a tuple of `n`; a tuple of
    one int stands for all `n`; None entries only where allowed."""
    what = "an int or a pair of ints" if n == 2 else f"an int or a tuple of {n} ints"
    items = list(value) if isinstance(value, (tuple, list)) else [value] * n
    if len(items) == 1:
        items = items * n
    if len(items) != n:
        raise _bad(f"{name} must be {what}, got {value!r}")
    out: list[int | None] = []
    for v in items:
        if v is None and allow_none:
            out.append(None)
            continue
        if isinstance(v, bool):
            raise _bad(f"{name} must be {what}, got {value!r}")
        try:
            i = operator.index(v)  # type: ignore[arg-type]  # anything else: TypeError
        except TypeError:
            raise _bad(f"{name} must be {what}, got {value!r}") from None
        if not -(2**31) <= i < 2**31:
            raise _bad(f"{name} must fit in 32 bits, got {value!r}")
        out.append(i)
    return tuple(out)


@overload
def pair(value: object, name: str, *, allow_none: Literal[False] = False) -> tuple[int, ...]: ...
@overload
def pair(value: object, name: str, *, allow_none: bool) -> tuple[int | None, ...]: ...
def pair(value: object, name: str, *, allow_none: bool = False) -> tuple[int | None, ...]:
    """An int or a pair of ints (h, w) as a pair; None entries only where allowed."""
    return sizes(value, name, 2, allow_none=allow_none)


def split_batch_nd(shape: tuple[int, ...], spatial: int) -> tuple[int, ...]:
    """(N, C, *spatial sizes) of a batched input, or of an unbatched (C, *sizes) one seen
    as N = 1, for an op over `spatial` axes (1, 2 or 3)."""
    names = ("L",) if spatial == 1 else ("D", "H", "W")[3 - spatial :]
    axes = ", ".join(names)
    if len(shape) not in (spatial + 1, spatial + 2):
        raise _bad(
            f"expected a {spatial + 1}-D (C, {axes}) or {spatial + 2}-D (N, C, {axes}) input, "
            f"got shape {shape}"
        )
    full = tuple(shape) if len(shape) == spatial + 2 else (1, *shape)
    if 0 in full[1:]:
        raise _bad(f"input dimensions other than the batch must be non-zero, got shape {shape}")
    return full


def split_batch(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """(N, C, H, W) of a 4-D input, or of a 3-D (C, H, W) input seen as N = 1."""
    n, c, h, w = split_batch_nd(shape, 2)
    return n, c, h, w


def output_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output size along one axis (may be < 1; the caller checks)."""
    span = size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = span // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


@dataclass(frozen=True)
class Window:
    """A sliding window over an (H, W) plane and the output plane it gives."""

    kh: int
    kw: int
    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int
    oh: int
    ow: int

    def args(self) -> tuple[int, ...]:
        """The window's sizes in the order the max pooling kernels take them."""
        return (self.kh, self.kw, self.sh, self.sw, self.ph, self.pw, self.dh, self.dw)

    def avg_args(self) -> tuple[int, ...]:
        """The window's sizes in the order the average pooling kernels take them."""
        return (self.kh, self.kw, self.sh, self.sw, self.ph, self.pw)


def flag(value: object, name: str) -> bool:
    """A bool argument (a bool, or an int or numpy scalar standing for one)."""
    if isinstance(value, (bool, int, np.bool_, np.integer)):
        return bool(value)
    raise _bad(f"{name} must be a bool, got {value!r}")


# Window positions are 32-bit in the kernels: the padded axis, the window's extent and
# MAX_TILE strides (a work-item's rows or columns) must stay below 2^31. An axis with one
# window never uses its stride for positions, so a larger one is reported as the padded
# axis + 1 (the same window).
MAX_TILE = 64


def _window_sizes(
    n: int, kernel_size: object, stride: object, padding: object, dilation: object
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(kernel_size, stride, padding, dilation) of a window over `n` axes, each a tuple of
    `n` checked ints; no stride means the kernel size."""
    k = sizes(kernel_size, "kernel_size", n)
    no_stride = stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0)
    s = k if no_stride else sizes(stride, "stride", n)
    p = sizes(padding, "padding", n)
    d = sizes(dilation, "dilation", n)
    if min(k) <= 0:
        raise _bad(f"kernel_size must be greater than zero, got {k}")
    if min(s) <= 0:
        raise _bad(f"stride must be greater than zero, got {s}")
    if min(d) <= 0:
        raise _bad(f"dilation must be greater than zero, got {d}")
    if min(p) < 0:
        raise _bad(f"padding must be non-negative, got {p}")
    return k, s, p, d


def window(
    hw: tuple[int, int],
    kernel_size: object,
    stride: object,
    padding: object,
    dilation: object,
    ceil_mode: object,
    *,
    family: str,
) -> Window:
    """Check a max ("max") or average ("avg") pooling window against the input plane."""
    k, s, p, d = _window_sizes(2, kernel_size, stride, padding, dilation)
    for axis in range(2):
        limit = ((k[axis] - 1) * d[axis] + 1) // 2 if family == "max" else k[axis] // 2
        if p[axis] > limit:
            raise _bad(
                f"padding should be at most half of the kernel size, got padding {p} "
                f"for kernel_size {k}" + (f" and dilation {d}" if family == "max" else "")
            )
    ceil = flag(ceil_mode, "ceil_mode")
    out = tuple(output_size(hw[a], k[a], s[a], p[a], d[a], ceil) for a in range(2))
    if min(out) < 1:
        raise _bad(f"output size is too small: input plane {hw} gives output {out}")
    s = tuple(min(s[a], hw[a] + 2 * p[a] + 1) if out[a] == 1 else s[a] for a in range(2))
    for a in range(2):
        if hw[a] + 2 * p[a] + (k[a] - 1) * d[a] + MAX_TILE * s[a] >= 2**31:
            raise _bad(
                f"input plane {hw} with kernel_size {k}, stride {s}, padding {p} and "
                f"dilation {d} is too large for 32-bit window arithmetic"
            )
    return Window(
        kh=k[0], kw=k[1], sh=s[0], sw=s[1], ph=p[0], pw=p[1], dh=d[0], dw=d[1], oh=out[0], ow=out[1]
    )


@dataclass(frozen=True)
class Window3d:
    """A sliding window over a (D, H, W) volume and the output volume it gives: each field
    holds its (d, h, w) sizes."""

    k: tuple[int, ...]
    s: tuple[int, ...]
    p: tuple[int, ...]
    d: tuple[int, ...]
    out: tuple[int, ...]


def window3d(
    dhw: tuple[int, ...],
    kernel_size: object,
    stride: object,
    padding: object,
    dilation: object,
    ceil_mode: object,
    *,
    family: str,
) -> Window3d:
    """Check a 3-D max ("max") or average ("avg") pooling window against the input volume,
    as ATen's pool3d_shape_check: padding at most half the kernel (dilation aside), and
    average pooling refuses a volume smaller than its kernel."""
    k, s, p, d = _window_sizes(3, kernel_size, stride, padding, dilation)
    if family == "avg" and any(dhw[a] < k[a] for a in range(3)):
        raise _bad(f"input volume {tuple(dhw)} is smaller than kernel_size {k}")
    if any(p[a] > k[a] // 2 for a in range(3)):
        raise _bad(
            f"padding should be at most half of the kernel size, got padding {p} "
            f"for kernel_size {k}"
        )
    ceil = flag(ceil_mode, "ceil_mode")
    out = tuple(output_size(dhw[a], k[a], s[a], p[a], d[a], ceil) for a in range(3))
    if min(out) < 1:
        raise _bad(f"output size is too small: input volume {tuple(dhw)} gives output {out}")
    s = tuple(min(s[a], dhw[a] + 2 * p[a] + 1) if out[a] == 1 else s[a] for a in range(3))
    if any(dhw[a] + 2 * p[a] + (k[a] - 1) * d[a] + s[a] >= 2**31 for a in range(3)):
        raise _bad(
            f"input volume {tuple(dhw)} with kernel_size {k}, stride {s}, padding {p} and "
            f"dilation {d} is too large for 32-bit window arithmetic"
        )
    return Window3d(k=k, s=s, p=p, d=d, out=out)


def adaptive_output(spatial: tuple[int, ...], output_size: object) -> tuple[int, ...]:
    """The output sizes of adaptive pooling over the input's `spatial` sizes; None keeps
    that input size."""
    size = sizes(output_size, "output_size", len(spatial), allow_none=True)
    out = tuple(spatial[a] if (v := size[a]) is None else v for a in range(len(spatial)))
    if min(out) < 0:
        raise _bad(f"output_size must be non-negative, got {output_size!r}")
    return out


def shrinks(spatial: tuple[int, ...], out: tuple[int, ...]) -> bool:
    """Whether adaptive pooling of `spatial` to `out` upsamples no axis and empties none (no
    position then lies in more than two cells of an axis)."""
    return all(0 < o <= s for o, s in zip(out, spatial, strict=True))


def divisor(value: object) -> int:
    """divisor_override as a non-zero int (0 means no override)."""
    if value is None:
        return 0
    if isinstance(value, (tuple, list)):
        raise _bad(f"divisor_override must be an int, got {value!r}")
    (v, _) = pair(value, "divisor_override")
    if v == 0:
        raise _bad("divisor_override must not be zero")
    return v


def avg_divisor(
    size: tuple[int, ...], win: Window | Window3d, count_include_pad: bool, override: int
) -> int:
    """The divisor the average pooling kernels take, over the 2 or 3 axes of `size`:
    `override` if set, else the window's element count when every window divides by that
    (each lies inside the padded input, and count_include_pad or no padding) and it fits
    the kernels' int, else 0 (each window computes its own)."""
    if override:
        return override
    if isinstance(win, Window3d):
        k, s, p, out = win.k, win.s, win.p, win.out
    else:
        k, s, p, out = (win.kh, win.kw), (win.sh, win.sw), (win.ph, win.pw), (win.oh, win.ow)
    axes = zip(out, s, p, k, size, strict=True)
    whole = all((o - 1) * st - pad + kk <= n + pad for o, st, pad, kk, n in axes)
    count = math.prod(k)
    fixed = whole and (count_include_pad or not any(p)) and count < 2**31
    return count if fixed else 0


def expect_shape(name: str, got: tuple[int, ...], want: tuple[int, ...]) -> None:
    """Check that a gradient or an index tensor has the forward output's shape."""
    if tuple(got) != tuple(want):
        raise _bad(f"{name} must have shape {tuple(want)}, got {tuple(got)}")


def span(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """1 + the largest distance, in elements, between two elements of a view of `shape`
    and `strides` (negative strides too)."""
    return 1 + sum((n - 1) * abs(s) for n, s in zip(shape, strides, strict=True))


def c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """True when element `strides` lay `shape` out C-contiguous (axes of one element
    aside)."""
    expected = 1
    for side, stride in zip(reversed(shape), reversed(strides), strict=True):
        if side != 1 and stride != expected:
            return False
        expected *= side
    return True


def channels_last(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """True when a 4-D array of `shape` and element `strides` is laid out channels-last
    (PyTorch's is_channels_last_strides_2d, which suggest_memory_format follows, so a
    channels range sliced off an NHWC tensor counts) and is not also C-contiguous (as
    torch's is_contiguous(memory_format=torch.channels_last) and not is_contiguous())."""
    if len(shape) != 4 or strides[1] == 0 or c_contiguous(shape, strides):
        return False
    least = 0
    for d in (1, 3, 2, 0):
        if shape[d] == 0 or strides[d] < least or (d == 0 and least == strides[1]):
            return False
        least = strides[d] * (shape[d] if shape[d] > 1 else 1)
    return True


def channels_last_3d(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """True when a 5-D array of `shape` and element `strides` is laid out channels-last-3d
    (PyTorch's is_channels_last_strides_3d, which suggest_memory_format follows) and is not
    also C-contiguous: channels_last's rule for (N, C, D, H, W)."""
    if len(shape) != 5 or strides[1] == 0 or c_contiguous(shape, strides):
        return False
    least = 0
    for d in (1, 4, 3, 2, 0):
        if shape[d] == 0 or strides[d] < least or (d == 0 and least == strides[1]):
            return False
        least = strides[d] * (shape[d] if shape[d] > 1 else 1)
    return True


def channels_last_1d(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """True when a 3-D (N, C, L) array of `shape` and element `strides` has its channels
    innermost ((N, L, C) memory): when its (N, C, 1, L) view, as the 1-D ops and PyTorch's
    see it, is channels_last."""
    if len(shape) != 3:
        return False
    n, c, length = shape
    return channels_last((n, c, 1, length), (*strides[:2], strides[2] * length, strides[2]))


def stored_channels_last(a: np.ndarray) -> np.ndarray:
    """`a` (N, C, *spatial) as an array of the same shape and values whose memory is
    channels-last (NHWC for 4-D, NDHWC for 5-D): C varies fastest."""
    order = (0, *range(2, a.ndim), 1)
    moved: np.ndarray = np.ascontiguousarray(a.transpose(order)).transpose(np.argsort(order))
    return moved
