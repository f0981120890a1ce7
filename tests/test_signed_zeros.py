"""The sign of an average that underflows to zero, forward and backward: PyTorch CPU's,
on every kernel path (per plane, per element, GPU tiles) and memory layout."""

from __future__ import annotations

import pytest

from clpool import policy

torch = pytest.importorskip("torch")
ct = pytest.importorskip("clpool.torch")

# Windows over x hold one or two of the smallest negative subnormals and zeros, so their
# sums are negative and their averages round to zero: -0 by IEEE division, +0 where
# PyTorch adds the quotient into a result cleared to +0 (every backward; the forwards of
# avg_pool1d, avg_pool2d NCHW and avg_pool3d).
OPS = [
    ("avg_pool1d", 1, {"kernel_size": 2}),
    ("avg_pool2d", 2, {"kernel_size": 2}),
    ("avg_pool2d", 2, {"kernel_size": 3, "stride": 2, "padding": 1}),
    ("avg_pool3d", 3, {"kernel_size": 2}),
    ("adaptive_avg_pool2d", 2, {"output_size": 2}),
    ("adaptive_avg_pool3d", 3, {"output_size": 2}),
]
PATHS = {
    "plane": {"per_plane": True},
    "element": {"per_plane": False},
    "gpu": {"gpu": True, "per_plane": False},
}
LAYOUTS = [
    "contiguous",
    "channels_last",
    "channels_last_c3",
    "channels_last_c16",
    "strided",
    "strided_channels_last",
    "transposed",
]


def _tiny(dtype: torch.dtype) -> float:
    return -(2.0**-149) if dtype == torch.float32 else -(2.0**-1074)


def _format(dims: int) -> torch.memory_format:
    return torch.channels_last if dims == 2 else torch.channels_last_3d


def _input(dims: int, layout: str, dtype: torch.dtype) -> torch.Tensor:
    """[2, 4, 6...] ([2, 3, 6...]: _c3; [2, 16, 6...]: _c16, a CPU's rows of 16 channels
    a lane) with the smallest negative subnormal at every fourth element of a row, zeros
    elsewhere; strided: every other column of a row twice as long; transposed: the last
    two axes swapped (the strided kernels' general path)."""
    spatial = (6,) * dims
    wide = "strided" in layout
    channels = {"_c3": 3, "c16": 16}.get(layout[-3:], 4)
    x = torch.zeros((2, channels, *spatial[:-1], spatial[-1] * (2 if wide else 1)), dtype=dtype)
    x[..., :: 8 if wide else 4] = _tiny(dtype)
    if "channels_last" in layout:
        x = x.contiguous(memory_format=_format(dims))
    if layout == "transposed":
        return x.transpose(-1, -2) if dims > 1 else x.transpose(0, 1)
    return x[..., ::2] if wide else x


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32 if t.dtype == torch.float32 else torch.int64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("op, dims, kwargs", OPS)
def test_zero_averages_have_pytorchs_sign(device, op, dims, kwargs, path, dtype):
    if dtype == torch.float64 and not device.double_fp_config:
        pytest.skip("the device has no float64")
    for layout in LAYOUTS:
        if dims == 1 and "channels_last" in layout:
            continue
        x = _input(dims, layout, dtype)
        want = x.clone().requires_grad_()
        y = getattr(torch.nn.functional, op)(want, **kwargs)
        g = torch.full(y.shape, _tiny(dtype), dtype=dtype)
        if "channels_last" in layout:  # grad_output channels-last too (3-D averages' is not)
            g = g.contiguous(memory_format=_format(dims))
        y.backward(g)
        got = x.clone().requires_grad_()
        with policy.use(**PATHS[path]):
            z = getattr(ct, op)(got, **kwargs)
            z.backward(g)
        assert (y == 0).any() and (want.grad == 0).any(), "the case makes no zero"
        assert torch.equal(_bits(z), _bits(y)), (op, layout, "forward")
        assert torch.equal(_bits(got.grad), _bits(want.grad)), (op, layout, "backward")
