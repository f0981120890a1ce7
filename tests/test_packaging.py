"""Issue 15's packaging: the public types and their checker, the project's metadata and
version source, and compilers' output on the process's stderr kept out of quiet builds."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pyopencl as cl
import pytest

import clpool
from clpool import _version, discovery, errors, programs, verify
from clpool.errors import KernelError

ROOT = Path(__file__).resolve().parents[1]
# clang warns "expression result unused" by default: PoCL's build writes
# "1 warning generated." to file descriptor 2
WARNS = "__kernel void k(__global float *a) { a[0]; }\n"


def _pyproject() -> dict[str, Any]:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


# ---------------------------------------------------------------- types and metadata


def test_size_and_tensor_types_accept_what_the_ops_take_and_refuse_the_rest(tmp_path):
    pytest.importorskip("mypy")
    pytest.importorskip("torch")
    code = textwrap.dedent("""
        import numpy as np
        import pyopencl.array as cla
        import torch

        from clpool.types import OptionalSize, Size, Tensor


        def op(x: Tensor, k: Size, o: OptionalSize) -> None: ...


        def calls(a: cla.Array) -> None:
            op(np.zeros(3), 2, None)
            op(torch.zeros(3), (2, 3), (None, 4))
            op(a, (1,), 7)
            op([1, 2], 2, 2)  # wrong
            op(np.zeros(3), 2.5, 2)  # wrong
            op(np.zeros(3), (2, None), 2)  # wrong
            op(np.zeros(3), 2, "a")  # wrong
    """)
    (tmp_path / "use.py").write_text(code)
    lines = code.splitlines()
    expected = [i for i, line in enumerate(lines, 1) if line.endswith("# wrong")]
    env = dict(os.environ, MYPYPATH=str(ROOT))
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
         "--cache-dir", str(tmp_path / "cache"), "use.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    found = [line for line in run.stdout.splitlines() if ": error:" in line]
    assert sorted(int(e.split(":")[1]) for e in found) == expected, run.stdout + run.stderr


def test_the_version_has_one_source():
    project = _pyproject()
    assert project["project"]["dynamic"] == ["version"]
    assert "version" not in project["project"]
    assert project["tool"]["hatch"]["version"] == {"path": "clpool/_version.py"}
    assert clpool.__version__ == _version.__version__
    kept = [p.name for p in (ROOT / "clpool").glob("*.py")
            if re.search(r"^__version__\s*=", p.read_text(), re.M)]  # fmt: skip
    assert kept == ["_version.py"]


def test_project_urls_and_mypy_settings():
    project = _pyproject()
    urls = project["project"]["urls"]
    assert set(urls) == {"Homepage", "Documentation", "Issues", "Source"}
    assert all(u.startswith("https://github.com/clpool/clpool") for u in urls.values())
    dev = project["project"]["optional-dependencies"]["dev"]
    assert any(d.startswith("mypy") for d in dev)
    mypy = project["tool"]["mypy"]
    assert mypy["strict"] is True
    untyped = {m for o in mypy["overrides"] if o.get("ignore_errors") for m in o["module"]}
    for module in untyped:  # the list of modules not yet typed names modules that exist
        assert (ROOT / "clpool" / f"{module.removeprefix('clpool.')}.py").is_file(), module
    typed = {"errors", "lru", "policy", "programs", "icd", "quirks", "discovery", "verify",
             "capabilities", "plot", "types", "shapes", "kernels", "launch", "plans", "adopt",
             "bfloat16", "ops", "pool1d", "pool3d", "cli", "torch", "check", "canary", "bench",
             "reference", "unpool", "adaptive_max"}  # fmt: skip
    assert not untyped & {f"clpool.{m}" for m in typed}
    assert "mypy" in (ROOT / "Makefile").read_text().split("lint:")[1].split("\n\n")[0]


# ---------------------------------------------------------------- compilers' stderr


@pytest.fixture
def built(device: cl.Device) -> tuple[cl.Context, cl.Program]:
    """A context of its own and a program built on it, for stand-in compiles."""
    context = cl.Context([device])
    return context, programs._compile(context, WARNS, [])


def _stand_in(program: cl.Program, writes: bytes, then: object = None):
    """A compile that writes `writes` to file descriptor 2, then runs `then` (a callable) or
    raises it (a cl.Error), else gives `program`."""

    def compile(*args: object) -> cl.Program:
        os.write(2, writes)
        if isinstance(then, cl.Error):
            raise then
        if callable(then):
            then()
        return program

    return compile


def test_a_quiet_build_keeps_the_compilers_count_off_stderr(built, capfd, monkeypatch):
    context, program = built
    writes = b"1 warning generated.\ndriver: hello\n2 warnings and 1 error generated.\n"
    monkeypatch.setattr(programs, "_compile", _stand_in(program, writes))
    programs.kernels(context, "max_pool.cl", ("-DQUIET=1",))
    os.write(2, b"after the build\n")  # file descriptor 2 is back where it was
    assert capfd.readouterr().err == "driver: hello\nafter the build\n"


def test_a_verbose_build_shows_what_the_compiler_writes(built, capfd, monkeypatch):
    context, program = built
    monkeypatch.setattr(programs, "quiet", False)
    monkeypatch.setattr(programs, "_compile", _stand_in(program, b"1 warning generated.\n"))
    programs.kernels(context, "max_pool.cl", ("-DVERBOSE=1",))
    assert capfd.readouterr().err == "1 warning generated.\n"


def test_a_failed_quiet_build_keeps_the_compilers_output_in_its_log(built, capfd, monkeypatch):
    context, program = built
    failure = cl.Error("BUILD_PROGRAM_FAILURE")
    stand_in = _stand_in(program, b"1 error generated.\n", failure)
    monkeypatch.setattr(programs, "_compile", stand_in)
    with pytest.raises(KernelError) as info, errors.reporting("max_pool2d"):
        programs.kernels(context, "max_pool.cl", ("-DFAILS=1",))
    assert info.value.log.startswith("BUILD_PROGRAM_FAILURE")
    assert info.value.log.endswith("\n1 error generated.\n")
    assert capfd.readouterr().err == ""


def test_an_announcement_during_a_quiet_build_reaches_stderr_at_once(built, monkeypatch):
    context, program = built
    stderr = os.fstat(2)
    seen: list[tuple[str, bool]] = []
    said = threading.Event()

    def announce(text: str) -> None:
        seen.append((text, os.path.samestat(os.fstat(2), stderr)))
        said.set()

    monkeypatch.setattr(programs, "announce", announce)
    wait = _stand_in(program, b"1 warning generated.\n", lambda: said.wait(10))
    monkeypatch.setattr(programs, "_compile", wait)
    programs.kernels(context, "max_pool.cl", ("-DSLOW=2",))
    assert seen == [("building max_pool.cl -DSLOW=2", True)]


def test_quiet_builds_in_threads_each_restore_stderr(built, capfd, monkeypatch):
    context, program = built
    slow = _stand_in(program, b"3 warnings generated.\n", lambda: threading.Event().wait(0.05))
    monkeypatch.setattr(programs, "_compile", slow)  # long enough for the threads to overlap
    threads = [
        threading.Thread(target=programs.kernels, args=(context, "max_pool.cl", (f"-DT={i}",)))
        for i in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"


CHILD = textwrap.dedent("""
    import sys
    import pyopencl as cl
    from clpool import cli, discovery, programs

    def build():
        programs.source = lambda name: sys.argv[2]
        context = cl.Context([discovery.cl_devices()[int(sys.argv[1])]])
        programs.kernels(context, "warns.cl", ())
        print("built")

    cli.main.command("build")(build)
    cli.main(sys.argv[3:])
""")


@pytest.mark.parametrize("verbose", [False, True])
def test_clpool_shows_pocls_compiler_stderr_only_with_verbose(device, tmp_path, verbose):
    """A real build of a kernel clang warns about, in a child process: PoCL writes
    "1 warning generated." to the process's stderr; `clpool` without -v shows nothing."""
    index = discovery.cl_devices().index(device)
    env = dict(os.environ, POCL_KERNEL_CACHE="0", PYOPENCL_NO_CACHE="1",
               POCL_CACHE_DIR=str(tmp_path))  # fmt: skip
    args = [sys.executable, "-c", CHILD, str(index), WARNS, *(["-v"] if verbose else []), "build"]
    run = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "built\n"
    said = [line for line in run.stderr.splitlines() if not line.startswith("building warns.cl")]
    if not verbose:  # nothing but the announcement of a build that took a second
        assert said == [], run.stderr
    elif "Portable Computing Language" in device.platform.name:
        assert "1 warning generated." in run.stderr


LLVM_FAILS = textwrap.dedent("""
    import os, sys
    import pyopencl as cl
    from clpool import discovery, programs

    def compile(*args):  # as LLVM's fatal errors: a message on fd 2, then exit
        os.write(2, b"1 warning generated.\\nLLVM ERROR: Do not know how to scalarize\\n")
        os._exit(1)

    programs._compile = compile
    programs.kernels(cl.Context([discovery.cl_devices()[int(sys.argv[1])]]), "max_pool.cl", ())
""")


def test_a_canarys_builds_leave_its_stderr_to_the_verdict(device, monkeypatch):
    """A compiler that dies mid-build takes along what a capture held: the canary's
    builds write to its stderr, which the verdict quotes, without clang's counts."""
    monkeypatch.setattr(verify, "CANARY", ("-c", LLVM_FAILS))
    verdict = verify._run_canary(device, discovery.cl_devices().index(device))
    assert verdict.status == verify.FAILED
    assert (
        verdict.reason == "the canary failed at start-up: LLVM ERROR: Do not know how to scalarize"
    )
