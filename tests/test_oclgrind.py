"""Every clpool kernel under Oclgrind: no invalid access, race or uninitialized read, and
results equal to the float64 reference. Run with `make test-oclgrind` (pytest -m oclgrind).

Each test runs tests/oclgrind_cases.py in a subprocess whose environment registers
Oclgrind with the ICD loader (a generated OCL_ICD_VENDORS folder) and turns on its checks.
Oclgrind writes each diagnostic to stderr as a block of lines; any block other than the
one known-benign API error below fails the test, and so does any other text there.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from clpool import discovery, plans, programs

pytestmark = pytest.mark.oclgrind

ROOT = Path(__file__).resolve().parent.parent
CASES = Path(__file__).resolve().parent / "oclgrind_cases.py"
OCLGRIND_ICD = os.environ.get("CLPOOL_OCLGRIND_ICD", "/usr/lib/oclgrind/liboclgrind-rt-icd.so")

# pyopencl asks every device for CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV (0x4000) to learn
# whether it is an NVIDIA GPU (pyopencl.characterize.nv_compute_capability, called when it
# generates a kernel invoker) and takes CL_INVALID_VALUE as "no". OCLGRIND_CHECK_API
# reports that refusal. It is the only diagnostic allowed.
BENIGN = (
    "Oclgrind - OpenCL runtime error detected\n"
    "\tFunction: clGetDeviceInfo\n"
    "\tError:    CL_INVALID_VALUE\n"
    "\tFor argument 'param_name'"
)
CASE_LINE = re.compile(r"^=== (case \S+|done: .*)$")


def oclgrind_env(icd_dir: Path) -> dict[str, str]:
    """The environment of a process that runs clpool on Oclgrind with every check on."""
    (icd_dir / "oclgrind.icd").write_text(OCLGRIND_ICD + "\n")
    env = dict(os.environ)
    env.update({
        "OCL_ICD_VENDORS": str(icd_dir),
        "CLPOOL_DEVICE": "oclgrind",
        "OCLGRIND_CHECK_API": "1",
        "OCLGRIND_DATA_RACES": "1",
        "OCLGRIND_UNINITIALIZED": "1",
        # Oclgrind 21.10's uninitialized-value plugin stops with "Unsupported instruction:
        # freeze" on the LLVM `freeze` that clang's optimizer emits (e.g. for / and % in
        # clpool_contiguous), leaving the kernel's output unwritten: build unoptimized.
        "OCLGRIND_BUILD_OPTIONS": "-cl-opt-disable",
        "PYOPENCL_NO_CACHE": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    })
    return env


def diagnostics(stderr: str) -> list[str]:
    """Oclgrind's diagnostics in a stderr text, each prefixed with the case it came from;
    the benign block and the case marker lines are left out."""
    found, case, block = [], "start", []

    def flush() -> None:
        text = "\n".join(block).strip("\n")
        if text.strip() and text != BENIGN:
            found.append(f"[{case}]\n{text}")
        block.clear()

    for line in stderr.splitlines():
        marker = CASE_LINE.match(line)
        if marker:
            flush()
            case = marker.group(1)
        elif not line.strip():
            flush()
        else:
            block.append(line)
    flush()
    return found


def kernel_names() -> set[str]:
    """Every __kernel in kernels_cl/, as the built programs of the suite's device list them
    (macro-made kernels included)."""
    context = discovery.runtime(discovery.select()).context
    names = set()
    for source in plans.SOURCES.values():
        names |= set(programs.kernels(context, source, ("-DCLPOOL_DTYPE=32",)))
    return names


@pytest.fixture(scope="module")
def oclgrind(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    if not os.path.exists(OCLGRIND_ICD):
        pytest.skip(f"Oclgrind is not installed ({OCLGRIND_ICD} missing; apt-get install "
                    "oclgrind)")
    return oclgrind_env(tmp_path_factory.mktemp("oclgrind-icd"))


def run_cases(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CASES), *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(("dtype", "tile"), [("float32", None), ("float64", None),
                                           ("float32", (3, 2))])
def test_every_kernel_clean_under_oclgrind(oclgrind: dict[str, str], dtype: str,
                                           tile: tuple[int, int] | None) -> None:
    """Each dtype with the device's own work-item tiles, and float32 with tiles of 3 rows
    and 2 columns (as a GPU runs them), whose edge work-items hang over the plane."""
    env = dict(oclgrind)
    if tile:
        env.update(CLPOOL_ROWS=str(tile[0]), CLPOOL_COLS=str(tile[1]))
    proc = run_cases(env, "--dtype", dtype, "--keep-buffers")
    assert proc.stdout.startswith("device: Oclgrind"), proc.stdout + proc.stderr
    found = diagnostics(proc.stderr)
    assert not found, (f"{len(found)} Oclgrind diagnostics, the first ones:\n\n"
                       + "\n\n".join(found[:5]))
    mismatches = [line for line in proc.stdout.splitlines() if line.startswith("MISMATCH")]
    assert not mismatches, proc.stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr
    launched = re.search(rf"^launched {dtype}: (.*)$", proc.stdout, re.MULTILINE)
    assert launched, proc.stdout
    missing = kernel_names() - set(launched.group(1).split(","))
    assert not missing, f"kernels no Oclgrind case runs: {sorted(missing)}"


def test_bfloat16_clean_under_oclgrind(oclgrind: dict[str, str]) -> None:
    """A few bfloat16 cases (oclgrind_cases.bfloat16_cases): loads, rounding stores, the
    16-lane CPU rows and the bit copy, with every check on."""
    pytest.importorskip("ml_dtypes")
    proc = run_cases(oclgrind, "--dtype", "bfloat16", "--keep-buffers")
    assert proc.stdout.startswith("device: Oclgrind"), proc.stdout + proc.stderr
    found = diagnostics(proc.stderr)
    assert not found, f"{len(found)} Oclgrind diagnostics:\n\n" + "\n\n".join(found[:5])
    assert proc.returncode == 0 and "MISMATCH" not in proc.stdout, proc.stdout + proc.stderr
    launched = re.search(r"^launched bfloat16: (.*)$", proc.stdout, re.MULTILINE)
    assert launched, proc.stdout
    assert {"max_pool2d_forward_plane", "avg_pool2d_forward_plane", "clpool_contiguous"} <= set(
        launched.group(1).split(",")
    )
    new_families = {"max_pool3d_forward", "max_pool3d_backward", "avg_pool3d_forward",
                    "avg_pool3d_backward", "adaptive_avg_pool3d_forward",
                    "adaptive_avg_pool3d_backward", "adaptive_max_pool_forward",
                    "adaptive_max_pool_backward", "adaptive_max_pool_clear",
                    "adaptive_max_pool_scatter", "adaptive_avg_pool3d_slab",
                    "adaptive_avg_pool2d_global_backward", "adaptive_max_pool_global_backward",
                    "max_unpool_clear", "max_unpool_claim",
                    "max_unpool_scatter", "max_unpool_gather"}  # fmt: skip
    assert new_families <= set(launched.group(1).split(",")), launched.group(1)


def test_diagnostics_are_caught(oclgrind: dict[str, str], tmp_path: Path) -> None:
    """The stderr parser sees a real Oclgrind diagnostic (an out-of-bounds write)."""
    script = tmp_path / "bad.py"
    script.write_text(
        "import sys\n"
        "import numpy as np, pyopencl as cl\n"
        "d = [d for p in cl.get_platforms() for d in p.get_devices()\n"
        "     if 'Oclgrind' in d.platform.name][0]\n"
        "ctx = cl.Context([d]); q = cl.CommandQueue(ctx)\n"
        "k = cl.Program(ctx, '__kernel void k(__global float *a)"
        " { a[get_global_id(0) + 1] = 1.0f; }').build().k\n"
        "buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 16)\n"
        "print('=== case oob', file=sys.stderr, flush=True)\n"
        "k(q, (4,), None, buf); q.finish()\n")
    proc = subprocess.run([sys.executable, str(script)], env=oclgrind, capture_output=True,
                          text=True, timeout=300)
    found = diagnostics(proc.stderr)
    assert found and "Invalid write" in found[0] and found[0].startswith("[case oob]"), \
        proc.stderr


def test_parser_rules() -> None:
    text = (f"{BENIGN}\n\n=== case float32/x\n\n{BENIGN}\n\n"
            "Invalid read of size 4 at global memory address 0x1\n\tKernel: k\n\n"
            "=== done: 1 cases, 0 failed\n")
    assert diagnostics(text) == [
        "[case float32/x]\nInvalid read of size 4 at global memory address 0x1\n\tKernel: k"]
    assert diagnostics(f"\n{BENIGN}\n\n") == []
    assert diagnostics("Traceback (most recent call last):\n  boom") != []
