"""Issue 2, the foundation: device listing, device choice, the capability probe, the one
error handler, build failures, the program cache and the `devices` command."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import sys
import warnings
from types import SimpleNamespace

import numpy as np
import pyopencl as cl
import pytest
from click.testing import CliRunner
from pool_cases import in_threads

import clpool
from clpool import capabilities, cli, discovery, errors, plans, policy, programs
from clpool.errors import KernelError, PoolArgumentError, PoolError, UnsupportedDtypeError

FIELDS = {
    "index": int,
    "platform": str,
    "name": str,
    "vendor": str,
    "type": str,
    "opencl_version": str,
    "driver_version": str,
    "compute_units": int,
    "global_mem": int,
    "local_mem": int,
    "max_work_group_size": int,
    "fp16": bool,
    "bf16": bool,
    "fp64": bool,
    "verdict": str,
    "reason": str,
    "default": bool,
}
MESSAGE = re.compile(r"^(?P<label>\w+) kernel failed \(device=(?P<device>.*), "
                     r"dtype=(?P<dtype>\w+)\): (?P<reason>.+)$", re.S)
POCL_PLATFORM = "Portable Computing Language"
BROKEN = "__kernel void k(__global float *a) { a[0] = no_such_identifier; }\n"


def _x(dtype=np.float32) -> np.ndarray:
    return np.arange(2 * 3 * 6 * 6, dtype=np.float64).reshape(2, 3, 6, 6).astype(dtype)


def _index(device: cl.Device) -> int:
    return discovery.cl_devices().index(device)


def _assert_format(e: PoolError, label: str | None = None) -> None:
    """The one message format, and the attributes agree with it."""
    m = MESSAGE.match(str(e))
    assert m, str(e)
    assert (m["label"], m["device"], m["dtype"], m["reason"]) == (e.label, e.device, e.dtype,
                                                                   e.reason)
    assert str(e) == f"{e.label} kernel failed (device={e.device}, dtype={e.dtype}): {e.reason}"
    if label is not None:
        assert e.label == label


@pytest.fixture
def fresh_context(device: cl.Device) -> cl.Context:
    """A context of its own, so no program of another test is cached on it."""
    return cl.Context([device])


# ---------------------------------------------------------------- device listing


def test_devices_lists_every_opencl_device_with_typed_fields():
    found = clpool.devices()
    raw = discovery.cl_devices()
    assert found and len(found) == len(raw)
    assert [f.name for f in dataclasses.fields(clpool.DeviceInfo)] == list(FIELDS)
    for i, (info, dev) in enumerate(zip(found, raw, strict=True)):
        assert isinstance(info, clpool.DeviceInfo)
        for name, kind in FIELDS.items():
            value = getattr(info, name)
            assert type(value) is kind, (name, value)
        assert info.index == i
        assert info.platform == dev.platform.name.strip() and info.platform
        assert info.name == dev.name.strip() and info.name
        assert info.type in {"GPU", "CPU", "ACCELERATOR", "OTHER"}
        bit = {"GPU": cl.device_type.GPU, "CPU": cl.device_type.CPU,
               "ACCELERATOR": cl.device_type.ACCELERATOR}.get(info.type)
        if bit is not None:
            assert dev.type & bit
        assert info.opencl_version.startswith("OpenCL ")
        assert info.compute_units >= 1
        assert info.global_mem > 0 and info.local_mem > 0
        assert info.max_work_group_size >= 1
        assert info.fp16 == discovery.has_fp16(dev)
        assert info.fp64 == discovery.has_fp64(dev)
        assert info.as_dict() == dataclasses.asdict(info)
        assert list(info.as_dict()) == list(FIELDS)


def test_device_info_is_frozen():
    info = clpool.devices()[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.name = "other"  # type: ignore[misc]


def test_devices_is_stable_across_calls():
    assert clpool.devices() == clpool.devices()


@pytest.mark.skipif(importlib.util.find_spec("pocl_binary_distribution") is None,
                    reason="pyopencl[pocl] is not installed")
def test_pocl_device_listed_when_pyopencl_pocl_installed():
    pocl = [d for d in clpool.devices() if d.platform == POCL_PLATFORM]
    assert pocl, [d.platform for d in clpool.devices()]
    assert pocl[0].type == "CPU"


# ---------------------------------------------------------------- the capability probe


def test_pocl_probe_reports_no_fp16_and_fp64(pocl_device):
    assert discovery.has_fp16(pocl_device) is False
    assert discovery.has_fp64(pocl_device) is True
    info = discovery.describe(pocl_device, _index(pocl_device))
    assert (info.fp16, info.fp64) == (False, True)
    # and the probe agrees with what the device itself reports
    extensions = pocl_device.extensions.split()
    assert "cl_khr_fp16" not in extensions
    assert "cl_khr_fp64" in extensions or "__opencl_c_fp64" in {
        f.name for f in pocl_device.opencl_c_features}


class _Stub:
    """A stand-in device: only extensions and opencl_c_features, and a half_fp_config that
    raises as it does on NVIDIA and Oclgrind (the probe must not need it)."""

    def __init__(self, extensions="", features=(), broken_features=False):
        self.extensions = extensions
        self._features = [SimpleNamespace(name=f, version=0) for f in features]
        self._broken = broken_features

    @property
    def opencl_c_features(self):
        if self._broken:
            raise cl.Error("INVALID_VALUE")
        return self._features

    @property
    def half_fp_config(self):
        raise cl.Error("INVALID_VALUE")


@pytest.mark.parametrize("stub, fp16, fp64", [
    (_Stub(), False, False),
    (_Stub("cl_khr_byte_addressable_store  cl_khr_fp16\tcl_khr_fp64"), True, True),
    (_Stub("cl_khr_fp64"), False, True),
    (_Stub("", ["__opencl_c_fp16"]), True, False),
    (_Stub("", ["__opencl_c_fp64", "__opencl_c_images"]), False, True),
    (_Stub("cl_khr_fp16", broken_features=True), True, False),
    (_Stub("cl_khr_fp16x cl_khr_fp64_foo"), False, False),  # whole names, not prefixes
], ids=["nothing", "extensions", "fp64-only", "feature-fp16", "feature-fp64",
        "features-query-fails", "no-prefix-match"])
def test_probe_reads_extensions_and_opencl_c_features(stub, fp16, fp64):
    assert discovery.has_fp16(stub) is fp16
    assert discovery.has_fp64(stub) is fp64


def test_probe_survives_devices_without_opencl_c_features():
    old = SimpleNamespace(extensions="cl_khr_fp64")  # OpenCL 1.2: no such attribute
    assert discovery.has_fp64(old) is True
    assert discovery.has_fp16(old) is False
    none = SimpleNamespace(extensions="cl_khr_fp16", opencl_c_features=None)
    assert discovery.has_fp16(none) is True


def test_float16_rejected_on_pocl_before_any_build(pocl_device, monkeypatch):
    monkeypatch.delenv("CLPOOL_FP16", raising=False)
    before = programs.builds
    with pytest.raises(UnsupportedDtypeError) as info:
        clpool.max_pool2d(_x(np.float16), 2, device=_index(pocl_device))
    e = info.value
    assert isinstance(e, TypeError) and isinstance(e, PoolError)
    _assert_format(e, "max_pool2d")
    assert e.device == pocl_device.name.strip()
    assert e.dtype == "float16"
    assert "cl_khr_fp16" in e.reason and "CLPOOL_FP16=storage" in e.reason
    assert programs.builds == before


def test_probe_allows_float64_on_pocl_and_float16_with_storage_opt_in(pocl_device,
                                                                       monkeypatch):
    monkeypatch.delenv("CLPOOL_FP16", raising=False)
    assert plans.dtype_problem(np.dtype(np.float64), pocl_device) is None
    assert plans.dtype_problem(np.dtype(np.float32), pocl_device) is None
    assert plans.dtype_problem(np.dtype(np.float16), pocl_device) is not None
    monkeypatch.setenv("CLPOOL_FP16", "storage")
    policy.set_policy(None)
    assert capabilities.fp16_storage_opt_in()
    assert plans.dtype_problem(np.dtype(np.float16), pocl_device) is None
    monkeypatch.setenv("CLPOOL_FP16", "native")
    policy.set_policy(None)
    assert not capabilities.fp16_storage_opt_in()


@pytest.mark.parametrize("dtype", [np.int32, np.float128 if hasattr(np, "float128") else
                                   np.complex64, np.uint8])
def test_unsupported_dtype_names_dtype_and_device(device, dtype):
    with pytest.raises(UnsupportedDtypeError) as info:
        clpool.avg_pool2d(_x().astype(dtype), 2)
    e = info.value
    _assert_format(e, "avg_pool2d")
    assert e.device == device.name.strip()
    assert e.dtype == np.dtype(dtype).name


# ---------------------------------------------------------------- device choice


def _usable() -> list[tuple[int, cl.Device]]:
    """(index, device) of each listed device clpool does not refuse (PyPI's PoCL fails its
    canary on AMD Zen 5: select raises for it, as test_refused_devices_are_not_selected
    shows)."""
    infos = clpool.devices()
    return [(i, d) for i, d in enumerate(discovery.cl_devices()) if infos[i].verdict != "failed"]


def test_refused_devices_are_not_selected():
    for i, info in enumerate(clpool.devices()):
        if info.verdict == "failed":
            with pytest.raises(errors.Problem) as caught:
                discovery.select(i)
            assert caught.value.kind is KernelError and "refuses this device" in caught.value.reason


def test_select_by_index_int_str_deviceinfo_and_device():
    for i, dev in _usable():
        assert discovery.select(i) == dev
        assert discovery.select(str(i)) == dev
        assert discovery.select(f" {i} ") == dev
        assert discovery.select(clpool.devices()[i]) == dev
        assert discovery.select(dev) == dev


def _first_match(key: str) -> cl.Device:
    key = key.lower()
    return next(d for d in discovery.cl_devices()
                if key in d.name.lower() or key in d.platform.name.lower())


def test_select_by_case_insensitive_substring_of_device_or_platform_name():
    usable = [d for _, d in _usable()]
    for dev in usable:
        name, platform = dev.name.strip(), dev.platform.name.strip()
        for spec in (name, name.upper(), name.lower(), name[1:-1], platform.swapcase(),
                     platform[:4]):
            if _first_match(spec) not in usable:
                continue  # a refused device listed first for this key
            chosen = discovery.select(spec)
            assert chosen == _first_match(spec), spec
            key = spec.strip().lower()
            assert key in chosen.name.lower() or key in chosen.platform.name.lower()


def test_select_pocl_by_platform_substring(pocl_device):
    assert discovery.select("portable computing") == pocl_device
    assert discovery.select("PORTABLE COMPUTING LANGUAGE") == pocl_device


def test_env_var_chooses_the_device(monkeypatch):
    usable = _usable()
    for i, dev in usable:
        monkeypatch.setenv("CLPOOL_DEVICE", str(i))
        assert discovery.select() == dev
        monkeypatch.setenv("CLPOOL_DEVICE", dev.name.strip().upper())
        if _first_match(dev.name.strip()) in [d for _, d in usable]:
            assert discovery.select() == _first_match(dev.name.strip())


def test_without_env_var_first_gpu_else_first_cpu(monkeypatch):
    monkeypatch.delenv("CLPOOL_DEVICE", raising=False)
    raw = discovery.cl_devices()
    gpus = [d for d in raw if d.type & cl.device_type.GPU]
    cpus = [d for d in raw if d.type & cl.device_type.CPU]
    expected = (gpus or cpus or list(raw))[0]
    assert discovery.select() == expected
    monkeypatch.setenv("CLPOOL_DEVICE", "")  # empty means unset
    assert discovery.select() == expected


def test_device_argument_overrides_env_var(device, monkeypatch):
    monkeypatch.setenv("CLPOOL_DEVICE", "no such device anywhere")
    assert discovery.select(_index(device)) == device
    out = clpool.max_pool2d(_x(), 2, device=_index(device))
    assert out.shape == (2, 3, 3, 3)
    assert np.array_equal(out, _x()[:, :, 1::2, 1::2])
    out = clpool.max_pool2d(_x(), 2, device=device)
    assert np.array_equal(out, _x()[:, :, 1::2, 1::2])
    with pytest.raises(PoolArgumentError, match="no OpenCL device matches"):
        clpool.max_pool2d(_x(), 2)  # the env var applies when device= is absent


def test_ops_run_on_the_env_var_device(device):
    assert os.environ["CLPOOL_DEVICE"] == str(_index(device))
    assert discovery.select() == device


@pytest.mark.parametrize("spec, reason", [
    (99, "out of range"),
    ("99", "out of range"),
    (-1, "out of range"),
    ("no such device anywhere", "no OpenCL device matches"),
    (3.5, "device must be"),
    (object(), "device must be"),
])
def test_bad_device_spec_raises_pool_argument_error(spec, reason):
    with pytest.raises(PoolArgumentError, match=reason) as info:
        clpool.adaptive_avg_pool2d(_x(), 2, device=spec)
    e = info.value
    assert isinstance(e, ValueError)
    _assert_format(e, "adaptive_avg_pool2d")


def test_bad_device_spec_in_env_var_raises_pool_argument_error(monkeypatch):
    n = len(discovery.cl_devices())
    monkeypatch.setenv("CLPOOL_DEVICE", str(n))
    with pytest.raises(PoolArgumentError, match=rf"device index {n} out of range") as info:
        clpool.avg_pool2d_backward(np.zeros((2, 3, 3, 3), np.float32), _x(), 2)
    _assert_format(info.value, "avg_pool2d_backward")
    monkeypatch.setenv("CLPOOL_DEVICE", "zzz-no-device")
    with pytest.raises(PoolArgumentError, match="zzz-no-device") as info:
        clpool.max_pool2d_with_indices(_x(), 2)
    _assert_format(info.value, "max_pool2d_with_indices")


def test_no_devices_at_all_is_a_pool_argument_error(monkeypatch):
    monkeypatch.setattr(discovery, "cl_devices", lambda: ())
    with pytest.raises(PoolArgumentError, match="no OpenCL device found") as info:
        clpool.max_pool2d(_x(), 2, device=0)
    _assert_format(info.value, "max_pool2d")


# ---------------------------------------------------------------- errors: one handler


@pytest.mark.parametrize("cls, builtin", [
    (PoolArgumentError, ValueError),
    (UnsupportedDtypeError, TypeError),
    (KernelError, RuntimeError),
])
def test_error_classes_and_format(cls, builtin):
    assert issubclass(cls, PoolError) and issubclass(cls, builtin)
    e = cls("avg_pool2d_backward", "Some Device", "float16", "something broke")
    assert str(e) == ("avg_pool2d_backward kernel failed (device=Some Device, dtype=float16): "
                      "something broke")
    assert (e.label, e.device, e.dtype, e.reason) == ("avg_pool2d_backward", "Some Device",
                                                      "float16", "something broke")
    _assert_format(e)
    with pytest.raises(builtin):
        raise e


def test_errors_are_exported_from_the_package():
    assert clpool.PoolError is PoolError
    assert clpool.PoolArgumentError is PoolArgumentError
    assert clpool.UnsupportedDtypeError is UnsupportedDtypeError
    assert clpool.KernelError is KernelError
    assert not issubclass(PoolError, (ValueError, TypeError, RuntimeError))


def test_kernel_error_carries_log_and_options():
    e = KernelError("max_pool2d", "dev", "float32", "build failed", log="1:2: error: x",
                    options="-DA=1 -DB=2")
    assert (e.log, e.options) == ("1:2: error: x", "-DA=1 -DB=2")
    plain = KernelError("max_pool2d", "dev", "float32", "launch failed")
    assert (plain.log, plain.options) == ("", "")


def test_fail_is_the_one_handler():
    with pytest.raises(UnsupportedDtypeError) as info:
        errors.fail(UnsupportedDtypeError, "max_pool2d", "dev", "int8", "no int8")
    assert str(info.value) == "max_pool2d kernel failed (device=dev, dtype=int8): no int8"
    with pytest.raises(KernelError) as info:
        errors.fail(KernelError, "avg_pool2d", "dev", "float32", "bad", log="L", options="O")
    assert (info.value.log, info.value.options) == ("L", "O")


def test_reporting_turns_problems_and_opencl_errors_into_pool_errors():
    with pytest.raises(PoolArgumentError) as info, errors.reporting("avg_pool2d") as where:
        where.device, where.dtype = "Dev X", "float64"
        raise errors.Problem(PoolArgumentError, "kernel_size must be positive")
    assert str(info.value) == ("avg_pool2d kernel failed (device=Dev X, dtype=float64): "
                               "kernel_size must be positive")
    with pytest.raises(KernelError) as info, errors.reporting("max_pool2d") as where:
        where.device = "Dev Y"
        raise cl.Error("OUT_OF_RESOURCES")
    assert info.value.label == "max_pool2d" and info.value.device == "Dev Y"
    assert "launch failed" in info.value.reason and "OUT_OF_RESOURCES" in info.value.reason
    with pytest.raises(KernelError), errors.reporting("max_pool2d"):
        raise MemoryError
    original = UnsupportedDtypeError("a", "b", "c", "d")
    with pytest.raises(UnsupportedDtypeError) as info, errors.reporting("other"):
        raise original
    assert info.value is original  # a PoolError passes through untouched


def test_argument_error_from_an_op_has_device_and_dtype(device):
    with pytest.raises(PoolArgumentError) as info:
        clpool.max_pool2d(_x(np.float32), 0)
    e = info.value
    _assert_format(e, "max_pool2d")
    assert e.device == device.name.strip()
    assert e.dtype == "float32"


# ---------------------------------------------------------------- build failures


def test_build_failure_is_a_kernel_problem_with_log_and_options(fresh_context, monkeypatch):
    monkeypatch.setattr(programs, "source", lambda name: BROKEN)
    before = programs.builds
    with pytest.raises(errors.Problem) as info:
        programs.kernels(fresh_context, "broken.cl", ("-DCLPOOL_DTYPE=32", "-DEXTRA=1"))
    p = info.value
    assert p.kind is KernelError
    assert p.extra["options"] == "-DCLPOOL_DTYPE=32 -DEXTRA=1"
    assert "no_such_identifier" in p.extra["log"]
    assert "broken.cl" in p.reason
    assert programs.builds == before
    # a failed build is not cached: it fails again, the same way
    with pytest.raises(errors.Problem):
        programs.kernels(fresh_context, "broken.cl", ("-DCLPOOL_DTYPE=32", "-DEXTRA=1"))
    # and inside the one handler it becomes a KernelError with the op's label
    with pytest.raises(KernelError) as info, errors.reporting("avg_pool2d") as where:
        where.device, where.dtype = "Dev", "float32"
        programs.kernels(fresh_context, "broken.cl", ("-DEXTRA=2",))
    e = info.value
    assert isinstance(e, RuntimeError)
    _assert_format(e, "avg_pool2d")
    assert e.options == "-DEXTRA=2"
    assert "no_such_identifier" in e.log


def test_build_failure_emits_no_warning(fresh_context, monkeypatch):
    monkeypatch.setattr(programs, "source", lambda name: BROKEN)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(errors.Problem):
            programs.kernels(fresh_context, "broken.cl", ("-DWARN=1",))


@pytest.fixture
def kernel_folder(tmp_path, monkeypatch):
    """A kernel folder of our own in place of the shipped one; the source cache is cleared
    before and after, and no program built before is reused."""
    monkeypatch.setattr(programs, "_CANDIDATES", (tmp_path,))
    programs.forget()
    plans.forget()
    programs.source.cache_clear()
    yield tmp_path
    programs.source.cache_clear()
    programs.forget()
    plans.forget()


def test_build_failure_inside_an_op_is_a_kernel_error(device, kernel_folder):
    shipped = programs._HERE.parent / "kernels_cl"
    if not (shipped / programs.HEADER).is_file():
        shipped = programs._HERE / "kernels_cl"
    (kernel_folder / programs.HEADER).write_text((shipped / programs.HEADER).read_text())
    (kernel_folder / "max_pool.cl").write_text(BROKEN)
    with pytest.raises(KernelError) as info:
        clpool.max_pool2d(_x(), 2)
    e = info.value
    assert isinstance(e, RuntimeError) and isinstance(e, PoolError)
    _assert_format(e, "max_pool2d")
    assert e.device == device.name.strip()
    assert e.dtype == "float32"
    assert "-DCLPOOL_DTYPE=32" in e.options
    assert "no_such_identifier" in e.log
    assert "max_pool.cl" in e.reason
    with pytest.raises(KernelError) as info:
        clpool.max_pool2d_with_indices_backward(
            np.zeros((2, 3, 3, 3), np.float32), _x(), 2, indices=np.zeros((2, 3, 3, 3), np.int64))
    _assert_format(info.value, "max_pool2d_with_indices_backward")


def test_missing_kernel_sources_are_a_kernel_error(kernel_folder):
    with pytest.raises(KernelError, match="kernel sources not found") as info:
        clpool.avg_pool2d(_x(), 2)
    _assert_format(info.value, "avg_pool2d")


# ---------------------------------------------------------------- the program cache


def test_kernel_dir_holds_every_source():
    folder = programs.kernel_dir()
    assert (folder / programs.HEADER).is_file()
    for name in plans.SOURCES.values():
        assert (folder / name).is_file()
        text = programs.source(name)
        assert text == (folder / name).read_text()
        assert f'#include "{programs.HEADER}"' in text  # through -I: log lines match files


def test_program_cache_builds_once_for_repeated_calls():
    x = _x()

    def calls():
        for k in (2, 3):
            clpool.max_pool2d(x, k)
            clpool.max_pool2d(x[:1], k, stride=1, padding=1, ceil_mode=True)
            clpool.max_pool2d_with_indices(x, k)  # same source and options as max_pool2d
            clpool.avg_pool2d(x, k, count_include_pad=False)
            clpool.adaptive_avg_pool2d(x, (k, None))
            clpool.adaptive_avg_pool2d(x, 1)
        out, idx = clpool.max_pool2d_with_indices(x, 2)
        clpool.max_pool2d_with_indices_backward(np.ones_like(out), x, 2, indices=idx)
        clpool.avg_pool2d_backward(np.ones((2, 3, 3, 3), np.float32), x, 2)
        clpool.adaptive_avg_pool2d_backward(np.ones((2, 3, 2, 2), np.float32), x)

    calls()  # builds each variant (dtype, index type, window) the first time it is used
    before = programs.builds
    calls()
    calls()
    assert programs.builds == before


def test_program_cache_keys_on_options_and_context(device, fresh_context):
    before = programs.builds
    a = programs.kernels(fresh_context, "max_pool.cl", ("-DCLPOOL_DTYPE=32",
                                                        "-DCLPOOL_INDEX=64"))
    assert programs.builds == before + 1
    assert programs.kernels(fresh_context, "max_pool.cl", ("-DCLPOOL_DTYPE=32",
                                                           "-DCLPOOL_INDEX=64")) is a
    assert programs.builds == before + 1
    programs.kernels(fresh_context, "max_pool.cl", ("-DCLPOOL_DTYPE=32", "-DCLPOOL_INDEX=32"))
    assert programs.builds == before + 2
    other = cl.Context([device])
    b = programs.kernels(other, "max_pool.cl", ("-DCLPOOL_DTYPE=32", "-DCLPOOL_INDEX=64"))
    assert b is not a and programs.builds == before + 3
    assert "max_pool2d_forward" in a and "max_pool2d_backward" in a
    assert all(isinstance(k, cl.Kernel) for k in a.values())


def test_program_cache_builds_once_under_concurrent_first_use(fresh_context):
    before = programs.builds
    results = []
    options = ("-DCLPOOL_DTYPE=32", "-DCLPOOL_INDEX=64")
    in_threads(lambda _: results.append(programs.kernels(fresh_context, "avg_pool.cl", options)),
               timeout=60)  # fmt: skip
    assert len(results) == 8 and all(r is results[0] for r in results)
    assert programs.builds == before + 1


def test_float64_adds_at_most_one_build_then_stays_flat(device):
    if not discovery.has_fp64(device):
        pytest.skip("the suite device has no float64")
    x = _x(np.float64)
    clpool.max_pool2d(x.astype(np.float32), 2)
    before = programs.builds
    clpool.max_pool2d(x, 2)
    assert programs.builds <= before + 1
    before = programs.builds
    for _ in range(3):
        clpool.max_pool2d(x, 2)
        clpool.max_pool2d(x.astype(np.float32), 2)
    assert programs.builds == before


# ---------------------------------------------------------------- the command line


def _parse_table(text: str) -> tuple[list[str], list[list[str]]]:
    """Split the `devices` table into header and rows by the dashed rule under the header."""
    lines = text.rstrip("\n").splitlines()
    rule = lines[1]
    assert set(rule) <= {"-", " "}, rule
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", rule)]
    bounds = [(s, spans[i + 1][0] if i + 1 < len(spans) else None)
              for i, (s, _) in enumerate(spans)]

    def cells(line: str) -> list[str]:
        return [line[s:e].strip() for s, e in bounds]

    rows = [line for line in lines[2:] if line[:1].isdigit()]  # not the notes below it
    return cells(lines[0]), [cells(line) for line in rows]


def test_cli_devices_table():
    result = CliRunner().invoke(cli.main, ["devices"])
    assert result.exit_code == 0, result.output
    header, rows = _parse_table(result.stdout)
    normal = [h.lower() for h in header]
    assert normal == ["#", "platform", "device", "type", "opencl", "driver", "cus", "memory",
                      "fp16", "bf16", "fp64", "verdict"]
    found = clpool.devices()
    assert len(rows) == len(found)
    assert sum(d.default for d in found) <= 1
    yes = {True: "yes", False: "no"}
    for row, d in zip(rows, found, strict=True):
        assert row[0] == f"{d.index}{'*' if d.default else ''}"
        assert row[1] == d.platform and row[2] == d.name and row[3] == d.type
        assert row[4] == d.opencl_version and row[5] == d.driver_version
        assert row[6] == str(d.compute_units)
        assert re.fullmatch(r"\d+(\.\d+)? [KMGT]i?B", row[7]), row[7]
        assert row[8:11] == [yes[d.fp16], yes[d.bf16], yes[d.fp64]]
        assert row[11] == d.verdict and d.verdict in {"verified", "failed"}


def test_cli_devices_json():
    result = CliRunner().invoke(cli.main, ["devices", "--json"])
    assert result.exit_code == 0, result.output
    parsed = json.loads(result.stdout)
    assert isinstance(parsed, list)
    assert parsed == [d.as_dict() for d in clpool.devices()]
    for entry in parsed:
        assert list(entry) == list(FIELDS)
        for name, kind in FIELDS.items():
            assert type(entry[name]) is kind, (name, entry[name])


def test_cli_devices_with_no_device(monkeypatch):
    monkeypatch.setattr(discovery, "devices", lambda verified=False: [])
    result = CliRunner().invoke(cli.main, ["devices"])
    assert result.exit_code != 0
    assert "no OpenCL device" in result.output
    result = CliRunner().invoke(cli.main, ["devices", "--json"])
    assert result.exit_code == 0 and json.loads(result.output) == []


def test_cli_version_and_help():
    result = CliRunner().invoke(cli.main, ["--version"])
    assert result.exit_code == 0 and clpool.__version__ in result.output
    result = CliRunner().invoke(cli.main, ["--help"])
    assert result.exit_code == 0 and "devices" in result.output


def test_python_dash_m_clpool_devices(tmp_path):
    env = dict(os.environ)
    table = subprocess.run([sys.executable, "-m", "clpool", "devices"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60)
    assert table.returncode == 0, table.stderr
    header, rows = _parse_table(table.stdout)
    assert [r[2] for r in rows] == [d.name for d in clpool.devices()]
    as_json = subprocess.run([sys.executable, "-m", "clpool", "devices", "--json"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert as_json.returncode == 0, as_json.stderr
    listed, here = json.loads(as_json.stdout), [d.as_dict() for d in clpool.devices()]
    # PoCL's global memory size is not fixed: on the H200 host two processes saw different
    # sizes. Every other field must match
    assert [{**d, "global_mem": d["global_mem"] > 0} for d in listed] == \
        [{**d, "global_mem": True} for d in here]
    script = os.path.join(os.path.dirname(sys.executable), "clpool")
    if os.path.exists(script):
        via_script = subprocess.run([script, "devices", "--json"], cwd=tmp_path, env=env,
                                    capture_output=True, text=True, timeout=60)
        assert via_script.returncode == 0, via_script.stderr
        assert json.loads(via_script.stdout) == json.loads(as_json.stdout)
