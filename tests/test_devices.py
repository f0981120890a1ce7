"""Device verification (a canary in a child process, verdicts cached on disk), device
choice, the table of known driver bugs, and runtimes registered for the ICD loader."""

from __future__ import annotations

import json
import re
import signal
import warnings
from types import SimpleNamespace

import numpy as np
import pyopencl as cl
import pytest
from click.testing import CliRunner
from pool_cases import assert_close

import clpool
from clpool import canary, cli, discovery, icd, plans, policy, programs, quirks, shapes, verify
from clpool import reference as ref
from clpool.errors import KernelError, PoolArgumentError, Problem

CRASH = (
    "-c",
    "import os, signal; print('stage: float32, injected', flush=True); "
    "os.kill(os.getpid(), signal.SIGSEGV)",
)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty verdict cache of the test's own, and no verdict in memory."""
    monkeypatch.setenv("CLPOOL_CACHE_DIR", str(tmp_path))
    verify.forget()
    yield tmp_path / "verdicts.json"
    verify.forget()


def _index(device: cl.Device) -> int:
    return discovery.cl_devices().index(device)


def test_a_canary_that_crashes_fails_the_device_and_never_the_process(device, cache, monkeypatch):
    monkeypatch.setattr(verify, "CANARY", CRASH)
    verdict = verify.verify(device, _index(device))
    assert verdict.status == verify.FAILED
    assert "crashed (SIGSEGV) at float32, injected" in verdict.reason
    # cached on disk: a process that knows nothing yet reads it, and runs no canary
    verify.forget()
    monkeypatch.setattr(verify, "CANARY", ("-c", "raise SystemExit(0)"))
    assert verify.verify(device, _index(device)) == verdict
    stored = json.loads(cache.read_text())
    assert stored[verify.key(device)]["status"] == verify.FAILED
    # chosen explicitly, by argument or by CLPOOL_DEVICE: a KernelError naming the device
    with pytest.raises(KernelError, match="refuses this device: the driver crashed") as info:
        clpool.max_pool2d(np.zeros((1, 1, 4, 4), np.float32), 2, device=_index(device))
    assert info.value.device == device.name.strip() and info.value.label == "max_pool2d"
    monkeypatch.setenv("CLPOOL_DEVICE", str(_index(device)))
    with pytest.raises(KernelError):
        clpool.avg_pool2d(np.zeros((1, 1, 4, 4), np.float32), 2)
    # never by default
    monkeypatch.delenv("CLPOOL_DEVICE")
    info = [d for d in clpool.devices() if d.index == _index(device)][0]
    assert info.verdict == verify.FAILED and not info.default and "SIGSEGV" in info.reason
    try:
        assert discovery.select() != device
    except Problem as p:
        assert p.kind is KernelError and "no OpenCL device passed" in p.reason


def test_a_canary_that_saw_another_device_is_not_a_lasting_verdict(device, cache, monkeypatch):
    """The child found a different device (or sources) than its parent: that says
    nothing about the device, so it is not written to the cache; a later process checks
    again."""
    monkeypatch.setattr(verify, "CANARY", ("-c", "import sys; sys.exit(3)"))
    verdict = verify.verify(device, _index(device))
    assert verdict.status == verify.FAILED and "saw another device" in verdict.reason
    assert not cache.exists() or verify.key(device) not in json.loads(cache.read_text())
    verify.forget()
    monkeypatch.setattr(verify, "CANARY", ("-c", "raise SystemExit(0)"))
    assert verify.verify(device, _index(device)).status == verify.VERIFIED


def test_a_canary_that_fails_or_hangs_fails_the_device(device, cache, monkeypatch):
    monkeypatch.setattr(verify, "CANARY", ("-c", "raise AssertionError('wrong result')"))
    verdict = verify.verify(device, _index(device))
    assert verdict.status == verify.FAILED
    assert "canary failed at start-up" in verdict.reason and "wrong result" in verdict.reason
    verify.forget()
    cache.unlink()
    hang = "import time; print('stage: s', flush=True); time.sleep(60)"
    monkeypatch.setattr(verify, "CANARY", ("-c", hang))
    monkeypatch.setattr(verify, "CANARY_TIMEOUT_S", 3)
    verdict = verify.verify(device, _index(device))
    assert verdict.status == verify.FAILED and "ran past 3 s at s" in verdict.reason


# A canary that passes its first run of each dtype and fails every later one.
FAILS_AGAIN = (
    "-c",
    "import os, sys; mark = os.path.join(os.environ['CLPOOL_TEST_MARKS'], sys.argv[3]); "
    "print('stage: again', flush=True); again = os.path.exists(mark); open(mark, 'a').close(); "
    "sys.exit(1 if again else 0)",
)


def test_pocl_is_verified_again_with_its_kernel_cache_filled(device, cache, monkeypatch):
    """On PoCL the canary runs twice, the second time with every program in PoCL's kernel
    cache (where PyPI's PoCL on an AMD Zen 4 loses its bfloat16 kernels); elsewhere once."""
    marks = cache.parent / "marks"
    marks.mkdir()
    monkeypatch.setenv("CLPOOL_TEST_MARKS", str(marks))
    monkeypatch.setattr(verify, "CANARY", FAILS_AGAIN)
    verdict = verify.verify(device, _index(device))
    assert sorted(p.name for p in marks.iterdir()) == sorted(verify.dtypes_to_verify(device))
    if "Portable Computing Language" in device.platform.name:
        assert verdict.status == verify.FAILED
        assert verdict.reason == "on its run from PoCL's kernel cache, the canary failed at again"
    else:
        assert verdict.status == verify.VERIFIED


def test_cli_shows_refused_devices_and_check_exits_1(device, cache, monkeypatch):
    monkeypatch.setattr(verify, "CANARY", CRASH)
    result = CliRunner().invoke(cli.main, ["devices"])
    assert result.exit_code == 0, result.output
    assert f"device {_index(device)} refused: the driver crashed (SIGSEGV)" in result.output
    row = [line for line in result.output.splitlines() if line.startswith(f"{_index(device)} ")]
    row = row[0]
    assert row.split()[-1] == "failed"
    result = CliRunner().invoke(cli.main, ["check", "--device", str(_index(device))])
    assert result.exit_code == 1 and "refuses this device" in result.output
    result = CliRunner().invoke(cli.main, ["check", "--device", "no such device"])
    assert result.exit_code == 2


def test_the_real_canary_verifies_the_suite_device_and_marks_the_default(device, cache):
    verdict = verify.verify(device, _index(device))
    assert verdict == verify.Verdict(verify.VERIFIED)
    assert json.loads(cache.read_text())[verify.key(device)]["status"] == verify.VERIFIED
    result = CliRunner().invoke(cli.main, ["devices", "--json"])
    listed = json.loads(result.stdout)
    assert listed[_index(device)]["verdict"] == verify.VERIFIED
    assert sum(d["default"] for d in listed) == 1


def _defined_kernels() -> set[str]:
    folder = programs.kernel_dir()
    return {
        name
        for path in folder.glob("*.cl")
        for name in re.findall(r"__kernel void (\w+)", path.read_text())
    }


def test_the_canary_launches_every_kernel_the_device_runs(device, launched, monkeypatch):
    monkeypatch.setenv("CLPOOL_FP16", "storage")
    verify.trust(device)
    try:
        canary.run(device)
    finally:
        verify.forget()
    ran = {name for name, _ in launched} | {"clpool_contiguous", "clpool_contiguous_index"}
    gpu_only = {
        "adaptive_avg_pool2d_band",
        "adaptive_avg_pool2d_global",
        "adaptive_avg_pool2d_global_backward",
        "adaptive_avg_pool2d_global_strided",
        "adaptive_max_pool_global",
        "adaptive_max_pool_global_backward",
        "adaptive_max_pool_clear",
        "adaptive_max_pool_scatter",
        "adaptive_avg_pool3d_slab",
    }
    if policy.current().on_gpu(device):
        cpu_only = {"max_unpool_tile_rows"}
        expected = {k for k in _defined_kernels() if not k.endswith("_plane")} - cpu_only
    else:
        expected = _defined_kernels() - gpu_only
    assert expected <= ran, expected - ran
    assert {t for _, t in launched} >= {np.dtype(np.float32), np.dtype(np.float16)}


def test_the_canary_reports_a_wrong_result(device, monkeypatch):
    verify.trust(device)
    monkeypatch.setattr(ref, "avg_pool2d", lambda x, *a: ref.max_pool2d(x, *a))
    try:
        with pytest.raises(AssertionError, match="avg_pool2d k3 s2 p1 in float32"):
            canary.run(device, "float32")
    finally:
        verify.forget()


# ---------------------------------------------------------------- device choice


def test_platform_colon_device_indices_and_names():
    for p, platform in enumerate(cl.get_platforms()):
        for d, dev in enumerate(platform.get_devices()):
            assert discovery._match(f"{p}:{d}", "device") == dev
            assert discovery._match(f" {p} : {d} ", "device") == dev
        # A name picks the first platform whose name holds it (two PoCLs share one).
        first = next(q for q in cl.get_platforms() if platform.name[:5] in q.name)
        assert discovery._match(f"{platform.name[:5]}:0", "device").platform == first
    with pytest.raises(Problem, match="platform index 99 out of range"):
        discovery._match("99:0", "device")
    with pytest.raises(Problem, match="device index 99 out of range"):
        discovery._match("0:99", "device")


def test_words_cpu_gpu_pocl(device):
    found = discovery.cl_devices()
    for word, bit in (("cpu", cl.device_type.CPU), ("GPU", cl.device_type.GPU)):
        kind = [d for d in found if d.type & bit]
        if kind:
            assert discovery._match(word, "device") in kind
        else:
            with pytest.raises(Problem, match="no OpenCL device matches"):
                discovery._match(word, "device")
    pocl = [d for d in found if "Portable" in d.platform.name]
    if pocl:
        assert discovery._match("pocl", "device") in pocl


def test_pyopencl_ctx_is_honoured_after_clpool_device(device, monkeypatch):
    monkeypatch.delenv("CLPOOL_DEVICE")
    p = cl.get_platforms().index(device.platform)
    d = device.platform.get_devices().index(device)
    monkeypatch.setenv("PYOPENCL_CTX", f"{p}:{d}")
    assert discovery.select() == device
    monkeypatch.setenv("PYOPENCL_CTX", "7777:0")
    with pytest.raises(Problem, match=r"PYOPENCL_CTX='7777:0': platform index 7777"):
        discovery.select()
    monkeypatch.setenv("CLPOOL_DEVICE", str(_index(device)))  # CLPOOL_DEVICE comes first
    assert discovery.select() == device


@pytest.mark.parametrize("value", ["\u00b2", "9999", "zzz-none"])
def test_a_bad_clpool_device_names_the_variable(value, monkeypatch):
    monkeypatch.setenv("CLPOOL_DEVICE", value)
    with pytest.raises(PoolArgumentError, match="CLPOOL_DEVICE=") as info:
        clpool.max_pool2d(np.zeros((1, 1, 2, 2), np.float32), 2)
    assert value in info.value.reason


def test_a_blank_clpool_device_is_unset(device, monkeypatch):
    monkeypatch.setenv("CLPOOL_DEVICE", "  ")
    monkeypatch.delenv("PYOPENCL_CTX", raising=False)
    assert discovery.select() == discovery._default(discovery.cl_devices(), run=True)


# ---------------------------------------------------------------- known driver bugs


def _fake(platform="Portable Computing Language", pversion="PoCL 3.0 LLVM 14.0.6", target="z"):
    plat = SimpleNamespace(name=platform, version=pversion)
    return SimpleNamespace(platform=plat, version=f"OpenCL 3.0 PoCL HSTR: x86_64-{target}")


def test_the_quirk_table_matches_platform_version_target_and_host(monkeypatch):
    (zen4,) = quirks.QUIRKS
    monkeypatch.setattr(quirks, "host_flags", lambda: frozenset({"avx2", "avx512f"}))
    assert quirks.applies(zen4, _fake(target="znver3"))
    assert not quirks.applies(zen4, _fake(target="skylake-avx512"))
    assert not quirks.applies(zen4, _fake(pversion="PoCL 3.1 LLVM 15.0.6", target="znver3"))
    assert not quirks.applies(zen4, _fake(platform="Intel(R) OpenCL", target="znver3"))
    monkeypatch.setattr(quirks, "host_flags", lambda: frozenset({"avx2"}))
    assert not quirks.applies(zen4, _fake(target="znver3"))


def test_a_gpus_builds_leave_out_the_16_lane_code(build_options):
    """A GPU's programs are built with -DCLPOOL_NO_LANES16 (the 16-lane code serves a CPU's
    kernels only) and give the reference's results; a CPU's keep it unless a quirk says."""
    rng = np.random.default_rng(4)
    x = shapes.stored_channels_last(rng.standard_normal((2, 16, 9, 10, 11)).astype(np.float32))
    g = shapes.stored_channels_last(rng.standard_normal((2, 16, 5, 5, 6)).astype(np.float32))
    quirk = plans.NO_LANES16 in quirks.options(clpool.default_queue().device)
    for gpu in (True, False):
        build_options.clear()
        with policy.use(gpu=gpu):
            assert_close(clpool.avg_pool3d(x, 3, 2, 1), ref.avg_pool3d(x, 3, 2, 1))
            assert_close(clpool.avg_pool3d_backward(g, x, 3, 2, 1),
                         ref.avg_pool3d_backward(g, x, 3, 2, 1))  # fmt: skip
            image = x[:, :, 0]
            assert_close(clpool.max_pool2d(image, 3, 2, 1), ref.max_pool2d(image, 3, 2, 1))
        assert build_options, gpu
        assert all((plans.NO_LANES16 in o) == (gpu or quirk) for o in build_options), gpu


def test_a_quirk_reaches_every_build_and_the_verdict_key(device, build_options, monkeypatch):
    before = verify.key(device)
    row = quirks.Quirk(device.platform.name, "", "", "", ("-DCLPOOL_NO_LANES16",), "test")
    monkeypatch.setattr(quirks, "QUIRKS", (row,))
    quirks.options.cache_clear()
    try:
        x = np.random.default_rng(3).standard_normal((2, 8, 20, 70)).astype(np.float32)
        out, idx = clpool.max_pool2d_with_indices(x, 3, 2, 1)
        want, want_i = ref.max_pool2d_with_indices(x, 3, 2, 1)
        assert np.array_equal(out, want.astype(np.float32)) and np.array_equal(idx, want_i)
        np.testing.assert_allclose(
            clpool.avg_pool2d(x, 3, 3, 1), ref.avg_pool2d(x, 3, 3, 1), rtol=1e-5, atol=1e-6
        )
        wide = np.zeros((2, 3, 520), np.float32)  # cells of 130 columns: 16 lanes, but
        wide[0, 1, 333] = 1
        assert clpool.adaptive_max_pool1d(wide, 4, True)[1][0, 1, 2] == 333
        assert build_options and all("-DCLPOOL_NO_LANES16" in o for o in build_options)
        assert not any("-DCLPOOL_MAX_LANES=16" in o for o in build_options)
        assert device.type & cl.device_type.GPU or any(
            "-DCLPOOL_MAX_LANES=4" in o for o in build_options
        )
        assert verify.key(device) != before  # verified with the forms it runs
    finally:
        monkeypatch.undo()
        quirks.options.cache_clear()


# ---------------------------------------------------------------- builds and runtimes


def test_a_build_without_the_kernel_is_a_kernel_error(device, monkeypatch):
    context = discovery.runtime(device).context
    monkeypatch.setattr(programs, "kernels", lambda *a: {})
    with pytest.raises(Problem, match="gave no kernel max_pool2d_forward") as info:
        programs.kernel(context, "max_pool.cl", ("-DX=1",), "max_pool2d_forward")
    assert info.value.kind is KernelError


def test_registered_runtimes_that_did_not_load_are_named(monkeypatch):
    monkeypatch.setattr(icd, "_registered", 3)
    monkeypatch.setenv("OCL_ICD_VENDORS", "/tmp/somewhere")
    with pytest.warns(RuntimeWarning, match="OCL_ICD_VENDORS=/tmp/somewhere"):
        icd.warn_if_registered_too_late(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        icd.warn_if_registered_too_late(3)


def test_signal_names():
    assert verify._signal_name(signal.SIGSEGV) == "SIGSEGV"
    assert verify._signal_name(250) == "signal 250"


# ---------------------------------------------------------------- processes


def _child_pools(queue) -> None:
    """In a forked child: what max_pool2d says (or the numpy sum, when no OpenCL)."""
    try:
        clpool.max_pool2d(np.zeros((1, 1, 4, 4), np.float32), 2)
        queue.put("ran")
    except clpool.PoolError as e:
        queue.put(f"{type(e).__name__}: {e}")


def _child_numpy(queue) -> None:
    queue.put(float(np.arange(10.0).sum()))


@pytest.mark.parametrize(
    "target, want",
    [(_child_pools, "PoolError: max_pool2d kernel failed"), (_child_numpy, 45.0)],
    ids=["clpool", "numpy"],
)
def test_a_forked_child_gets_an_error_in_words_never_a_hang(device, target, want):
    import multiprocessing

    clpool.max_pool2d(np.zeros((1, 1, 4, 4), np.float32), 2)  # the parent used OpenCL
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=target, args=(queue,))
    child.start()
    try:
        got = queue.get(timeout=60)
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()
    if isinstance(want, str):
        assert got.startswith(want) and 'set_start_method("spawn")' in got, got
    else:
        assert got == want
    assert clpool.max_pool2d(np.ones((1, 1, 2, 2), np.float32), 2).item() == 1.0  # parent ok
