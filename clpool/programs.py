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
_lock = threading.Lock()
builds = 0  # how many programs this process has built, for tests and the cold-start report


def kernels(context: cl.Context, name: str, options: tuple[str, ...]) -> dict[str, cl.Kernel]:
    """The kernels of `name` built with `options` on `context`, built on first use."""
    global builds
    key = (context.int_ptr, name, options)
    with _lock:
        found = _programs.get(key)
        if found is None:
            found = _build(context, name, source(name), options)
            _programs[key] = found
            builds += 1
        return found


def _build(context: cl.Context, name: str, text: str,
           options: tuple[str, ...]) -> dict[str, cl.Kernel]:
    program = cl.Program(context, text)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cl.CompilerWarning)
            program.build(options=list(options))
    except cl.Error as e:
        # PyOpenCL puts the build log of every device into the message.
        raise Problem(KernelError, f"building {name} with {' '.join(options) or 'no options'} "
                                   f"failed: {e}", log=str(e), options=" ".join(options)) from e
    return {k.function_name: k for k in program.all_kernels()}
