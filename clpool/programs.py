"""Loading the .cl sources and building each program once per (context, source, options)."""

from __future__ import annotations

import threading
import warnings
from functools import cache
from pathlib import Path

import pyopencl as cl

from .errors import KernelError, Problem

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
    """The text of one .cl file with the shared header pasted in front."""
    folder = kernel_dir()
    return (folder / HEADER).read_text() + "\n" + (folder / name).read_text()


_programs: dict[tuple, dict[str, cl.Kernel]] = {}
_locks: dict[tuple, threading.Lock] = {}
_lock = threading.Lock()  # guards _locks and the counter; each build holds its key's lock
builds = 0  # how many programs this process has built, for tests and the cold-start report


def kernels(context: cl.Context, name: str, options: tuple[str, ...]) -> dict[str, cl.Kernel]:
    """The kernels of `name` built with `options` on `context`, built on first use. A build
    blocks only callers that want the same program."""
    global builds
    key = (context.int_ptr, name, options)
    found = _programs.get(key)
    if found is not None:
        return found
    with _lock:
        key_lock = _locks.setdefault(key, threading.Lock())
    with key_lock:
        found = _programs.get(key)
        if found is None:
            found = _programs[key] = _build(context, name, source(name), options)
            with _lock:
                builds += 1
        return found


def kernel(context: cl.Context, name: str, options: tuple[str, ...], kernel: str) -> cl.Kernel:
    """Kernel `kernel` of program `name` built with `options` on `context`."""
    found = kernels(context, name, options).get(kernel)
    if found is None:
        raise Problem(
            KernelError,
            f"building {name} gave no kernel {kernel} (the driver's "
            "build failed silently, or its cache holds a failed build)",
            options=" ".join(options),
        )
    return found


def _build(
    context: cl.Context, name: str, text: str, options: tuple[str, ...]
) -> dict[str, cl.Kernel]:
    program = cl.Program(context, text)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cl.CompilerWarning)
            program.build(options=list(options))
    except cl.Error as e:
        # PyOpenCL puts the build log of every device into the message.
        raise Problem(
            KernelError,
            f"building {name} with {' '.join(options) or 'no options'} failed: {e}",
            log=str(e),
            options=" ".join(options),
        ) from e
    return {k.function_name: k for k in program.all_kernels()}
