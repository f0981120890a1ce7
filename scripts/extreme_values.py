"""Compare the average ops with PyTorch CPU, bit for bit, on inputs and gradients full of
extreme values: subnormals, values near 2^-80 (where a quotient's remainder underflows),
values near overflow, infinities, NaN and signed zeros.

float32 and bfloat16 (PyTorch's float32 result rounded to bfloat16), contiguous and
channels-last, forward and backward, on clpool's default device. Prints each mismatch
with its first elements, then the count. Usage (the lent H200, or any device):

    CLPOOL_DEVICE=nvidia python3 scripts/extreme_values.py [--fast]

--fast: float32 and the windows of 2 only, with the adaptive ops (about a minute).
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

import clpool.torch as ct

EXPONENTS = (-149, -140, -130, -127, -120, -100, -90, -81, -80, -79, 0, 0, 0, 30, 90, 100, 120, 126)
WINDOWS_2D = [
    {"kernel_size": 3, "stride": 2, "padding": 1},
    {"kernel_size": 3, "stride": 1, "padding": 1},
    {"kernel_size": 2, "stride": 2},
    {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False},
    {"kernel_size": 3, "stride": 2, "padding": 1, "divisor_override": 7},
    {"kernel_size": 3, "stride": 2, "ceil_mode": True},
    {"kernel_size": (5, 3), "stride": (1, 2), "padding": (2, 1)},
]
WINDOWS_3D = [
    {"kernel_size": 3, "stride": 2, "padding": 1},
    {"kernel_size": 2},
    {"kernel_size": 3, "stride": 1, "padding": 1, "divisor_override": 11},
]
ADAPTIVE = [
    ((4, 16, 64, 64), [{"output_size": 32}, {"output_size": 7}], "adaptive_avg_pool2d"),
    ((2, 8, 16, 28, 28), [{"output_size": (8, 14, 14)}, {"output_size": 5}], "adaptive_avg_pool3d"),
]


def extreme(shape: tuple[int, ...]) -> torch.Tensor:
    """Normal samples scaled by 2^e, e drawn from EXPONENTS; about 1% each of inf, -inf
    and NaN, 1% +0 and 1% -0."""
    x = torch.randn(shape, dtype=torch.float64)
    scales = torch.tensor([2.0**e for e in EXPONENTS], dtype=torch.float64)
    x = x * scales[torch.randint(len(EXPONENTS), shape)]
    u = torch.rand(shape)
    x[u < 0.003] = float("inf")
    x[(u >= 0.003) & (u < 0.006)] = float("-inf")
    x[(u >= 0.006) & (u < 0.009)] = float("nan")
    x[(u >= 0.009) & (u < 0.02)] = 0.0
    x[(u >= 0.02) & (u < 0.03)] = -0.0
    return x.float()


def mismatches(got: torch.Tensor, want: torch.Tensor) -> int:
    """How many elements differ in their bits (NaN matches NaN); prints the first four."""
    a, b = got.float().contiguous(), want.float().contiguous()
    same = (a.view(torch.int32) == b.view(torch.int32)) | (a.isnan() & b.isnan())
    for at in (~same).nonzero()[:4]:
        i = tuple(at.tolist())
        print(f"   at {list(i)}: clpool {a[i].item().hex()}, torch {b[i].item().hex()}")
    return int((~same).sum())


def main(fast: bool) -> int:
    torch.manual_seed(0)
    windows_2d, windows_3d = WINDOWS_2D, WINDOWS_3D
    if fast:
        windows_2d, windows_3d = [{"kernel_size": 2, "stride": 2}], [{"kernel_size": 2}]
    cases = [
        *ADAPTIVE,
        ((2, 3, 17, 19), windows_2d, "avg_pool2d"),
        ((4, 16, 64, 64), windows_2d, "avg_pool2d"),
        ((2, 3, 7, 9, 11), windows_3d, "avg_pool3d"),
        ((2, 8, 16, 28, 28), windows_3d, "avg_pool3d"),
    ]
    bad = 0
    for dtype in (torch.float32,) if fast else (torch.float32, torch.bfloat16):
        for shape, windows, op in cases:
            for kwargs in windows:
                for last in (False, True):
                    x = extreme(shape).to(dtype)
                    if last:
                        fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
                        x = x.contiguous(memory_format=fmt)
                    want = x.float().requires_grad_()
                    y = getattr(F, op)(want, **kwargs)
                    g = extreme(tuple(y.shape)).to(dtype)
                    y.backward(g.float())
                    got = x.detach().requires_grad_()
                    z = getattr(ct, op)(got, **kwargs)
                    z.backward(g)
                    forward = mismatches(z, y.detach().to(dtype))
                    backward = mismatches(got.grad, want.grad.to(dtype))
                    if forward or backward:
                        layout = "channels-last" if last else "contiguous"
                        print(f"MISMATCH {dtype} {op} {shape} {kwargs} {layout}: "
                              f"forward {forward}, backward {backward}")  # fmt: skip
                    bad += forward + backward
    print("mismatched elements:", bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main("--fast" in sys.argv[1:]))
