"""Device verification: before clpool runs kernels on a device it has not seen, a child
process (clpool.canary) builds and runs every kernel entry point there, so that a driver
whose compiler crashes takes down the child, not the user's process. The verdict is
cached on disk per (platform and its version, device and its version, driver version,
clpool version, kernel sources and the canary itself)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import pyopencl as cl

from . import bfloat16, programs, quirks
from ._version import __version__
from .capabilities import dtypes, fp16_storage_opt_in

VERIFIED, FAILED, UNVERIFIED = "verified", "failed", "not yet verified"
# A canary builds a dozen programs; Oclgrind and PoCL on a slow CPU take tens of seconds.
CANARY_TIMEOUT_S = 300
# The child program; tests replace it to inject a canary that crashes.
CANARY = ("-m", "clpool.canary")


@dataclass(frozen=True)
class Verdict:
    """What the canary found on one device: VERIFIED, FAILED (with why) or UNVERIFIED."""

    status: str
    reason: str = ""
    lasting: bool = True  # False: about this process, not the device (never stored)


def _text(of: cl.Device | cl.Platform, attr: str) -> str:
    try:
        return str(getattr(of, attr)).strip()
    except (cl.Error, AttributeError):
        return ""


@cache
def _sources_hash() -> str:
    """A hash of the kernel sources and of the canary and this module, which say what a
    verdict has checked."""
    digest = hashlib.sha256()
    folder = programs.kernel_dir()
    here = Path(__file__).parent
    for path in [*sorted(folder.glob("*.[ch]*")), here / "canary.py", here / "verify.py"]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def key(device: cl.Device) -> str:
    """The identity a verdict holds for. PoCL names its compiler's target in the device
    version; the kernel sources and the canary are hashed, so that an edited kernel or
    canary is verified again; float16 is verified where the device takes it, bfloat16
    where ml_dtypes is installed."""
    found = " | ".join((device_key(device), *quirks.options(device)))  # the forms it runs
    found += " | CLPOOL_FP16=storage" if fp16_storage_opt_in() else ""
    return found + (" | bfloat16" if bfloat16.available() else "")


def dtypes_to_verify(device: cl.Device) -> list[str]:
    """The dtypes the canary runs on `device`: those it takes, bfloat16 only where ml_dtypes
    is installed (without it no bfloat16 reaches a kernel)."""
    return [d for d in dtypes(device) if d != bfloat16.NAME or bfloat16.available()]


@cache
def device_key(device: cl.Device) -> str:
    """The device part of key(): platform, device, driver, clpool and its kernels."""
    platform = device.platform
    parts = [
        _text(platform, "name"),
        _text(platform, "version"),
        _text(device, "name"),
        _text(device, "version"),
        _text(device, "driver_version"),
        __version__,
        _sources_hash(),
    ]
    return " | ".join(parts)


def cache_file() -> Path:
    """Where verdicts are kept: $CLPOOL_CACHE_DIR, else $XDG_CACHE_HOME/clpool, else
    ~/.cache/clpool."""
    folder = os.environ.get("CLPOOL_CACHE_DIR", "").strip()
    if not folder:
        base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.expanduser("~/.cache")
        folder = os.path.join(base, "clpool")
    return Path(folder) / "verdicts.json"


_memory: dict[str, Verdict] = {}  # this process's verdicts, read or found
_lock = threading.Lock()  # one canary at a time


def _load() -> dict[str, dict[str, object]]:
    try:
        found = json.loads(cache_file().read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _store(name: str, verdict: Verdict) -> None:
    """Add one verdict to the cache file (written whole, then renamed into place); an
    unwritable cache leaves the verdict in this process only, with one warning."""
    path = cache_file()
    entries = _load()
    entries[name] = {"status": verdict.status, "reason": verdict.reason}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".verdicts-")
        with os.fdopen(fd, "w") as f:
            json.dump(entries, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError as e:
        warnings.warn(
            f"clpool cannot write its device verdicts to {path} ({e}); devices "
            "are verified again in each process",
            RuntimeWarning,
            stacklevel=3,
        )


def cached(device: cl.Device) -> Verdict:
    """The device's verdict as known now, without running anything."""
    name = key(device)
    found = _memory.get(name)
    if found is not None:
        return found
    entry = _load().get(name)
    if isinstance(entry, dict) and entry.get("status") in (VERIFIED, FAILED):
        found = _memory[name] = Verdict(str(entry["status"]), str(entry.get("reason", "")))
        return found
    return Verdict(UNVERIFIED)


def verify(device: cl.Device, index: int) -> Verdict:
    """The device's verdict, running the canary in a child process first where there is
    none. `index` is the device's place in discovery.cl_devices()."""
    found = cached(device)
    if found.status != UNVERIFIED:
        return found
    with _lock:
        found = cached(device)
        if found.status == UNVERIFIED:
            found = _run_canary(device, index)
            _memory[key(device)] = found
            if found.lasting:
                _store(key(device), found)
        return found


MISMATCH = 3  # the canary's exit status when its device is not the one it was sent to


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


def runs(device: cl.Device) -> int:
    """How many times the canary runs on `device`: twice on PoCL, whose second run takes
    every program from the kernel cache the first one filled (PyPI's PoCL 3.0 on an AMD
    Zen 4 builds bfloat16 programs there, then reads them back with no kernels and aborts
    at exit: RELIABILITY.md); once elsewhere."""
    return 2 if "Portable Computing Language" in _text(device.platform, "name") else 1


def _run_canary(device: cl.Device, index: int) -> Verdict:
    """Run the canary `runs(device)` times, one child process per dtype at once each time;
    the first failure is the verdict."""
    for run in range(runs(device)):
        found = _canary_round(device, index)
        if found.status == FAILED:
            if run:
                return replace(found, reason=f"on its run from PoCL's kernel cache, {found.reason}")
            return found
    return Verdict(VERIFIED)


def _canary_round(device: cl.Device, index: int) -> Verdict:
    """One run of the canary: one child process per dtype at once."""
    children = []
    for dtype in dtypes_to_verify(device):
        command = [sys.executable, *CANARY, str(index), key(device), dtype]
        try:
            children.append(
                subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env={**os.environ, programs.PARENT_READS_STDERR: "1"},
                    text=True,
                    errors="replace",
                )
            )
        except OSError as e:
            return Verdict(FAILED, f"the canary could not start: {e}")
    verdicts = [_outcome(child) for child in children]
    return next((v for v in verdicts if v.status == FAILED), Verdict(VERIFIED))


def _outcome(child: subprocess.Popen[str]) -> Verdict:
    """The verdict of one canary process, waited for."""
    try:
        stdout, stderr = child.communicate(timeout=CANARY_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        stdout, _ = child.communicate()
        return Verdict(FAILED, f"the canary ran past {CANARY_TIMEOUT_S} s at {_last_stage(stdout)}")
    if child.returncode == 0:
        return Verdict(VERIFIED)
    if child.returncode == MISMATCH:
        return Verdict(FAILED, f"the canary's process saw another device: {stderr.strip()}", False)
    stage = _last_stage(stdout)
    said = [line.strip() for line in stderr.splitlines()]
    said = [line for line in said if line and not programs.CLANG_COUNT.fullmatch(line)]
    tail = " / ".join(said[-3:])
    if child.returncode < 0:
        why = f"the driver crashed ({_signal_name(-child.returncode)}) at {stage}"
    else:
        why = f"the canary failed at {stage}"
    return Verdict(FAILED, f"{why}: {tail}" if tail else why)


def _last_stage(stdout: str) -> str:
    """The last stage the canary announced (lines "stage: ...")."""
    stages = [line[len("stage: ") :] for line in stdout.splitlines() if line.startswith("stage: ")]
    return stages[-1] if stages else "start-up"


def trust(device: cl.Device) -> None:
    """Take the device as verified in this process only: the canary's own process runs
    on the device it verifies."""
    _memory[key(device)] = Verdict(VERIFIED, "under verification in this process")


def forget() -> None:
    """Drop this process's verdicts (tests; the cache file stays)."""
    _memory.clear()
