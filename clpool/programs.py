"""Loading the .cl sources and building each program once per (context, source, options),
in a bounded cache."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from functools import cache
from pathlib import Path

import pyopencl as cl

from . import policy
from .errors import KernelError, Problem
from .lru import LRU

HEADER = "clpool.h"
_HERE = Path(__file__).resolve().parent
# Installed wheel: clpool/kernels_cl. Source checkout or editable install: ../kernels_cl.
_CANDIDATES = (_HERE / "kernels_cl", _HERE.parent / "kernels_cl")


def kernel_dir() -> Path:
    """The folder holding the .cl sources."""
    for folder in _CANDIDATES:
        if (folder / HEADER).is_file():
            return folder
    raise Problem(KernelError, f"kernel sources not found in {', '.join(map(str, _CANDIDATES))}")


@cache
def source(name: str) -> str:
    """The text of one .cl file (it includes the header through -I)."""
    return (kernel_dir() / name).read_text()


def include_options() -> tuple[str, ...]:
    """The -I option that lets the sources #include the header."""
    folder = str(kernel_dir())
    return ("-I", f'"{folder}"' if " " in folder else folder)


def exact_division(device: cl.Device) -> tuple[str, ...]:
    """The option that makes float32 division and sqrt round correctly, where `device`
    offers it: OpenCL allows them 2.5 ulp otherwise, and NVIDIA's H200 then missed
    PyTorch CPU's average gradients by an ulp (BENCHMARKS.md)."""
    exact = cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT
    return ("-cl-fp32-correctly-rounded-divide-sqrt",) if device.single_fp_config & exact else ()


class Program(Mapping[str, cl.Kernel]):
    """A built program: its kernels by name, each made when first asked for. (Making all
    of them at once with clCreateKernelsInProgram costs PoCL 1.45 MiB per context that
    it never gives back.)"""

    def __init__(self, program: cl.Program) -> None:
        _import_invoker()
        self.program = program
        try:
            names = str(program.get_info(cl.program_info.KERNEL_NAMES))
        except cl.Error:  # Intel's CPU runtime, for a program of no kernels
            names = ""
        self.names = tuple(name for name in names.split(";") if name)
        self._made: dict[str, cl.Kernel] = {}
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> cl.Kernel:
        if name not in self.names:
            raise KeyError(name)
        with self._lock:
            if name not in self._made:
                self._made[name] = cl.Kernel(self.program, name)
            return self._made[name]

    def __contains__(self, name: object) -> bool:
        return name in self.names  # without making the kernel, as Mapping's would

    def instance(self, name: str) -> cl.Kernel:
        """A new kernel `name` of this program, whose arguments no one else sets."""
        if name not in self.names:
            raise KeyError(name)
        return cl.Kernel(self.program, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


# context -> (source, options) -> Program, for at most policy.contexts_kept contexts and
# policy.programs_kept programs each: a program keeps its context alive.
_programs: LRU[LRU[Program]] = LRU(lambda: policy.current().contexts_kept)
# one lock per program being built: (context, source, options) -> lock
_building: dict[tuple[int, str, tuple[str, ...]], threading.Lock] = {}
_lock = threading.Lock()  # guards _building, the counter and the warning flag
builds = 0  # how many programs this process has built, for tests and the cold-start report
# Told about a build still running after a second (the command line says so on stderr).
announce: Callable[[str], None] | None = None
# Whether compilers' warnings on clpool's kernels are hidden, those PyOpenCL raises and
# those the compiler writes to the process's stderr (`clpool -v` shows them).
quiet = True
_uncached_said = False


def _context_programs(context: cl.Context) -> LRU[Program]:
    found = _programs.get(context.int_ptr)
    if found is None:
        found = _programs.put(context.int_ptr, LRU(lambda: policy.current().programs_kept))
    return found


def kernels(context: cl.Context, name: str, options: tuple[str, ...]) -> Program:
    """The kernels of `name` built with `options` on `context`, built on first use. A build
    blocks only callers that want the same program (and, while `quiet`, other builds: each
    captures the process's stderr)."""
    global builds
    held = _context_programs(context)
    found = held.get((name, options))
    if found is not None:
        return found
    key = (context.int_ptr, name, options)
    with _lock:
        key_lock = _building.setdefault(key, threading.Lock())
    with key_lock:
        try:
            found = held.get((name, options))
            if found is None:
                found = held.put((name, options), _build(context, name, source(name), options))
                with _lock:
                    builds += 1
            return found
        finally:
            with _lock:
                _building.pop(key, None)


def kernel(
    context: cl.Context, name: str, options: tuple[str, ...], kernel: str, own: bool = False
) -> cl.Kernel:
    """Kernel `kernel` of program `name` built with `options` on `context`; with `own`, an
    instance of its own (to set its arguments once)."""
    program = kernels(context, name, options)
    if kernel not in program:
        raise Problem(
            KernelError,
            f"building {name} gave no kernel {kernel} (the driver's "
            "build failed silently, or its cache holds a failed build)",
            options=" ".join(options),
        )
    return program.instance(kernel) if own else program[kernel]


def forget() -> None:
    """Drop every program built so far (they are built again when next wanted)."""
    _programs.clear()


def _compile(context: cl.Context, text: str, flags: list[str]) -> cl.Program:
    """Build `text` with `flags`, without PyOpenCL's compiler cache where its folder is
    not writable (PyOpenCL then trips over its own error report)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore" if quiet else "always", cl.CompilerWarning)
        try:
            built: cl.Program = cl.Program(context, text).build(options=flags)
        except KeyError as e:
            if e.args != ("PYOPENCL_CACHE_FAILURE_FATAL",):
                raise
            _say_uncached()
            built = cl.Program(cl._cl._Program(context, text)).build(options=flags)
        return built


def _build(context: cl.Context, name: str, text: str, options: tuple[str, ...]) -> Program:
    timer = None
    if announce is not None:
        said = f"building {name} {' '.join(options)}"
        timer = threading.Timer(1.0, _announce_through, [announce, said])
        timer.daemon = True
        timer.start()
    captured: list[str] = []
    try:
        capture = quiet and PARENT_READS_STDERR not in os.environ
        with _captured_stderr(captured) if capture else nullcontext():
            flags = [*options, *include_options(), *exact_division(context.devices[0])]
            program = _compile(context, text, flags)
    except Exception as e:  # a cl.Error, or a driver's answer that PyOpenCL trips over
        # PyOpenCL puts the build log of every device into the message.
        raise Problem(
            KernelError,
            f"building {name} with {' '.join(options) or 'no options'} failed: {e}",
            log="\n".join([str(e), *filter(None, captured)]),
            options=" ".join(options),
        ) from e
    finally:
        if timer is not None:
            timer.cancel()
    found = Program(program)
    if not found.names:
        raise Problem(
            KernelError,
            f"building {name} gave no kernels (the driver's build failed silently)",
            options=" ".join(options),
        )
    return found


# clang's count of its diagnostics, which PoCL lets it write to file descriptor 2
CLANG_COUNT = re.compile(r"\d+ (warning|error)s?( and \d+ (warning|error)s?)? generated\.")
# Set in a child whose parent reads its stderr (verify's canaries): its builds leave fd 2
# alone, as a compiler that crashes takes along what was captured.
PARENT_READS_STDERR = "CLPOOL_PARENT_READS_STDERR"
_capturing = threading.Lock()  # one quiet build at a time: file descriptor 2 is the process's
_swapping = threading.Lock()  # guards file descriptor 2 and _real_stderr
_real_stderr = -1  # the process's stderr (a duplicate) while a quiet build captures fd 2


def _flush_stderr() -> None:
    if sys.stderr is not None:
        sys.stderr.flush()


@contextmanager
def _captured_stderr(into: list[str]) -> Iterator[None]:
    """Send file descriptor 2 to a temporary file for the block (PoCL's clang writes
    "N warnings generated." there, outside Python), then append what reached it to `into`
    and write all but clang's counts to stderr (other threads' output, drivers' messages)."""
    global _real_stderr
    try:
        os.fstat(2)
    except OSError:  # no stderr at all: nothing to hide
        yield
        return
    with _capturing, tempfile.TemporaryFile() as file:
        with _swapping:
            _flush_stderr()
            _real_stderr = os.dup(2)
            os.dup2(file.fileno(), 2)
        try:
            yield
        finally:
            with _swapping:
                _flush_stderr()
                os.dup2(_real_stderr, 2)
                os.close(_real_stderr)
                _real_stderr = -1
            file.seek(0)
            text = file.read().decode(errors="replace")
            into.append(text)
            lines = text.splitlines(keepends=True)
            others = "".join(line for line in lines if not CLANG_COUNT.fullmatch(line.strip()))
            if others:
                os.write(2, others.encode())


def _announce_through(say: Callable[[str], None], text: str) -> None:
    """`say(text)` on the process's stderr, also while a quiet build captures fd 2."""
    with _swapping:
        if _real_stderr < 0:
            say(text)
            return
        _flush_stderr()
        captured = os.dup(2)
        os.dup2(_real_stderr, 2)
        try:
            say(text)
            _flush_stderr()
        finally:
            os.dup2(captured, 2)
            os.close(captured)


def _say_uncached() -> None:
    global _uncached_said
    with _lock:
        said, _uncached_said = _uncached_said, True
    if not said:
        warnings.warn(
            "clpool: PyOpenCL's cache directory is not writable; clpool builds programs "
            "without its compiler cache and keeps its kernel-invoker cache in a temporary "
            "folder (set XDG_CACHE_HOME to a writable folder)",
            RuntimeWarning,
            stacklevel=4,
        )


def _import_invoker() -> None:
    """Import pyopencl.invoker, which opens a cache in the user's cache folder as it loads
    (at the first kernel made); where that folder is not writable, in a temporary one."""
    if "pyopencl.invoker" in sys.modules:
        return
    try:
        import pyopencl.invoker  # noqa: F401
    except OSError:
        _say_uncached()
        saved = os.environ.get("XDG_CACHE_HOME")
        scratch = tempfile.mkdtemp(prefix="clpool-pyopencl-")
        atexit.register(shutil.rmtree, scratch, ignore_errors=True)
        os.environ["XDG_CACHE_HOME"] = scratch
        try:
            import pyopencl.invoker  # noqa: F401
        finally:
            if saved is None:
                os.environ.pop("XDG_CACHE_HOME", None)
            else:
                os.environ["XDG_CACHE_HOME"] = saved
