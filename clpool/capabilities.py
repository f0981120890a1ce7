"""The capability probe: which dtypes a device computes, read from its extensions and
OpenCL C features (never from half_fp_config, which NVIDIA and Oclgrind refuse)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

import pyopencl as cl

from . import policy

if TYPE_CHECKING:
    from pyopencl._cl import NameVersion

T = TypeVar("T")


def query(device: cl.Device, attr: str, default: T) -> T:
    """Attribute `attr` of `device`, or `default` where the driver does not answer."""
    try:
        value: T = getattr(device, attr)
        return value
    except (cl.Error, AttributeError):
        return default


def _features(device: cl.Device) -> set[str]:
    names = set(query(device, "extensions", "").split())
    features: Sequence[NameVersion] = query(device, "opencl_c_features", []) or []
    names.update(feature.name for feature in features)
    return names


def has_fp16(device: cl.Device) -> bool:
    """True when the device has native half (cl_khr_fp16 or __opencl_c_fp16)."""
    return bool({"cl_khr_fp16", "__opencl_c_fp16"} & _features(device))


def has_fp64(device: cl.Device) -> bool:
    """True when the device has double (cl_khr_fp64 or __opencl_c_fp64)."""
    return bool({"cl_khr_fp64", "__opencl_c_fp64"} & _features(device))


def has_bf16(device: cl.Device) -> bool:
    """True: bfloat16 is stored as ushort and computed in float32 with core OpenCL C only
    (shifts and integer rounding), so every device takes it."""
    return True


def fp16_storage_opt_in() -> bool:
    """True when CLPOOL_FP16=storage allows half storage on a device without cl_khr_fp16."""
    return policy.current().fp16_storage


def dtypes(device: cl.Device) -> list[str]:
    """The dtypes clpool runs on the device: float32; float64 with fp64; float16 with fp16,
    or anywhere with CLPOOL_FP16=storage; bfloat16 everywhere."""
    found = ["float32"]
    if has_fp64(device):
        found.append("float64")
    if has_fp16(device) or fp16_storage_opt_in():
        found.append("float16")
    if has_bf16(device):
        found.append("bfloat16")
    return found
