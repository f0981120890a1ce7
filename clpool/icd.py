"""OpenCL runtimes that pip installed into this Python environment, made visible to the
ICD loader (which reads OCL_ICD_VENDORS once, at the process's first list of platforms).
Imports nothing of OpenCL, so that clpool can run it before pyopencl lists platforms."""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import warnings


def register_prefix_runtimes() -> int:
    """Let the ICD loader find OpenCL runtimes pip installed into this environment.

    Wheels such as intel-opencl-rt put their library in <prefix>/lib and an .icd file in
    <prefix>/etc/OpenCL/vendors that names a build-time path. When such a file exists and
    OCL_ICD_VENDORS is unset, write corrected .icd files (and the system's own) to a
    folder and point OCL_ICD_VENDORS there. PoCL from pyopencl[pocl] is found either way.
    Returns the number of runtimes registered so, 0 when none. Runs when clpool is
    imported: the ICD loader reads OCL_ICD_VENDORS once, at the process's first
    pyopencl.get_platforms().
    """
    vendors = os.path.join(sys.prefix, "etc", "OpenCL", "vendors")
    if "OCL_ICD_VENDORS" in os.environ or not os.path.isdir(vendors):
        return 0
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
        return 0
    tag = hashlib.sha1(sys.prefix.encode()).hexdigest()[:12]
    target = os.path.join(tempfile.gettempdir(), f"clpool-icd-{os.getuid()}-{tag}")
    os.makedirs(target, exist_ok=True)
    for name, lib in entries.items():
        with open(os.path.join(target, name), "w") as f:
            f.write(lib + "\n")
    os.environ["OCL_ICD_VENDORS"] = target
    return len(entries)


# Registered when clpool is imported, before clpool lists platforms.
_registered = register_prefix_runtimes()


def warn_if_registered_too_late(platforms: int) -> None:
    """Say plainly what to do when fewer platforms were listed than runtimes registered:
    the process listed OpenCL platforms before importing clpool, or a runtime failed to
    load."""
    if platforms < _registered:
        warnings.warn(
            f"{_registered} OpenCL runtimes are registered for this Python environment but "
            f"only {platforms} platforms were listed. If the process listed OpenCL platforms "
            "before importing clpool, import clpool first or start Python with "
            f"OCL_ICD_VENDORS={os.environ['OCL_ICD_VENDORS']}",
            RuntimeWarning,
            stacklevel=3,
        )
