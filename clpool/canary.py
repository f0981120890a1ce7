"""The canary that clpool.verify runs in a child process: every kernel entry point that
clpool launches on the device, in each dtype the device takes, built generic and with
small windows as constants, on inputs wide enough for the CPU kernels' 16-lane rows, each
result checked against the float64 reference; the _strided kernels on channels-last
copies. Exits 0 when all pass; a driver that
crashes kills only this process. Announces each stage on stdout ("stage: ...") so that
the parent can say where it died.

    python -m clpool.canary DEVICE_INDEX DEVICE_KEY [DTYPE]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from itertools import chain

import numpy as np

from . import capabilities, check, discovery, ops, policy, verify
from . import reference as ref

# max_pool2d, avg_pool2d: (kernel_size, stride, padding); a stride of 1, 2 and 3 takes
# each way the CPU kernels gather 16 windows of a row.
WINDOWS = ((3, 2, 1), (2, 1, 0), (3, 3, 1))
SHAPE = (2, 3, 9, 70)  # rows of 70: the 16-lane CPU paths run for every window above
TALL = (1, 2, 40, 8)  # to (2, 2): bands of 20 rows, the GPU's band kernel


def _calls(
    x: np.ndarray, g: Callable[[tuple[int, ...]], np.ndarray], windows: tuple, tall: np.ndarray
):
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
    for size in (1, (3, 7), (4, 5)):  # global, equal cells, unequal cells
        yield (
            f"adaptive_avg_pool2d {size}",
            ops.adaptive_avg_pool2d(x, size),
            ref.adaptive_avg_pool2d(x, size),
            False,
        )
        grad = g(ref.adaptive_avg_pool2d(x, size).shape)
        yield (
            f"adaptive_avg_pool2d_backward {size}",
            ops.adaptive_avg_pool2d_backward(grad, x),
            ref.adaptive_avg_pool2d_backward(grad, x),
            False,
        )


def stages(device) -> list[tuple[np.dtype, bool | None, bool, tuple]]:
    """(dtype, one work-item per plane or None for the device's own choice, windows built as
    constants, windows) of each stage: every dtype the device takes, built generic (window sizes as
    arguments: each kernel form whatever the window), and float32 also as small windows
    build by default (one window: each further one is one more build of the same form). A
    CPU runs both its kernels, per plane and tiled."""
    dtypes = [np.dtype(name) for name in capabilities.dtypes(device)]
    paths = [None] if policy.current().on_gpu(device) else [True, False]
    found = [(dt, path, False, WINDOWS) for dt in dtypes for path in paths]
    return found + [(dtypes[0], path, True, WINDOWS[:1]) for path in paths]


def run(device, only: str | None = None) -> None:
    """Run every stage on `device` (of dtype `only`, if given); raise AssertionError at the
    first wrong result. The policy in force is restored after."""
    rng = np.random.default_rng(2024)
    for dtype, by_plane, constants, windows in stages(device):
        if only is None or dtype.name == only:
            where = {True: "per plane", False: "tiled", None: "default"}[by_plane]
            print(f"stage: {dtype.name}, {where}, constants={constants}", flush=True)
            with policy.use(per_plane=by_plane, specialize=constants):
                _stage(rng, dtype, windows)


def _nhwc(a: np.ndarray) -> np.ndarray:
    """`a` laid out channels-last (NHWC memory): the ops run their _strided kernels."""
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def _channels_last_calls(x: np.ndarray, g, windows: tuple, tall: np.ndarray):
    """_calls on channels-last copies of `x` (given a fourth channel: max pooling takes
    four per work-item then) and `tall`, over the first window."""
    x = np.concatenate([x, x[:, :1]], axis=1)
    for what, got, want, exact in _calls(_nhwc(x), g, windows[:1], _nhwc(tall)):
        yield f"{what} channels-last", got, want, exact


def _stage(rng: np.random.Generator, dtype: np.dtype, windows: tuple) -> None:
    x = rng.standard_normal(SHAPE).astype(dtype)
    tall = rng.standard_normal(TALL).astype(dtype)

    def g(shape: tuple[int, ...]) -> np.ndarray:
        return rng.standard_normal(shape).astype(dtype)

    for what, got, want, exact in chain(
        _calls(x, g, windows, tall), _channels_last_calls(x, g, windows, tall)
    ):
        err = check.error(got, want)
        if err != 0 and (exact or err > check.TOLERANCE[dtype.name]):
            raise AssertionError(f"{what} in {dtype.name}: wrong result (error {err:.3g})")


def main(argv: list[str]) -> int:
    index, expected, dtype = int(argv[0]), argv[1], (argv[2:] or [None])[0]
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
