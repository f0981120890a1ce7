"""OpenCL device discovery, device choice and the capability probe."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import cache
from typing import TypeVar

import pyopencl as cl

from . import icd, verify
from .capabilities import has_bf16, has_fp16, has_fp64, query
from .errors import KernelError, PoolArgumentError, PoolError, Problem

Named = TypeVar("Named", cl.Device, cl.Platform)
TYPE_NAMES = (
    (cl.device_type.GPU, "GPU"),
    (cl.device_type.CPU, "CPU"),
    (cl.device_type.ACCELERATOR, "ACCELERATOR"),
)


@dataclass(frozen=True)
class DeviceInfo:
    """One OpenCL device, what it can do, and clpool's verdict on it."""

    index: int
    platform: str
    name: str
    vendor: str
    type: str
    opencl_version: str
    driver_version: str
    compute_units: int
    global_mem: int
    local_mem: int
    max_work_group_size: int
    fp16: bool
    bf16: bool  # bfloat16 storage computed in float32: every device
    fp64: bool
    verdict: str  # verify.VERIFIED, FAILED or UNVERIFIED
    reason: str  # why it failed, else ""
    default: bool  # the device clpool chooses when told nothing

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def type_name(device: cl.Device) -> str:
    return next((name for bit, name in TYPE_NAMES if device.type & bit), "OTHER")


@cache
def cl_devices() -> tuple[cl.Device, ...]:
    """Every OpenCL device of every platform, in the ICD loader's platform order."""
    found = []
    try:
        platforms = cl.get_platforms()
    except cl.Error:
        platforms = []
    icd.warn_if_registered_too_late(len(platforms))
    for platform in platforms:
        try:
            found.extend(platform.get_devices())
        except cl.Error:
            continue
    return tuple(found)


def describe(device: cl.Device, index: int, default: bool = False) -> DeviceInfo:
    """The DeviceInfo of one OpenCL device, with the verdict known now."""
    verdict = verify.cached(device)
    return DeviceInfo(
        index=index,
        platform=device.platform.name.strip(),
        name=device.name.strip(),
        vendor=device.vendor.strip(),
        type=type_name(device),
        opencl_version=device.version.strip(),
        driver_version=query(device, "driver_version", "").strip(),
        compute_units=device.max_compute_units,
        global_mem=device.global_mem_size,
        local_mem=device.local_mem_size,
        max_work_group_size=device.max_work_group_size,
        fp16=has_fp16(device),
        bf16=has_bf16(device),
        fp64=has_fp64(device),
        verdict=verdict.status,
        reason=verdict.reason,
        default=default,
    )


def devices(verified: bool = False) -> list[DeviceInfo]:
    """Every OpenCL device with its platform, type, capabilities and verdict; with
    `verified`, each device not yet verified is verified first (a child process each)."""
    found = cl_devices()
    if verified:
        for i, d in enumerate(found):
            verify.verify(d, i)
    chosen = _default(found, run=False)
    return [describe(d, i, d == chosen) for i, d in enumerate(found)]


def _default(found: tuple[cl.Device, ...], run: bool) -> cl.Device | None:
    """The first verified GPU, else the first verified CPU (verifying candidates in that
    order when `run`, else judging by the verdicts known now)."""
    for bit in (cl.device_type.GPU, cl.device_type.CPU):
        for i, d in enumerate(found):
            if d.type & bit:
                verdict = verify.verify(d, i) if run else verify.cached(d)
                if verdict.status == verify.VERIFIED:
                    return d
    return None


def _bad(reason: str) -> Problem:
    return Problem(PoolArgumentError, reason)


def _pick(spec: str, items: Sequence[Named], what: str) -> Named:
    """The item of `items` named by `spec`: an index, or a case-insensitive piece of its
    name."""
    if spec.isdecimal() and spec.isascii():
        i = int(spec)
        if i < len(items):
            return items[i]
        raise _bad(f"{what} index {i} out of range (0..{len(items) - 1})")
    for item in items:
        if spec.lower() in item.name.lower():
            return item
    raise _bad(f"no OpenCL {what} matches {spec!r}")


WORDS = {
    "gpu": lambda d: bool(d.type & cl.device_type.GPU),
    "cpu": lambda d: bool(d.type & cl.device_type.CPU),
    "pocl": lambda d: "portable computing language" in d.platform.name.lower(),
}


def _match(spec: object, source: str) -> cl.Device:
    """The device that `spec` names (see select); `source` says where spec came from."""
    found = cl_devices()
    if not found:
        raise _bad("no OpenCL device found (install clpool[pocl] for a CPU device)")
    if isinstance(spec, cl.Device):
        return spec
    if isinstance(spec, DeviceInfo):
        spec = spec.index
    if isinstance(spec, bool) or not isinstance(spec, (int, str)):
        raise _bad(
            f"{source} must be a pyopencl Device, an index, 'platform:device', cpu, "
            f"gpu, pocl or a name, got {spec!r}"
        )
    if isinstance(spec, int):
        if 0 <= spec < len(found):
            return found[spec]
        raise _bad(f"device index {spec} out of range (0..{len(found) - 1})")
    key = spec.strip()
    if key.lower() in WORDS:
        kind = [(i, d) for i, d in enumerate(found) if WORDS[key.lower()](d)]
        if not kind:
            raise _bad(f"no OpenCL device matches {spec!r}")
        good = [d for i, d in kind if verify.verify(d, i).status == verify.VERIFIED]
        return (good or [kind[0][1]])[0]
    if ":" in key:
        platform_spec, _, device_spec = key.partition(":")
        platform = _pick(platform_spec.strip(), cl.get_platforms(), "platform")
        return _pick(device_spec.strip() or "0", platform.get_devices(), "device")
    if key.isdecimal() and key.isascii():
        return _pick(key, list(found), "device")
    for d in found:
        if key.lower() in d.name.lower() or key.lower() in d.platform.name.lower():
            return d
    raise _bad(f"no OpenCL device matches {spec!r}")


def _env(name: str) -> str | None:
    """An environment variable's value, None when unset or blank."""
    value = os.environ.get(name, "").strip()
    return value or None


def choose(spec: object = None) -> cl.Device:
    """The device to run on: the one `spec` names (a pyopencl Device, an index
    into devices(), "platform:device" indices into pyopencl.get_platforms(), the words cpu,
    gpu or pocl, or a case-insensitive piece of the platform or device name); else the one
    CLPOOL_DEVICE names (same forms); else PYOPENCL_CTX, in PyOpenCL's meaning; else the
    first verified GPU, else the first verified CPU. A device whose canary failed is never
    chosen by default; one named is returned as it is (see require)."""
    device: cl.Device | None
    if spec is not None:
        device = _match(spec, "device")
    elif (env := _env("CLPOOL_DEVICE")) is not None:
        device = _in_env("CLPOOL_DEVICE", env)
    elif (env := _env("PYOPENCL_CTX")) is not None:
        device = _in_env("PYOPENCL_CTX", env if ":" in env else env + ":0")
    else:
        device = _default(cl_devices(), run=True)
        if device is None:
            raise Problem(
                KernelError,
                "no OpenCL device passed clpool's verification: "
                + "; ".join(f"{d.name} ({d.platform}): {d.reason or d.verdict}" for d in devices())
                + " (see `clpool devices`)",
            )
    return device


def select(spec: object = None) -> cl.Device:
    """The device choose() gives, once verified (require)."""
    return require(choose(spec))


def _in_env(name: str, value: str) -> cl.Device:
    """The device an environment variable names; a bad value is an error naming it."""
    try:
        return _match(value, name)
    except Problem as p:
        raise _bad(f"{name}={value!r}: {p.reason}") from None


def require(device: cl.Device) -> cl.Device:
    """`device` once verified (verifying it first if needed); a KernelError if it failed."""
    found = cl_devices()
    index = found.index(device) if device in found else -1
    if index < 0:
        return device  # a device outside the listing (a sub-device): nothing to run it by
    verdict = verify.verify(device, index)
    if verdict.status == verify.FAILED:
        raise Problem(
            KernelError,
            f"clpool refuses this device: {verdict.reason} "
            f"(verdict cached in {verify.cache_file()})",
        )
    return device


@dataclass(frozen=True)
class Runtime:
    """The context and in-order queue clpool uses on one device."""

    device: cl.Device
    context: cl.Context
    queue: cl.CommandQueue


_runtimes: dict[int, Runtime] = {}
_runtimes_lock = threading.Lock()
_forked = False  # this process was forked after its parent had used OpenCL


def _after_fork_in_child() -> None:
    global _forked
    _forked = _forked or bool(_runtimes) or cl_devices.cache_info().currsize > 0


os.register_at_fork(after_in_child=_after_fork_in_child)


def refuse_if_forked() -> None:
    """Refuse to run in a process forked after OpenCL was initialised: OpenCL state does
    not survive fork (PoCL's threads are gone, and a call hangs)."""
    if _forked:
        raise Problem(
            PoolError,
            "this process was forked after its parent had initialised OpenCL, which does not "
            "survive fork; start worker processes with the spawn method "
            '(multiprocessing.set_start_method("spawn"), or '
            'DataLoader(multiprocessing_context="spawn"))',
        )


def runtime(device: cl.Device) -> Runtime:
    """The shared context and in-order queue of a device, made once. The queue records no
    profiling times: on an H100, NVIDIA's driver took 17.3 us per bare enqueue on a
    profiling queue against 11.3 us without (a user who wants kernel times passes a
    profiling queue as queue=)."""
    key = device.int_ptr
    with _runtimes_lock:
        if key not in _runtimes:
            context = cl.Context([device])
            _runtimes[key] = Runtime(device, context, cl.CommandQueue(context))
        return _runtimes[key]
