"""Limits of the kernels (issue 18): adaptive pooling over axes of nearly 2^31 elements, and
windows far larger than their input. Each case runs in a child process with a timeout, so
that a hang or a crash fails its test instead of taking pytest down.

A tensor with an axis of 2^31 - 1 elements takes 4 GiB in float16, more than many devices
allocate at once (PoCL on a small machine: 2 GiB) or than CI's RAM holds, so the
index arithmetic is also checked without such a tensor: a wrapper kernel calls the real
kernel with its pointers shifted back by ~2^31 elements and a global work offset, so that
only the last cells of the axis are computed, from and into small buffers. The whole tensor
runs through the public ops only where the device and the machine can hold it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

AXIS = 2**31 - 1  # the largest axis the kernels' int sizes take


def _child(code: str, timeout: float, arg: object, **env: str) -> dict:
    """Run `code` in a fresh interpreter on the suite's device, with `arg` as JSON in
    sys.argv[1]; the JSON object it prints last. A child that overruns `timeout`, crashes
    or fails an assertion fails the test."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code), json.dumps(arg)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **env},
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the child process did not finish within {timeout} s (a hang?)")
    assert done.returncode == 0, (
        f"the child process exited with {done.returncode}\n--- stdout\n{done.stdout[-4000:]}"
        f"\n--- stderr\n{done.stderr[-4000:]}"
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- near 2^31: shifted kernels

# Each wrapper calls a kernel with `x - xs` for its input and `out - os` for its output, so
# that element i of the axis lives at x[i - xs].
_WRAPPERS = {
    "adaptive_pool.cl": """
        __kernel void shifted_adaptive_forward(__global const elem_t *x, __global elem_t *out,
                                               int H, int W, int OH, int OW, long xs, long os)
        {
            adaptive_avg_pool2d_forward(x - xs, out - os, H, W, OH, OW);
        }
        __kernel void shifted_adaptive_backward(__global const elem_t *g, __global elem_t *gx,
                                                int H, int W, int OH, int OW, long gs, long xs)
        {
            adaptive_avg_pool2d_backward(g - gs, gx - xs, H, W, OH, OW);
        }
    """,
    "avg_pool.cl": """
        __kernel void shifted_avg_backward(__global const elem_t *g, __global elem_t *gx,
                                           AVG_POOL_SIZES, long gs, long xs)
        {
            avg_pool2d_backward(g - gs, gx - xs, H, W, OH, OW, kh, kw, sh, sw, ph, pw,
                                count_include_pad, divisor_override);
        }
    """,
}

_SHIFTED = """
    import json, sys, warnings
    import numpy as np
    import pyopencl as cl
    from clpool import discovery, programs

    WRAPPERS, AXIS = json.loads(sys.argv[1])
    warnings.simplefilter("ignore")
    device = discovery.select()
    ctx = cl.Context([device])
    queue = cl.CommandQueue(ctx)
    folder = str(programs.kernel_dir())
    built = {}

    def kernel(source, name, options):
        key = (source, options)
        if key not in built:
            text = f'#include "{source}"\\n{WRAPPERS[source]}'
            built[key] = cl.Program(ctx, text).build(options=[*options, "-I", folder])
        return getattr(built[key], name)

    def opts(dtype, rows=1, cols=1, *extra):
        return (f"-DCLPOOL_DTYPE={dtype}", "-DCLPOOL_INDEX=64", f"-DCLPOOL_ROWS={rows}",
                f"-DCLPOOL_COLS={cols}", *extra)

    def to_device(a):
        return cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                         hostbuf=np.ascontiguousarray(a))

    def run(k, buffers, ints, longs, items, offsets, out_buf, out_len, np_dtype):
        k.set_args(*buffers, *map(np.int32, ints), *map(np.int64, longs))
        cl.enqueue_nd_range_kernel(queue, k, items, None, global_work_offset=offsets).wait()
        out = np.empty(out_len, np_dtype)
        cl.enqueue_copy(queue, out, out_buf).wait()
        return out.astype(np.float64)

    def cell(i, size, n):
        return (i * size) // n, -(-(i + 1) * size // n)

    def tail_items(size, per_item, keep, group=64):
        # work-items from the one holding position size - keep to the end of the range the
        # host launches (rounded up to whole groups): (first item, items, first position)
        first = (size - keep) // per_item
        end = -(-(-(-size // per_item)) // group) * group
        return first, end - first, first * per_item

    rng = np.random.default_rng(18)
    checked = []
    NP = {16: np.float16, 32: np.float32}
    LARGE = "-DCLPOOL_LARGE_CELLS"  # the host's choice for such axes (Planner.cell_bounds)

    # adaptive forward: the last cells of an axis of AXIS elements, along W and along H
    for dtype in (16, 32):
        for along, n_out, rows in (("W", AXIS // 41, 1), ("W", AXIS // 100, 1),
                                   ("H", AXIS // 41, 1), ("H", AXIS // 41, 3),
                                   ("H", AXIS, 3)):
            if along == "W":
                out_first = n_out - 7
                dims, items, offs = (1, AXIS, 1, n_out), (7, 1, 1), (out_first, 0, 0)
            else:
                g0, n_items, out_first = tail_items(n_out, rows, 7)
                dims, items, offs = (AXIS, 1, n_out, 1), (1, n_items, 1), (0, g0, 0)
            lo = cell(out_first, AXIS, n_out)[0]
            x = rng.integers(-8, 9, AXIS - lo).astype(NP[dtype])
            k = kernel("adaptive_pool.cl", "shifted_adaptive_forward", opts(dtype, rows, 1, LARGE))
            xb = to_device(x)
            ob = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 8 * (n_out - out_first))
            got = run(k, (xb, ob), dims, (lo, out_first), items, offs, ob,
                      n_out - out_first, NP[dtype])
            want = [x[c0 - lo:c1 - lo].astype(np.float64).mean()
                    for c0, c1 in (cell(o, AXIS, n_out) for o in range(out_first, n_out))]
            tol = 2e-3 if dtype == 16 else 1e-6
            assert np.allclose(got, want, rtol=tol, atol=tol), (along, n_out, rows, dtype,
                                                                  got, want)
            checked.append(f"forward {along} {n_out} rows={rows} dtype={dtype}")

    # adaptive backward (cells of unequal sizes): the last elements of the axis
    for along, n_out, rows in (("W", AXIS // 41, 1), ("H", AXIS // 41, 3), ("H", AXIS, 3)):
        keep = 300
        if along == "W":
            g0, n_items, first_i = AXIS - keep, keep, AXIS - keep
            items, offs = (n_items, 1, 1), (g0, 0, 0)
            dims = (1, AXIS, 1, n_out)
        else:
            g0, n_items, first_i = tail_items(AXIS, rows, keep)
            items, offs = (1, n_items, 1), (0, g0, 0)
            dims = (AXIS, 1, n_out, 1)
        o0 = cell(first_i, n_out, AXIS)[0]  # the first cell holding element first_i
        g = rng.standard_normal(n_out - o0).astype(np.float32)
        k = kernel("adaptive_pool.cl", "shifted_adaptive_backward", opts(32, rows, 1, LARGE))
        gb, xb = to_device(g), cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4 * (AXIS - first_i))
        got = run(k, (gb, xb), dims, (o0, first_i), items, offs, xb, AXIS - first_i, np.float32)
        want = np.zeros(AXIS - first_i)
        for o in range(o0, n_out):
            c0, c1 = cell(o, AXIS, n_out)
            want[max(c0, first_i) - first_i:c1 - first_i] += g[o - o0] / (c1 - c0)
        assert np.allclose(got, want, rtol=1e-5, atol=1e-12), (along, n_out, rows)
        checked.append(f"backward {along} {n_out} rows={rows}")

    # equal cells (global pooling) backward through avg_pool2d_backward: one window of
    # AXIS elements, its sizes as arguments or as constants, in tiles of several rows or
    # columns
    for along in ("W", "H"):
        for rows, cols, constants in ((1, 1, False), (8, 1, False), (1, 3, False),
                                      (3, 1, False), (8, 1, True), (1, 2, True)):
            kh, kw = (1, AXIS) if along == "W" else (AXIS, 1)
            extra = ()
            if constants:
                extra = (f"-DCLPOOL_KH={kh}", f"-DCLPOOL_KW={kw}", f"-DCLPOOL_SH={kh}",
                         f"-DCLPOOL_SW={kw}", "-DCLPOOL_DH=1", "-DCLPOOL_DW=1")
            keep = 64
            if along == "W":
                g0, n_items, first_i = tail_items(AXIS, cols, keep)
                items, offs = (n_items, 1, 1), (g0, 0, 0)
            else:
                g0, n_items, first_i = tail_items(AXIS, rows, keep)
                items, offs = (1, n_items, 1), (0, g0, 0)
            k = kernel("avg_pool.cl", "shifted_avg_backward", opts(32, rows, cols, *extra))
            gb = to_device(np.array([3.0], np.float32))
            xb = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4 * (AXIS - first_i))
            dims = (kh, kw, 1, 1, kh, kw, kh, kw, 0, 0, 1, AXIS)
            got = run(k, (gb, xb), dims, (0, first_i), items, offs, xb, AXIS - first_i,
                      np.float32)
            assert np.allclose(got, 3.0 / AXIS, rtol=1e-6), (along, rows, cols, constants,
                                                             got[:4], got[-4:])
            checked.append(f"avg backward {along} rows={rows} cols={cols} {constants}")
    print(json.dumps({"checked": checked}))
"""


def test_adaptive_index_arithmetic_near_2_31():
    """The adaptive kernels (forward, backward, and the average pooling backward that
    global pooling runs) on axes of 2^31 - 1 elements: cells next to the end of the axis,
    where b + 16, a + 64 and w + 4 in window_sum overflowed int (dropped elements, or a
    hang), work-items of 3 rows or columns whose first one lies past 2^31 (a crash), and a
    window of the whole axis, whose count of windows reaching an element overflowed int."""
    wrappers = {name: textwrap.dedent(text) for name, text in _WRAPPERS.items()}
    result = _child(_SHIFTED, 600, [wrappers, AXIS])
    assert len(result["checked"]) == 10 + 3 + 12


# ---------------------------------------------------------------- near 2^31: whole tensors

_WHOLE = """
    import json, sys
    import numpy as np
    import clpool

    AXIS = json.loads(sys.argv[1])
    x = np.zeros((1, 1, 1, AXIS), np.float16)
    x[..., -64:] = 1000
    wanted = []
    for i in range(3):
        c0, c1 = (i * AXIS) // 3, -(-(i + 1) * AXIS // 3)
        wanted.append(1000.0 * max(0, c1 - max(c0, AXIS - 64)) / (c1 - c0))
    got_w = clpool.adaptive_avg_pool2d(x, (1, 3)).astype(np.float64).ravel()
    got_h = clpool.adaptive_avg_pool2d(x.reshape(1, 1, AXIS, 1), (3, 1))
    got_h = got_h.astype(np.float64).ravel()
    for got in (got_w, got_h):
        assert np.allclose(got, wanted, rtol=2e-3, atol=0), (got, wanted)
    print(json.dumps({"w": got_w.tolist(), "h": got_h.tolist(), "want": wanted}))
"""


def _available_ram() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def test_adaptive_whole_axis_near_2_31(device):
    """Issue 18 as reported: a (1, 1, 1, 2^31 - 1) float16 tensor, zero but for its last 64
    elements, pooled to 3 cells along W (the last cell lost 43 of them) and along H (a
    hang). Needs a 4 GiB buffer on the device and some 16 GiB of RAM."""
    need = 2 * AXIS
    if device.max_mem_alloc_size < need or device.global_mem_size < 2 * need:
        pytest.skip(
            f"the device allocates at most {device.max_mem_alloc_size / 2**30:.1f} GiB at "
            f"once; this needs 4 GiB (the shifted-kernel test covers the arithmetic)"
        )
    if _available_ram() < 4 * need:
        pytest.skip("less than 16 GiB of RAM available (the shifted-kernel test covers it)")
    fp16 = "cl_khr_fp16" in device.extensions
    _child(_WHOLE, 600, AXIS, **({} if fp16 else {"CLPOOL_FP16": "storage"}))


# ---------------------------------------------------------------- windows larger than the input

_HUGE_WINDOWS = """
    import json, sys, time
    import numpy as np
    import clpool
    from clpool import policy
    from clpool import reference as ref

    LIMIT = json.loads(sys.argv[1])  # seconds a call may take once its program is built
    rng = np.random.default_rng(18)
    slowest = {}

    def timed(label, f):
        f()  # builds the program (and plans the call)
        t = time.perf_counter()
        out = f()
        slowest[label] = max(slowest.get(label, 0.0), time.perf_counter() - t)
        return out

    def close(got, want, scale, what):
        # within 1e-6 of the sum of the magnitudes the result adds up (float32 sums)
        got = np.asarray(got, np.float64)
        assert got.shape == want.shape, (what, got.shape, want.shape)
        with np.errstate(invalid="ignore"):  # -inf - -inf
            ok = (got == want) | (np.abs(got - want) <= 1e-6 * scale)
        assert ok.all(), (what, got, want)

    def pair(v):
        return tuple(v) if isinstance(v, tuple) else (v, v)

    def inside(start, k, d, size):
        # the positions of a window's taps inside the axis, without walking all k taps
        first = max(0, -(start // d)) if start < 0 else 0
        last = min(k - 1, (size - 1 - start) // d) if start < size else -1
        return range(start + first * d, start + last * d + 1, d) if first <= last else []

    def ref_max(x, k, s, p, d, ceil):
        # clpool.reference.max_pool2d_with_indices (ATen's CPU loop), over the taps inside
        # the plane only: the reference walks every tap of the window
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = map(pair, (k, s, p, d))
        xp = x.astype(np.float64).reshape((-1,) + x.shape[-2:])
        planes, h, w = xp.shape
        oh = ref.pooled_size(h, kh, sh, ph, dh, ceil)
        ow = ref.pooled_size(w, kw, sw, pw, dw, ceil)
        out, idx = np.empty((planes, oh, ow)), np.empty((planes, oh, ow), np.int64)
        for i in range(oh):
            rows = inside(i * sh - ph, kh, dh, h)
            for j in range(ow):
                cols = inside(j * sw - pw, kw, dw, w)
                best = np.full(planes, -np.inf)
                where = np.full(planes, rows[0] * w + cols[0] if rows and cols else -1)
                for r in rows:
                    for c in cols:
                        v = xp[:, r, c]
                        take = (v > best) | np.isnan(v)
                        best = np.where(take, v, best)
                        where = np.where(take, r * w + c, where)
                out[:, i, j], idx[:, i, j] = best, where
        shape = x.shape[:-2] + (oh, ow)
        return out.reshape(shape), idx.reshape(shape)

    # (input shape, kernel_size, stride, padding, dilation, ceil_mode)
    MAX_CASES = [
        ((1, 1, 1, 1), 2**29, 1, 2**28, 1, False),  # the issue's
        ((2, 3, 2, 3), (2**29, 5), (1, 2), (2**28, 2), 1, False),
        ((1, 2, 3, 2), 3, 1, 2**28, 2**28, False),  # 3 taps 2^28 apart: constants
        ((1, 1, 5, 4), (9, 2**27), (2, 2**20), (2**22, 2**26), (2**20, 1), True),
    ]
    AVG_CASES = [
        ((1, 1, 1, 1), 2**29, 1, 2**28, False, None),  # the issue's
        ((2, 3, 2, 3), (2**29, 5), (1, 2), (2**28, 2), False, None),
        ((1, 1, 5, 4), 2**29, 2**22, 2**28, True, None),
        ((1, 2, 3, 3), (2**20, 2**29), (2**19, 1), (2**19, 2**28), False, 7),
    ]
    for dtype in (np.float32, np.float64):
        for per_plane in (False, True):
            with policy.use(per_plane=per_plane):
                for shape, k, s, p, d, ceil in MAX_CASES:
                    x = rng.standard_normal(shape).astype(dtype)
                    x.flat[::5] = -np.inf
                    args = (k, s, p, d, ceil)
                    kw = dict(kernel_size=k, stride=s, padding=p, dilation=d, ceil_mode=ceil)
                    out, idx = timed("max_pool2d_with_indices",
                                     lambda: clpool.max_pool2d_with_indices(x, *args))
                    want, want_i = ref_max(x, *args)
                    close(out, want, 0, ("max", shape, args))
                    assert (idx == want_i).all(), (shape, args, idx, want_i)
                    g = rng.standard_normal(out.shape).astype(dtype)
                    gx = timed("max_pool2d_with_indices_backward",
                               lambda: clpool.max_pool2d_with_indices_backward(
                                   g, x, indices=idx, **kw))
                    close(gx, ref.max_pool2d_with_indices_backward(g, x, indices=want_i, **kw),
                          ref.max_pool2d_with_indices_backward(abs(g), x, indices=want_i, **kw),
                          ("max backward", shape, args))
                for shape, k, s, p, ceil, div in AVG_CASES:
                    x = rng.standard_normal(shape).astype(dtype)
                    for include_pad in (True, False):
                        args = (k, s, p, ceil, include_pad, div)
                        out = timed("avg_pool2d", lambda: clpool.avg_pool2d(x, *args))
                        close(out, ref.avg_pool2d(x, *args), abs(ref.avg_pool2d(abs(x), *args)),
                              ("avg", shape, args))
                        g = rng.standard_normal(out.shape).astype(dtype)
                        gx = timed("avg_pool2d_backward",
                                   lambda: clpool.avg_pool2d_backward(g, x, *args))
                        close(gx, ref.avg_pool2d_backward(g, x, *args),
                              abs(ref.avg_pool2d_backward(abs(g), x, *args)),
                              ("avg backward", shape, args))
    slow = {k: v for k, v in slowest.items() if v > LIMIT}
    assert not slow, f"calls slower than {LIMIT} s: {slow}"
    print(json.dumps(slowest))
"""


def test_windows_far_larger_than_the_input():
    """Windows of up to 2^29 taps (or 3 taps 2^28 apart) over inputs of a few elements: the
    forward loops over the taps inside the input only, and the backward over the windows
    reaching an element only (7.5 s for max_pool2d_with_indices of a 1x1 input, 37 s for
    its backward, 30 s for avg_pool2d, where PyTorch is instant). Against the float64
    reference, with the kernels of one work-item per plane and per output tile."""
    slowest = _child(_HUGE_WINDOWS, 400, 1.0)
    assert set(slowest) == {
        "max_pool2d_with_indices",
        "max_pool2d_with_indices_backward",
        "avg_pool2d",
        "avg_pool2d_backward",
    }
