"""`clpool check`: the table, the exit codes, and errors reported without a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

import clpool
from clpool import check, discovery
from clpool import reference as ref
from clpool.cli import main

OPS = ["max_pool1d", "max_pool1d_with_indices_backward", "avg_pool1d", "avg_pool1d_backward",
       "adaptive_avg_pool1d", "adaptive_avg_pool1d_backward",
       "max_pool2d", "max_pool2d_with_indices", "max_pool2d_with_indices_backward",
       "avg_pool2d", "avg_pool2d_backward", "adaptive_avg_pool2d",
       "adaptive_avg_pool2d_backward", "max_pool3d", "max_pool3d_with_indices",
       "max_pool3d_with_indices_backward", "avg_pool3d", "avg_pool3d_backward",
       "adaptive_avg_pool3d", "adaptive_avg_pool3d_backward", "adaptive_max_pool1d",
       "adaptive_max_pool1d_backward", "adaptive_max_pool2d", "adaptive_max_pool2d_backward",
       "adaptive_max_pool3d", "adaptive_max_pool3d_backward"]
UNPOOL_OPS = [f"max_unpool{n}d{b}" for n in (1, 2, 3) for b in ("", "_backward")]  # exact
OPS += UNPOOL_OPS
EXACT = {"max_pool1d", "max_pool2d", "max_pool2d_with_indices", "max_pool3d",
         "max_pool3d_with_indices", "adaptive_max_pool1d", "adaptive_max_pool2d",
         "adaptive_max_pool3d", *UNPOOL_OPS}


def invoke(*args: str):
    return CliRunner().invoke(main, ["check", *args])


def _dtypes(device) -> list[str]:
    return ["float32"] + (["float64"] if discovery.has_fp64(device) else []) + \
        (["float16"] if discovery.has_fp16(device) else [])


def test_check_passes_on_the_suite_device(device):
    for dtype in _dtypes(device):
        result = invoke("--dtype", dtype)
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()  # build notices go to stderr
        assert device.name.strip() in lines[0]
        for op in OPS:
            row = next(line for line in lines if line.split()[:1] == [op])
            assert row.split()[1] == dtype and " pass " in f"{row} "
        assert f"all {len(OPS)} ops pass" in result.output


def test_check_default_dtype_and_device_option(device):
    index = discovery.cl_devices().index(device)
    result = invoke("--device", str(index))
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.stdout.splitlines()[3 : 3 + len(OPS)]]
    assert [r[0] for r in rows] == OPS and {r[1] for r in rows} == {"float32"}


def test_check_json_gives_every_op_and_the_exit_code(device, monkeypatch):
    import json

    result = CliRunner().invoke(main, ["check", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["device"] == device.name.strip() and report["passed"] is True
    assert [r["op"] for r in report["ops"]] == OPS
    assert all(r["passed"] and r["error"] <= r["tolerance"] for r in report["ops"])
    # a mismatch: exit 1, and the JSON says which op
    real = check.error
    monkeypatch.setattr(check, "error", lambda got, want: 1.0 if got.ndim else real(got, want))
    result = CliRunner().invoke(main, ["check", "--json"])
    report = json.loads(result.output)
    assert result.exit_code == 1 and report["passed"] is False
    assert not any(r["passed"] for r in report["ops"])


def test_run_reports_every_op_and_tolerance():
    rows = check.run()
    assert [r.op for r in rows] == OPS
    for r in rows:
        assert r.passed and r.cases >= 3 and r.dtype == "float32" and r.seconds > 0
        assert r.error <= r.tolerance == 1e-5
        assert r.exact == (r.op in EXACT)
        if r.exact:
            assert r.error == 0


def test_mismatch_exits_one(monkeypatch):
    def off_avg(*args, **kwargs):
        return real_avg(*args, **kwargs) * (1 + 3e-5)

    def off_indices(*args, **kwargs):
        out, idx = real_max(*args, **kwargs)
        return out, np.where(idx >= 0, idx + 1, idx)

    real_avg, real_max = ref.avg_pool2d, ref.max_pool2d_with_indices
    monkeypatch.setattr(ref, "avg_pool2d", off_avg)
    monkeypatch.setattr(ref, "max_pool2d_with_indices", off_indices)
    result = invoke()
    assert result.exit_code == 1, result.output
    failed = {line.split()[0] for line in result.output.splitlines() if " FAIL (" in line}
    assert {"avg_pool2d", "max_pool2d_with_indices"} <= failed
    assert "not bit-exact" in result.output and "> 1e-05" in result.output
    assert "adaptive_avg_pool2d " in result.output  # the rest still ran
    assert result.output.rstrip().splitlines()[-1].startswith("FAILED: ")


def test_missing_dtype_prints_the_pool_error(pocl_device, monkeypatch):
    if discovery.has_fp16(pocl_device):
        pytest.skip("this PoCL device has fp16")
    monkeypatch.delenv("CLPOOL_FP16", raising=False)
    index = discovery.cl_devices().index(pocl_device)
    result = invoke("--device", str(index), "--dtype", "float16")
    assert result.exit_code == 2
    assert isinstance(result.exception, SystemExit)  # no traceback
    name = pocl_device.name.strip()
    assert (f"max_pool1d kernel failed (device={name}, dtype=float16): the device lacks "
            "cl_khr_fp16") in result.output


@pytest.mark.parametrize("dtype", ["int32", "bool", "complex64"])
def test_dtype_clpool_lacks(device, dtype):
    result = invoke("--dtype", dtype)
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    assert (f"max_pool2d kernel failed (device={device.name.strip()}, dtype={dtype}): "
            "dtype") in result.output


def test_bad_options():
    result = invoke("--dtype", "no-such-type")
    assert result.exit_code == 2 and "--dtype" in result.output
    result = invoke("--device", "no such device anywhere")
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    assert "kernel failed" in result.output and "no OpenCL device matches" in result.output


def test_error_measure():
    nan, inf = np.nan, np.inf
    assert check.error(np.array([1.0, nan, -inf]), np.array([1.0, nan, -inf])) == 0
    assert check.error(np.array([nan]), np.array([1.0])) == inf
    assert check.error(np.array([-inf]), np.array([0.0])) == inf
    assert check.error(np.array([1.0]), np.array([1.0, 2.0])) == inf
    assert check.error(np.array([1], np.int32), np.array([1], np.int64)) == inf
    assert check.error(np.array([2.0 + 2e-6]), np.array([2.0])) == pytest.approx(1e-6)
    assert check.error(np.array([1e-3]), np.array([0.0])) == pytest.approx(1e-3)  # absolute


def test_python_m_clpool_check_without_traceback(pocl_device):
    """The real entry point, in a fresh process: a refused dtype is one line and exit 2."""
    index = discovery.cl_devices().index(pocl_device)
    env = {k: v for k, v in os.environ.items() if k != "CLPOOL_FP16"}
    proc = subprocess.run([sys.executable, "-m", "clpool", "check", "--device", str(index),
                           "--dtype", "float16" if not discovery.has_fp16(pocl_device)
                           else "int32"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "kernel failed (device=" in proc.stderr
    assert clpool.PoolError.__name__ not in proc.stderr  # the message, not a repr


@pytest.mark.parametrize("verbose", [False, True])
def test_compiler_warnings_only_with_verbose(verbose):
    """PyOpenCL's CompilerWarning (clpool's builds and PyOpenCL's own, as bench's `x * 2`)
    reaches the terminal only under `clpool -v`."""
    script = (
        "import sys, warnings, pyopencl as cl\n"
        "from clpool import cli\n"
        "cli.main.command('warn')(lambda: warnings.warn('compiler noise', cl.CompilerWarning))\n"
        "cli.main(sys.argv[1:])\n"
    )
    args = [sys.executable, "-c", script, *(["-v"] if verbose else []), "warn"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert ("compiler noise" in done.stderr) == verbose
