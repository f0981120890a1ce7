"""OpenCL device discovery, device choice and the capability probe."""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import threading
import warnings
from dataclasses import asdict, dataclass
from functools import cache

import numpy as np
import pyopencl as cl

from .errors import PoolArgumentError, Problem

TYPE_NAMES = (
    (cl.device_type.GPU, "GPU"),
    (cl.device_type.CPU, "CPU"),
    (cl.device_type.ACCELERATOR, "ACCELERATOR"),
)


@dataclass(frozen=True)
class DeviceInfo:
    """One OpenCL device and what it can do."""

    index: int
    platform: str
    name: str
    vendor: str
    type: str
    opencl_version: str
    compute_units: int
    global_mem: int
    local_mem: int
    max_work_group_size: int
    fp16: bool
    fp64: bool

    def as_dict(self) -> dict:
        return asdict(self)


def _query(device: cl.Device, attr: str, default):
    try:
        return getattr(device, attr)
    except (cl.Error, AttributeError):
        return default


def _features(device: cl.Device) -> set[str]:
    names = set(_query(device, "extensions", "").split())
    for feature in _query(device, "opencl_c_features", []) or []:
        names.add(feature.name)
    return names


def has_fp16(device: cl.Device) -> bool:
    """True when the device has native half (cl_khr_fp16 or __opencl_c_fp16)."""
    return bool({"cl_khr_fp16", "__opencl_c_fp16"} & _features(device))


def has_fp64(device: cl.Device) -> bool:
    """True when the device has double (cl_khr_fp64 or __opencl_c_fp64)."""
    return bool({"cl_khr_fp64", "__opencl_c_fp64"} & _features(device))


def fp16_storage_opt_in() -> bool:
    """True when CLPOOL_FP16=storage allows half storage on a device without cl_khr_fp16."""
    return os.environ.get("CLPOOL_FP16", "").strip().lower() == "storage"


def type_name(device: cl.Device) -> str:
    return next((name for bit, name in TYPE_NAMES if device.type & bit), "OTHER")


def register_prefix_runtimes() -> None:
    """Let the ICD loader find OpenCL runtimes pip installed into this environment.

    Wheels such as intel-opencl-rt put their library in <prefix>/lib and an .icd file in
    <prefix>/etc/OpenCL/vendors that names a build-time path. When such a file exists and
    OCL_ICD_VENDORS is unset, write corrected .icd files (and the system's own) to a
    folder and point OCL_ICD_VENDORS there. PoCL from pyopencl[pocl] is found either way.
    """
    vendors = os.path.join(sys.prefix, "etc", "OpenCL", "vendors")
    if "OCL_ICD_VENDORS" in os.environ or not os.path.isdir(vendors):
        return
    entries = {}
    for folder in ("/etc/OpenCL/vendors", vendors):
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".icd"):
                continue
            with open(os.path.join(folder, name)) as f:
                lib = f.read().strip()
            local = os.path.join(sys.prefix, "lib", os.path.basename(lib))
            if folder == vendors and not os.path.exists(lib) and os.path.exists(local):
                lib = local
            if os.path.exists(lib) or folder != vendors:
                entries[name] = lib
    if not any(lib.startswith(sys.prefix) for lib in entries.values()):
        return
    tag = hashlib.sha1(sys.prefix.encode()).hexdigest()[:12]
    target = os.path.join(tempfile.gettempdir(), f"clpool-icd-{os.getuid()}-{tag}")
    os.makedirs(target, exist_ok=True)
    for name, lib in entries.items():
        with open(os.path.join(target, name), "w") as f:
            f.write(lib + "\n")
    os.environ["OCL_ICD_VENDORS"] = target


@cache
def cl_devices() -> tuple[cl.Device, ...]:
    """Every OpenCL device of every platform, in platform order."""
    register_prefix_runtimes()
    found = []
    try:
        platforms = cl.get_platforms()
    except cl.Error:
        return ()
    for platform in platforms:
        try:
            found.extend(platform.get_devices())
        except cl.Error:
            continue
    return tuple(found)


def describe(device: cl.Device, index: int) -> DeviceInfo:
    """The DeviceInfo of one OpenCL device."""
    return DeviceInfo(
        index=index,
        platform=device.platform.name.strip(),
        name=device.name.strip(),
        vendor=device.vendor.strip(),
        type=type_name(device),
        opencl_version=device.version.strip(),
        compute_units=device.max_compute_units,
        global_mem=device.global_mem_size,
        local_mem=device.local_mem_size,
        max_work_group_size=device.max_work_group_size,
        fp16=has_fp16(device),
        fp64=has_fp64(device),
    )


def devices() -> list[DeviceInfo]:
    """Every OpenCL device with its platform, type and capabilities."""
    return [describe(d, i) for i, d in enumerate(cl_devices())]


def _match(spec: object) -> cl.Device:
    found = cl_devices()
    if not found:
        raise Problem(PoolArgumentError, "no OpenCL device found (install clpool[pocl] for a "
                                         "CPU device)")
    if isinstance(spec, cl.Device):
        return spec
    if isinstance(spec, DeviceInfo):
        spec = spec.index
    if isinstance(spec, bool):
        raise Problem(PoolArgumentError, f"device must be a pyopencl Device, an index or a "
                                         f"name, got {spec!r}")
    if isinstance(spec, int) or (isinstance(spec, str) and spec.strip().isdigit()):
        i = int(spec)
        if 0 <= i < len(found):
            return found[i]
        raise Problem(PoolArgumentError, f"device index {i} out of range (0..{len(found) - 1})")
    if isinstance(spec, str):
        key = spec.strip().lower()
        for d in found:
            if key in d.name.lower() or key in d.platform.name.lower():
                return d
        raise Problem(PoolArgumentError, f"no OpenCL device matches {spec!r}")
    raise Problem(PoolArgumentError, f"device must be a pyopencl Device, an index or a name, "
                                     f"got {spec!r}")


def select(spec: object = None) -> cl.Device:
    """The device named by `spec`, else by CLPOOL_DEVICE, else the first GPU, else the first
    CPU, else the first device."""
    if spec is None:
        spec = os.environ.get("CLPOOL_DEVICE") or None
    if spec is not None:
        return _match(spec)
    found = cl_devices()
    for bit in (cl.device_type.GPU, cl.device_type.CPU):
        for d in found:
            if d.type & bit:
                return d
    return _match(0)


@dataclass(frozen=True)
class Runtime:
    """The context and in-order queue clpool uses on one device."""

    device: cl.Device
    context: cl.Context
    queue: cl.CommandQueue


_runtimes: dict[int, Runtime] = {}
_runtimes_lock = threading.Lock()


def runtime(device: cl.Device) -> Runtime:
    """The shared context and profiling-enabled queue of a device, made once."""
    key = device.int_ptr
    with _runtimes_lock:
        if key not in _runtimes:
            context = cl.Context([device])
            queue = cl.CommandQueue(
                context, properties=cl.command_queue_properties.PROFILING_ENABLE)
            _runtimes[key] = Runtime(device, context, queue)
        return _runtimes[key]


def can_build(device: cl.Device) -> bool:
    """True when the device compiles and runs a trivial kernel (some CPU drivers list a
    device whose compiler cannot target this processor)."""
    try:
        context = runtime(device).context
        queue = runtime(device).queue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cl.CompilerWarning)
            program = cl.Program(context, "__kernel void k(__global int *a) { a[0] = 7; }")
            program.build()
        buf = cl.Buffer(context, cl.mem_flags.READ_WRITE, 4)
        program.k(queue, (1,), None, buf)
        out = np.zeros(1, np.int32)
        cl.enqueue_copy(queue, out, buf)
        return int(out[0]) == 7
    except cl.Error:
        return False
