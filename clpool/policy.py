"""Device policy: the tuning knobs and cache sizes clpool plans with, in one object read
from the environment once. Tests and the canary swap it with `use`."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import numpy as np
import pyopencl as cl

from .errors import PoolArgumentError, Problem
from .shapes import MAX_TILE

# (rows, columns) each work-item handles, by device kind and kernel: the fastest in sweeps
# of clpool bench on the H200 and on this project's 2-core CPU (BENCHMARKS.md).
# "max_pool2d_values" is max_pool2d_forward without indices, and
# "adaptive_avg_pool2d_backward equal" the average pooling backward that adaptive pooling
# with equal cells runs. A name with " s1" is for windows of stride 1. Kernels not named
# take (1, 1); columns apply to the tiled kernels (plans.TILED) only. On a CPU the max
# backward (within 6% of (4, 1)) and the adaptive kernels (forward: faster on 3 of 5
# shapes; backward of unequal cells: 7% slower, on 2 planes: more run one per work-item)
# take (1, 1), so that a backward runs in its forward's program. " tiling": windows that
# tile the plane (the stride is the window); " row": planes of one row (the 1-D ops; a
# kernel without one lays its rows out as columns there).
TILES = {
    "GPU": {
        # with indices stored in pairs, H200: k3 s2 of [32,64,112,112] (2, 4) 62.6 us,
        # (1, 4) 66.4, (4, 2) 68.2, (2, 2) 69.1, (4, 4) 71.3; of [128,64,128,128] (2, 4)
        # 256.5, (4, 4) 267.3, (4, 2) 275.5, (1, 4) 280.3, (2, 2) 289.8 (bfloat16: (1, 4)
        # 159.6, (2, 4) 178.8, (4, 4) 190.8, (2, 2) 308.0); k2 s2 of [64,256,56,56]:
        # (2, 2) 100.7, (1, 4) 109.6, (4, 2) 112.3, (2, 4) 120.1; k3 s1 of
        # [128,64,128,128]: (2, 4) 562.8, (4, 4) 594.2, (1, 4) 625.9, (2, 2) 844.7
        "max_pool2d_forward": (2, 4),
        "max_pool2d_forward tiling": (2, 2),
        "max_pool2d_forward s1": (2, 4),
        "max_pool2d_forward bfloat16": (1, 4),
        # planes of one row: 4 columns, as values only (max_pool2d_values row)
        "max_pool2d_forward row": (1, 4),
        # k3 s2 of [32,64,112,112] on the H200: 62.0 us with (2, 2), 52.3 with (2, 4);
        # k2 s2 of [64,256,56,56]: 84.4 with (2, 2), 91.0 with (2, 4)
        "max_pool2d_values": (2, 4),
        "max_pool2d_values tiling": (2, 2),
        # planes of one row (max_pool1d), [64,256,4096] k3 s2: 1 x 4 156.3 us, 1 x 8 304.8
        "max_pool2d_values row": (1, 4),
        "max_pool2d_values s1": (4, 4),
        # k3 s2 of [32,64,112,112], windows walked per tile (padding constant): (4, 2)
        # 55.4 us, (8, 2) 59.3, (4, 4) 61.0, (8, 4) 67.4, (2, 4) 70.0; the other shapes
        # not swept, so (8, 2) stays
        "max_pool2d_backward": (8, 2),
        "avg_pool2d_forward": (2, 2),
        "avg_pool2d_forward s1": (4, 2),
        # k3 s1 of [128,64,128,128] on an H100, bfloat16: (2, 8) 272.2 us, (4, 8) 289.4,
        # (1, 8) 306.3, (4, 2) 314.7 (the s1 tile), (1, 16) 335.2, (8, 8) 380.5, (2, 16)
        # 1,698; max_pool2d's values there: (4, 4) 269.4 (the s1 tile), (4, 8) 269.6, (2, 8)
        # 290.6, (1, 8) 319.9; avg_pool2d_backward: (4, 4) 345.6, (4, 8) 344.9, (2, 8) 346.4
        "avg_pool2d_forward s1 bfloat16": (2, 8),
        # k3 s2 of [32,64,112,112], with the padding constant (the window walk folds):
        # (4, 2) 42.1 us, (8, 2) 46.6, (2, 2) 50.3, (4, 4) 58.6, (2, 4) 72.7; of
        # [128,64,128,128]: (4, 2) 179.2, (8, 2) 190.9, (4, 4) 241.7. k2 s2 of
        # [64,256,56,56] (tiling): 102.1 with (4, 2), 131.9 with (4, 4); k3 s1 of
        # [128,64,128,128]: (4, 4) 345.7, (4, 2) 431.3
        "avg_pool2d_backward": (4, 2),
        "avg_pool2d_backward tiling": (4, 2),
        # planes of one row (avg_pool1d's backward): as before the 4 x 4 tile, not timed
        "avg_pool2d_backward row": (1, 8),
        "avg_pool2d_backward s1": (4, 4),
        "adaptive_avg_pool2d_forward": (2, 1),
        "adaptive_avg_pool2d_backward equal": (16, 2),
        # planes of one row, equal cells (avg_pool2d_backward): [64,256,4096] to 64 on the
        # H200, wall: 1 x 4 201 us, 1 x 1 640, 1 x 8 547, 1 x 16 699, 1 x 32 (the 16 x 2
        # tile as columns, as before) 1,189-1,239
        "adaptive_avg_pool2d_backward equal row": (1, 4),
        # unequal cells, a cell's share worked out once for all the tile's columns; H200,
        # to 7x7 of [128,64,128,128] / [32,64,100,100], float32: (16, 2) 227.2 / 55.8
        # us, (16, 4) 191.9 / 50.2, (32, 4) 141.9 / 38.4, (64, 4) 138.6 / 37.5, (32, 8)
        # 197.6 / 68.7; bfloat16: (16, 2) 202.0 / 51.1, (16, 4) 150.6 / 40.4, (32, 4)
        # 120.6 / 35.0, (64, 4) 106.4 / 37.2, (32, 8) 191.2 / 66.5 (tiles stop at 64 rows)
        "adaptive_avg_pool2d_backward": (32, 4),
        "adaptive_avg_pool2d_backward bfloat16": (64, 4),
        # planes of one row (adaptive_avg_pool1d's backward), [64,256,4096] to 1000, wall:
        # 1 x 1 897 us, 1 x 4 665-668, 1 x 8 675, 1 x 16 670, 1 x 32 (the 16 x 2 tile as
        # columns) 1,290
        "adaptive_avg_pool2d_backward row": (1, 4),
        # rows of 4 channels of a pixel per work-item (channels-last); H200, to 7x7 of
        # [32,64,112,112]: 32.0 us with 8, 32.5 with 16 (one element each before: 110)
        "adaptive_avg_pool2d_backward_strided": (8, 1),
        # The 3-D kernels (kernels_cl/pool3d.cl; their depths: pool3d.DEPTHS).
        "max_pool3d_forward": (2, 2),
        "max_pool3d_values": (2, 2),
        # with 2 depths, rows stored 2 at a time: (2, 4) 49.5 us, (2, 2) 57.3, (4, 2)
        # 52.1, (1, 4) 72.5, (1, 2) 95.0
        "max_pool3d_backward": (2, 4),
        # H200, [8,64,16,56,56] k3 s2 p1, rows loaded as vectors (a tile's columns times
        # the stride a multiple of 4): with 2 depths, (2, 2) 50.9 us, (4, 1) 68.8, (2, 4)
        # 80.8; with 1, (4, 1) 56.1 (one column of stride 2: no vectors), (2, 2) 88.6
        "avg_pool3d_forward": (2, 2),
        # with 2 depths and one divisor for every window (shapes.avg_divisor): (4, 2)
        # 35.0 us, (2, 2) 35.2, (8, 2) 35.9, (1, 4) 65.3, (4, 4) 92.8, (2, 4) 98.5; with
        # 1 depth and each window's own divisor, as before, (2, 4) 70.8
        "avg_pool3d_backward": (4, 2),
        # rows of a column (a cell's shares worked out once for all of them): NCDHW
        # [8,64,16,56,56] from 7x7x7 on an H100, 1 row 589.6 us, 4 170.5, 8 101.4, 16 127.5
        "adaptive_avg_pool3d_backward": (8, 1),
        # Forward unmeasured on the H200 yet: two rows share a work-item's column bounds.
        "adaptive_max_pool_forward": (2, 1),
        # H200, [128,64,128,128] to 7x7, float32 / bfloat16: (16, 4) 211.3 / 253.9 us,
        # (32, 4) 205.1 / 248.9, (8, 4) 233.4 / 273.7, (16, 2) 361.2 / 398.4, (32, 2)
        # 347.5 / 383.8, (16, 1) 479.1 / 525.6 (one column, as before), (8, 8) 967.0 /
        # 285.7; [32,64,100,100] to 7x7: (16, 4) 48.8, (32, 4) 48.7, (16, 1) 102.3
        "adaptive_max_pool_backward": (16, 4),
        # planes of one row (adaptive_max_pool1d, and a 2-D op's of height 1): the tile
        # above's columns, without its rows, which would go unused
        "adaptive_max_pool_backward row": (1, 4),
        # rows of owners per work-item: H200, [32,64,56,56] to 112x112, a work-item per
        # column of owners: 1 row 64.7 us, 2 rows 67.8, 4 rows 70.7, 8 rows 79.3 (a
        # work-item per output column, as before: 4 rows 71.2); H100, 3-D k2 s2 to
        # [8,64,16,56,56]: 1 row 73.3-74.0 us, 2 rows 79.6-81.5, 4 rows 87.9
        "max_unpool_tile": (1, 1),
        # bfloat16 (16-bit elements: twice the columns for the same bytes per load and
        # store; k3 s2 of [128,64,128,128] on the H200, BENCHMARKS.md)
        "max_pool2d_values bfloat16": (4, 4),
        "avg_pool2d_forward bfloat16": (2, 4),
        # max backward, the windows walked per tile: (4, 4) 183.7 us, (8, 4) 193.3, (2, 4)
        # 199.0, (8, 2) 216.5, (4, 2) 221.0; avg backward: (4, 4) 138.9, (8, 4) 153.4,
        # (2, 4) 169.5, (8, 2) 175.3, (4, 2) 178.9
        "max_pool2d_backward bfloat16": (4, 4),
        "avg_pool2d_backward bfloat16": (4, 4),
        "adaptive_avg_pool2d_backward equal bfloat16": (32, 4),
    },
    "CPU": {
        "avg_pool2d_backward": (4, 2),
        "adaptive_avg_pool2d_backward equal": (8, 1),
    },
}


@dataclass(frozen=True)
class Policy:
    """What clpool decides by, besides the call itself."""

    # Work-items per work-group, when the device allows it.
    group: int = 256
    # Windows with sides up to this are built with their sizes as constants
    # (CLPOOL_SPECIALIZE=0 turns that off). Users pick a few fixed windows, so the number
    # of programs stays small.
    specialize: bool = True
    specialize_up_to: int = 8
    # Equal adaptive cells follow the input's size, so only square cells of these sides
    # are constants: a fixed, small set (CPU, 7x7 of [8,64,112,112], cells of 16:
    # 1.35-1.50 -> 0.72-0.82 ms). Others take their sizes as arguments.
    adaptive_cells: tuple[int, ...] = (2, 4, 8, 16)
    tiles: Mapping[str, Mapping[str, tuple[int, int]]] = field(
        default_factory=lambda: MappingProxyType(TILES)
    )
    # CLPOOL_ROWS / CLPOOL_COLS: one tile for every kernel (tuning sweeps, tests).
    rows: int | None = None
    cols: int | None = None
    # Forced choices for tests and the canary; None lets the device decide.
    gpu: bool | None = None  # plan as for a GPU
    per_plane: bool | None = None  # one work-item per plane (float32/64; CPU by default)
    # A CPU runs one work-item per plane from one plane per this many cores. On 2 cores,
    # inputs of 1 and 3 planes ran faster per plane than per tile in every op that has
    # both: wall time 1.6-86x under Intel's runtime, 4.7-236x under PoCL, so a plane's
    # kernel did 3x a tile's work a core or more (BENCHMARKS.md).
    cores_per_plane: int = 3
    # The fewest rows of a plane's band (plane_bands): a band reads the windows that
    # reach it across its edges too.
    min_band_rows: int = 8
    # CLPOOL_NHWC_TILE=rows,pixels: outputs per work-item of the channels-last forward
    # _strided kernels (tuning sweeps); None lets the device decide (nhwc_tile).
    nhwc: tuple[int, int] | None = None
    # float16 stored as half and computed in float32 on devices without cl_khr_fp16.
    fp16_storage: bool = False
    # Bounded caches: programs per context, contexts with programs, plans, queues with
    # plans and memory pools.
    programs_kept: int = 64
    contexts_kept: int = 4
    plans_kept: int = 512
    queues_kept: int = 8

    def on_gpu(self, device: cl.Device) -> bool:
        """Whether kernels and tiles are chosen for a GPU on `device`."""
        return self.gpu if self.gpu is not None else bool(device.type & cl.device_type.GPU)

    def by_plane(
        self, device: cl.Device, dtype: np.dtype, planes: int, backward: bool = False
    ) -> bool:
        """Whether an op runs one work-item per plane (a CPU, float32 or float64, bfloat16's
        forward ops, and a plane per `cores_per_plane` cores or more), rather than one per
        tile of its output. A `backward` kernel per plane adds into its output in memory,
        which a 16-bit dtype would round at every addition, not once."""
        if dtype == np.float16 or (backward and dtype.itemsize < 4):
            return False
        if self.per_plane is not None:
            return self.per_plane
        enough = planes * self.cores_per_plane >= device.max_compute_units
        return not self.on_gpu(device) and enough

    def plane_bands(self, device: cl.Device, planes: int, rows: int) -> int:
        """How many bands of rows each plane's work splits into where a kernel per plane
        can take bands: one work-item a band, as many as keep the device's cores busy
        where planes are fewer than cores, each band of `min_band_rows` rows or more."""
        cores = device.max_compute_units
        return max(1, min(cores // max(planes, 1), rows // self.min_band_rows))

    def nhwc_tile(
        self, device: cl.Device, family: str, stride1: bool, backward: bool = False
    ) -> tuple[int, int]:
        """(rows, pixels along W) of elements per work-item of a channels-last _strided
        kernel of `family` ("max", "max indices": a max forward with its indices, "avg",
        "max3d" or "adaptive3d"; `stride1`: its window's stride is 1) that takes a tile: a
        forward's outputs, or a `backward`'s gradients. On the H200, k3 s1 of
        [128,64,128,128]: max 763 -> 505 us with (2, 4), avg 756 -> 352 us with (2, 2);
        forwards of stride 2 gained nothing from tiles; on an H100, the same max with its
        indices took 1,042 us with (2, 4), 932 with (1, 2) and 831 with (1, 1). The
        backward's (2, 2), k3 s2 of [32,64,112,112]: max 110.7 -> 62.0 us, avg 103.8 -> 47.1
        us. The 3-D backward ops of NDHWC [8,64,16,56,56] k3 s2 p1 (family "max3d" or
        "adaptive3d": the adaptive average takes rows only, its gradient C-contiguous): max
        191.7 us with (1, 1), 90.2 with (2, 2), 106.7 with (4, 2), 123.0 with (1, 2);
        adaptive from 7x7x7 on an H100 212.4 us with (1, 1), 130.4 with (2, 1), 90.0 with
        (4, 1), 76.6 with (8, 1). (The average's took rows too, 130.3 us with (4, 1) on the
        H200, before its gradient went to the NCDHW tile.)"""
        if self.nhwc is not None:
            return min(self.nhwc[0], MAX_TILE), min(self.nhwc[1], MAX_TILE)
        if not self.on_gpu(device):
            return (1, 1)
        if backward:
            return (8, 1) if family == "adaptive3d" else (2, 2)
        if not stride1 or family == "max indices":
            return (1, 1)
        return (2, 4) if family == "max" else (2, 2)

    def tile(
        self,
        device: cl.Device,
        kernel: str,
        stride1: bool = False,
        bfloat16: bool = False,
        tiling: bool = False,
        row: bool = False,
    ) -> tuple[int, int]:
        """(rows, columns) each work-item of `kernel` handles (`row`: its planes are one
        row; `stride1`: its window's stride is 1; `bfloat16`: its dtype is; `tiling`: its
        windows tile the plane, the stride being the window; each where a tile is tuned
        for that, in that order, stride 1 in bfloat16 before either alone: a 2-D tile on a
        row of its own would run as rows x columns of one row)."""
        table = self.tiles["GPU" if self.on_gpu(device) else "CPU"]
        names = [f"{kernel} row"] if row else []
        names += [f"{kernel} s1 bfloat16"] if stride1 and bfloat16 else []
        names += [f"{kernel} s1"] if stride1 else []
        names += [f"{kernel} bfloat16"] if bfloat16 else []
        names += [f"{kernel} tiling"] if tiling else []
        tuned = next((table[name] for name in names if name in table), None)
        rows, cols = tuned or table.get(kernel, (1, 1))
        # at most shapes.MAX_TILE: the window checks keep positions in 32 bits for it
        return min(self.rows or rows, MAX_TILE), min(self.cols or cols, MAX_TILE)


def _positive(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    if value.isascii() and value.isdecimal() and int(value) > 0:
        return int(value)
    raise Problem(PoolArgumentError, f"{name}={value!r} must be a positive integer")


def _pair(name: str) -> tuple[int, int] | None:
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    parts = value.split(",")
    if len(parts) == 2 and all(p.strip().isascii() and p.strip().isdecimal() for p in parts):
        rows, cols = (int(p) for p in parts)
        if rows > 0 and cols > 0:
            return rows, cols
    raise Problem(PoolArgumentError, f"{name}={value!r} must be two positive integers: rows,pixels")


def _choice(name: str, allowed: tuple[str, ...], default: str) -> str:
    value = os.environ.get(name, "").strip().lower() or default
    if value not in allowed:
        raise Problem(PoolArgumentError, f"{name}={value!r} must be one of {', '.join(allowed)}")
    return value


def from_env() -> Policy:
    """The default policy with CLPOOL_SPECIALIZE, CLPOOL_ROWS, CLPOOL_COLS,
    CLPOOL_NHWC_TILE and CLPOOL_FP16 applied; a bad value is a PoolArgumentError naming the
    variable."""
    return Policy(
        specialize=_choice("CLPOOL_SPECIALIZE", ("1", "0"), "1") == "1",
        rows=_positive("CLPOOL_ROWS"),
        cols=_positive("CLPOOL_COLS"),
        nhwc=_pair("CLPOOL_NHWC_TILE"),
        fp16_storage=_choice("CLPOOL_FP16", ("storage", "native"), "native") == "storage",
    )


_current: Policy | None = None
_lock = threading.Lock()
_listeners: list[Callable[[], None]] = []  # called with no arguments whenever the policy changes


def current() -> Policy:
    """The policy in force: read from the environment at first use."""
    global _current
    if _current is None:
        with _lock:
            if _current is None:
                _current = from_env()
    return _current


def on_change(listener: Callable[[], None]) -> None:
    """Call `listener()` whenever the policy changes (caches built under the old one)."""
    _listeners.append(listener)


def set_policy(policy: Policy | None) -> None:
    """Put `policy` in force; None reads the environment again at next use."""
    global _current
    with _lock:
        _current = policy
    for listener in _listeners:
        listener()


@contextmanager
def use(policy: Policy | None = None, **changes: Any) -> Iterator[Policy]:
    """Run the block under `policy` (default: the current one) with `changes` applied."""
    before = _current
    chosen = replace(policy or current(), **changes)
    set_policy(chosen)
    try:
        yield chosen
    finally:
        set_policy(before)
