"""The canary that clpool.verify runs in a child process: every kernel entry point that
clpool launches on the device, in each dtype the device takes, built generic and with
small windows as constants, on inputs wide enough for the CPU kernels' 16-lane rows, each
result checked against the float64 reference; the _strided kernels on channels-last
(and channels-last-3d) copies. Exits 0 when all pass; a driver that
crashes kills only this process. Announces each stage on stdout ("stage: ...") so that
the parent can say where it died.

    python -m clpool.canary DEVICE_INDEX DEVICE_KEY [DTYPE]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from itertools import chain
from typing import TypeAlias, cast

import numpy as np
import pyopencl as cl

from . import adaptive_max, bfloat16, check, discovery, ops, plans, policy, pool3d, unpool, verify
from . import reference as ref
from .shapes import stored_channels_last

# max_pool2d, avg_pool2d: (kernel_size, stride, padding); a stride of 1, 2 and 3 takes
# each way the CPU kernels gather 16 windows of a row.
WINDOWS = ((3, 2, 1), (2, 1, 0), (3, 3, 1))
SHAPE = (2, 3, 9, 70)  # rows of 70: the 16-lane CPU paths run for every window above
TALL = (1, 2, 40, 8)  # to (2, 2): bands of 20 rows, the GPU's band kernel

Windows: TypeAlias = tuple[tuple[int, int, int], ...]
Gradient: TypeAlias = Callable[[tuple[int, ...]], np.ndarray]
# (what, got, want, exact): got is an op's result, a numpy array for these numpy inputs.
Call: TypeAlias = tuple[str, object, np.ndarray, bool]


def _calls(x: np.ndarray, g: Gradient, windows: Windows, tall: np.ndarray) -> Iterator[Call]:
    """(what, got, want, exact) of every op on `x` over `windows`; `g(shape)` gives a
    gradient."""
    for k, s, p in windows:
        got, got_i = ops.max_pool2d_with_indices(x, k, s, p)
        want, want_i = ref.max_pool2d_with_indices(x, k, s, p)
        yield f"max_pool2d_with_indices k{k} s{s} p{p}", got, want.astype(x.dtype), True
        yield f"max_pool2d_with_indices k{k} s{s} p{p} indices", got_i, want_i, True
        yield f"max_pool2d k{k} s{s} p{p}", ops.max_pool2d(x, k, s, p), want.astype(x.dtype), True
        grad = g(want.shape)
        yield (
            f"max_pool2d_with_indices_backward k{k} s{s} p{p}",
            ops.max_pool2d_with_indices_backward(grad, x, k, s, p, indices=want_i),
            ref.max_pool2d_with_indices_backward(grad, x, want_i, k, s, p),
            False,
        )
        yield (
            f"avg_pool2d k{k} s{s} p{p}",
            ops.avg_pool2d(x, k, s, p),
            ref.avg_pool2d(x, k, s, p),
            False,
        )
        grad = g(ref.avg_pool2d(x, k, s, p).shape)
        yield (
            f"avg_pool2d_backward k{k} s{s} p{p}",
            ops.avg_pool2d_backward(grad, x, k, s, p),
            ref.avg_pool2d_backward(grad, x, k, s, p),
            False,
        )
    yield (
        f"adaptive_avg_pool2d {TALL} to 2",
        ops.adaptive_avg_pool2d(tall, 2),
        ref.adaptive_avg_pool2d(tall, 2),
        False,
    )
    # global, equal cells, unequal cells, cells of 64 elements or more of a row (a GPU's
    # work-group per cell, backward too)
    row = x.reshape(*x.shape[:2], 1, -1)
    for a, size in ((x, 1), (x, (3, 7)), (x, (4, 5)), (row, (1, 8))):
        yield (
            f"adaptive_avg_pool2d {a.shape} to {size}",
            ops.adaptive_avg_pool2d(a, size),
            ref.adaptive_avg_pool2d(a, size),
            False,
        )
        grad = g(ref.adaptive_avg_pool2d(a, size).shape)
        yield (
            f"adaptive_avg_pool2d_backward {a.shape} to {size}",
            ops.adaptive_avg_pool2d_backward(grad, a),
            ref.adaptive_avg_pool2d_backward(grad, a),
            False,
        )
    yield from _unpool_calls(x, g, windows)
    yield from _adaptive_max_calls(x, g)


def _unpool_calls(x: np.ndarray, g: Gradient, windows: Windows) -> Iterator[Call]:
    """max_unpool2d of max pooling's result back to x's size (the fast path: the window
    gather, or one work-item per plane), the same with indices in reverse (outside their
    windows: clear, claim and scatter after the gather), and its gradient (gather), over
    `windows`: bit-exact copies. Values and indices are laid out as `x` is (channels-last:
    read as they lie, a CPU's tiles by rows)."""
    keep = stored_channels_last if plans.uploads_nhwc(x) else np.asarray
    for k, s, p in windows:
        pooled, idx = ref.max_pool2d_with_indices(x, k, s, p)
        pooled, idx = keep(pooled.astype(x.dtype)), keep(idx)
        size = x.shape[-2:]
        yield (
            f"max_unpool2d k{k} s{s} p{p}",
            unpool.max_unpool2d(pooled, idx, k, s, p, size),
            ref.max_unpool(pooled, idx, 2, k, s, p, size).astype(x.dtype),
            True,
        )
        back = keep(idx[..., ::-1, ::-1].copy())
        yield (
            f"max_unpool2d k{k} s{s} p{p}, indices reversed",
            unpool.max_unpool2d(pooled, back, k, s, p, size),
            ref.max_unpool(pooled, back, 2, k, s, p, size).astype(x.dtype),
            True,
        )
        grad = g(x.shape)
        yield (
            f"max_unpool2d_backward k{k} s{s} p{p}",
            unpool.max_unpool2d_backward(grad, pooled, idx, k, s, p, size),
            ref.max_unpool_backward(grad, pooled, idx, 2).astype(x.dtype),
            True,
        )
    # windows tiling the output (kernel = stride, no padding): max_unpool_tile on a GPU
    pooled, idx = ref.max_pool2d_with_indices(x, 2, 2, 0)
    yield (
        "max_unpool2d k2 s2 p0",
        unpool.max_unpool2d(keep(pooled.astype(x.dtype)), keep(idx), 2, 2, 0, x.shape[-2:]),
        ref.max_unpool(pooled, idx, 2, 2, 2, 0, x.shape[-2:]).astype(x.dtype),
        True,
    )


def _adaptive_max_calls(x: np.ndarray, g: Gradient) -> Iterator[Call]:
    """(what, got, want, exact) of adaptive max pooling in 1-D, 2-D and 3-D on `x` (seen as
    (N, C, L), (N, C, H, W) and unbatched (C, D, H, W)), down- and upsampling: the forward
    kernel with and without indices, and the backward kernel; in 1-D also cells of 64
    elements or more (a GPU's work-group per cell)."""
    wide = (1, x.reshape(*x.shape[:2], -1), 8)
    # 1-D upsampling (a GPU's gather), 2-D rows down and columns up and 3-D down (its
    # scatter)
    for rank, a, size in ((1, x[0], 101), wide, (2, x, (4, 80)), (3, x, (2, 5, 33))):
        name = f"adaptive_max_pool{rank}d"
        forward, backward = getattr(adaptive_max, name), getattr(adaptive_max, f"{name}_backward")
        got, got_i = forward(a, size, True)
        want, want_i = ref.adaptive_max_pool_nd(a, size, rank)
        yield f"{name} {size}", got, want.astype(x.dtype), True
        yield f"{name} {size} indices", got_i, want_i, True
        yield f"{name} {size} values", forward(a, size), want.astype(x.dtype), True
        grad = g(want.shape)
        yield (
            f"{name}_backward {size}",
            backward(grad, a, want_i),
            ref.adaptive_max_pool_backward(grad, a, want_i, rank),
            False,
        )


# the 3-D ops: window (3, 2, 1), and adaptive to (2, 4, 3) and (2, 9, 3); rows of 36: the
# CPU forwards' 16-lane rows run
SHAPE_3D = (2, 2, 5, 6, 36)


def _calls_3d(x: np.ndarray, g: Gradient) -> Iterator[Call]:
    """(what, got, want, exact) of every 3-D kernel entry point on the volumes `x`."""
    want, want_i = ref.max_pool3d_with_indices(x, 3, 2, 1)
    got, got_i = pool3d.max_pool3d_with_indices(x, 3, 2, 1)
    yield "max_pool3d_with_indices", got, want.astype(x.dtype), True
    yield "max_pool3d_with_indices indices", got_i, want_i, True
    yield "max_pool3d", pool3d.max_pool3d(x, 3, 2, 1), want.astype(x.dtype), True
    grad = g(want.shape)
    yield (
        "max_pool3d_with_indices_backward",
        pool3d.max_pool3d_with_indices_backward(grad, x, 3, 2, 1, indices=want_i),
        ref.max_pool3d_with_indices_backward(grad, x, want_i, 3, 2, 1),
        False,
    )
    # each window its own divisor (ceil mode, padding left out), then one for all (27)
    for args in ((3, 2, 1, True, False), (3, 2, 1)):
        yield f"avg_pool3d {args}", pool3d.avg_pool3d(x, *args), ref.avg_pool3d(x, *args), False
        grad = g(ref.avg_pool3d(x, *args).shape)
        yield (
            f"avg_pool3d_backward {args}",
            pool3d.avg_pool3d_backward(grad, x, *args),
            ref.avg_pool3d_backward(grad, x, *args),
            False,
        )
    for size in ((2, 4, 3), (2, 9, 3)):  # down (a GPU's backward by slabs), rows up (gather)
        want = ref.adaptive_avg_pool3d(x, size)
        yield f"adaptive_avg_pool3d {size}", pool3d.adaptive_avg_pool3d(x, size), want, False
        grad = g(want.shape)
        yield (
            f"adaptive_avg_pool3d_backward {size}",
            pool3d.adaptive_avg_pool3d_backward(grad, x),
            ref.adaptive_avg_pool3d_backward(grad, x),
            False,
        )


def stages(device: cl.Device) -> list[tuple[np.dtype, bool | None, bool, Windows]]:
    """(dtype, one work-item per plane or None for the device's own choice, windows built as
    constants, windows) of each stage: every dtype the device takes, built generic (window sizes as
    arguments: each kernel form whatever the window), and float32 also as small windows
    build by default (one window: each further one is one more build of the same form). A
    CPU runs both its kernels, per plane and tiled."""
    dtypes = [bfloat16.as_dtype(name) for name in verify.dtypes_to_verify(device)]
    paths = [None] if policy.current().on_gpu(device) else [True, False]
    found = [(dt, path, False, WINDOWS) for dt in dtypes for path in paths]
    return found + [(dtypes[0], path, True, WINDOWS[:1]) for path in paths]


def run(device: cl.Device, only: str | None = None) -> None:
    """Run every stage on `device` (of dtype `only`, if given); raise AssertionError at the
    first wrong result. The policy in force is restored after."""
    rng = np.random.default_rng(2024)
    for dtype, by_plane, constants, windows in stages(device):
        if only is None or dtype.name == only:
            where = {True: "per plane", False: "tiled", None: "default"}[by_plane]
            print(f"stage: {dtype.name}, {where}, constants={constants}", flush=True)
            with policy.use(per_plane=by_plane, specialize=constants):
                _stage(rng, dtype, windows)


def _channels_last_calls(
    x: np.ndarray, g: Gradient, windows: Windows, tall: np.ndarray
) -> Iterator[Call]:
    """_calls on channels-last copies of `x` (given a fourth channel: max pooling takes
    four per work-item then) and `tall`, over the first window."""
    x = np.concatenate([x, x[:, :1]], axis=1)
    for what, got, want, exact in _calls(
        stored_channels_last(x), g, windows[:1], stored_channels_last(tall)
    ):
        yield f"{what} channels-last", got, want, exact


def _channels_last_3d_calls(x: np.ndarray, g: Gradient) -> Iterator[Call]:
    """_calls_3d on channels-last-3d copies of `x` (given channels up to four: four per
    work-item then) and of the gradients."""
    x = np.concatenate([x, x], axis=1)
    for what, got, want, exact in _calls_3d(
        stored_channels_last(x), lambda shape: stored_channels_last(g(shape))
    ):
        yield f"{what} channels-last-3d", got, want, exact


def _stage(rng: np.random.Generator, dtype: np.dtype, windows: Windows) -> None:
    x = rng.standard_normal(SHAPE).astype(dtype)
    tall = rng.standard_normal(TALL).astype(dtype)
    x3 = rng.standard_normal(SHAPE_3D).astype(dtype)

    def g(shape: tuple[int, ...]) -> np.ndarray:
        return rng.standard_normal(shape).astype(dtype)

    for what, got, want, exact in chain(
        _calls(x, g, windows, tall),
        _channels_last_calls(x, g, windows, tall),
        _calls_3d(x3, g),
        _channels_last_3d_calls(x3, g),
    ):
        err = check.error(cast(np.ndarray, got), want)
        if err != 0 and (exact or err > check.TOLERANCE[dtype.name]):
            raise AssertionError(f"{what} in {dtype.name}: wrong result (error {err:.3g})")


def main(argv: list[str]) -> int:
    index, expected, dtype = int(argv[0]), argv[1], (argv[2] if len(argv) > 2 else None)
    os.environ["CLPOOL_DEVICE"] = str(index)
    device = discovery.cl_devices()[index]
    if not expected.startswith(verify.device_key(device)):
        print(f"device {index} is {verify.device_key(device)!r} here", file=sys.stderr)
        return verify.MISMATCH
    verify.trust(device)
    run(device, dtype)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
