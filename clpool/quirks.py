"""Known driver bugs and the kernel forms clpool avoids on them: one table, with the
evidence beside each row, as browsers keep their lists of GPU driver bugs."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import pyopencl as cl


@dataclass(frozen=True)
class Quirk:
    """A driver bug: where it bites, and the build options that avoid it."""

    platform: str  # a piece of the platform's name
    platform_version: str  # a piece of the platform's version (its release, its LLVM)
    target: str  # a piece of the device version: PoCL names its compiler's target there
    host_flag: str  # a flag this host's CPU must have, from /proc/cpuinfo ("" for any)
    options: tuple[str, ...]
    evidence: str


QUIRKS = (
    Quirk(
        "Portable Computing Language",
        "LLVM 14.",
        "znver3",
        "avx512f",
        ("-DCLPOOL_NO_LANES16",),
        "PoCL 3.0-rc2 from PyPI (LLVM 14) on an AMD EPYC of family 25, model 17 (Zen 4, "
        "AVX-512, which PoCL calls znver3), 2026-12-01 (issues 13 and 18): SIGSEGV in LLVM's "
        "SLP vectorizer (vectorizeInsertElementInst -> BoUpSLP::getEntryCost -> "
        "FixedVectorType::get) while compiling max_pool2d_forward_plane and "
        "avg_pool2d_forward_plane at their first launch, and 'LLVM ERROR: Do not know how "
        "to scalarize' for avg_pool2d of (2,3,9,9) k3: 16-lane vectors assembled lane by "
        "lane. The same kernels pass on Zen 3 (no AVX-512) and under Debian's PoCL 3.1.",
    ),
)


@cache
def host_flags() -> frozenset[str]:
    """The CPU flags of this host (empty where /proc/cpuinfo cannot be read)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def _text(obj: object, attr: str) -> str:
    try:
        return str(getattr(obj, attr))
    except (cl.Error, AttributeError):
        return ""


def applies(quirk: Quirk, device: cl.Device) -> bool:
    """Whether `quirk` bites on `device` on this host."""
    return (
        quirk.platform in _text(device.platform, "name")
        and quirk.platform_version in _text(device.platform, "version")
        and quirk.target in _text(device, "version")
        and (not quirk.host_flag or quirk.host_flag in host_flags())
    )


@cache
def options(device: cl.Device) -> tuple[str, ...]:
    """The build options that avoid every known bug of `device`'s driver on this host."""
    return tuple(opt for q in QUIRKS if applies(q, device) for opt in q.options)
