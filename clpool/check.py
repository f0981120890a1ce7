"""`clpool check`: run every op (1-D, 2-D, 3-D, adaptive max, unpooling) on a device
against the float64 reference.

Each op runs on a few small fixed-seed cases (overlapping windows, padding, ceil mode
overhang, dilation with windows that miss the plane, ties, NaN, -inf, unbatched input,
count_include_pad on and off, divisor_override, adaptive down- and upsampling and the
global 1x1 path). Max pooling values and indices must be bit-exact; every other result is
judged by its error relative to max(|reference|, 1), so that values near zero, where a
sum's rounding error is absolute rather than relative, are judged by absolute error.

Tolerances:
- float64: 1e-12, far above the error of a sum of at most a few hundred doubles.
- float32: 1e-5, the contract.
- float16: 1e-3. The kernels load half, compute in float32 and round the result to half
  once; half has an 11-bit significand, so a correctly rounded result is within
  2^-11 = 4.9e-4 of the exact value (relative for |x| >= 1, absolute below). 1e-3 allows
  that rounding plus the float32 arithmetic, and no more than about two units in the last
  place. The reference is fed the very half values the device sees, so input rounding is
  not part of the error.
- bfloat16: 4e-3. The same with bfloat16's 8-bit significand: a correctly rounded result
  is within half a unit in the last place, 2^-8 = 3.9e-3 relative (for |x| >= 1, absolute
  below). The float32 arithmetic adds at most about 1e-5 on these cases' sums, so 4e-3
  allows one correct rounding but not a truncation (up to a whole unit, 2^-7 = 7.8e-3).
  Max pooling is bit-exact; every NaN result is the quiet NaN 0x7FC0, as torch's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias, cast

import numpy as np

from . import adaptive_max, bfloat16, ops, pool1d, pool3d, unpool
from . import reference as ref
from .errors import reporting
from .types import Tensor

# One case: its input arrays and the op's arguments by name (x, args, seed, ...).
Case: TypeAlias = dict[str, Any]
# What a case gives: (got, want, must_be_exact) per result.
Results: TypeAlias = list[tuple[Tensor, np.ndarray, bool]]

TOLERANCE = {"float16": 1e-3, "bfloat16": 4e-3, "float32": 1e-5, "float64": 1e-12}
SEED = 20240


@dataclass
class Row:
    """The outcome of one op on one dtype."""

    op: str
    dtype: str
    cases: int
    error: float  # largest error over the cases (0 for bit-exact results)
    tolerance: float
    exact: bool  # True where the op must be bit-exact (max values and indices)
    mismatch: str  # "" or what failed
    seconds: float

    @property
    def passed(self) -> bool:
        return not self.mismatch


def error(got: np.ndarray, want: np.ndarray) -> float:
    """Largest |got - want| / max(|want|, 1); NaN in the same places counts as equal. A
    shape, or an integer dtype, that differs is an infinite error."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or (want.dtype.kind in "iu" and got.dtype != want.dtype):
        return float("inf")
    got, want = got.astype(np.float64), want.astype(np.float64)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    if same.all():
        return 0.0
    with np.errstate(invalid="ignore"):  # inf - inf where both are inf: counted equal
        diff = np.abs(got - want) / np.maximum(np.abs(want), 1.0)
    diff[same] = 0.0
    return float(np.nan_to_num(diff, nan=np.inf, posinf=np.inf).max())


def _cases(dtype: np.dtype) -> dict[str, list[Case]]:
    """Inputs and arguments of every case, per op family, rounded to `dtype`."""
    rng = np.random.default_rng(SEED)

    def data(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(dtype)

    special = rng.integers(-2, 3, (3, 5, 6)).astype(dtype)  # ties everywhere
    special[0, 1, 2] = np.nan
    special[1, 0, 0] = special[1, 3, 4] = np.nan
    special[2, :2, :2] = -np.inf
    max_cases = [
        dict(x=data(2, 3, 10, 9), args=(3, 2, 1, 1, True)),
        dict(x=data(1, 2, 7, 8), args=((2, 3), (1, 2), (1, 1), (2, 1), False), index_dtype="int32"),
        dict(x=special, args=(2, 1, 0, 1, False)),
        dict(x=data(1, 2, 3, 3), args=(2, 2, 1, 5, True)),  # windows that miss the plane
    ]
    avg_cases = [
        dict(x=data(2, 3, 10, 9), args=(3, 2, 1, True, True, None)),
        dict(x=data(2, 3, 10, 9), args=(3, 2, 1, True, False, None)),
        dict(x=data(1, 2, 7, 8), args=((2, 3), (1, 2), (1, 1), False, True, 5)),
        dict(x=data(3, 5, 6), args=(2, 1, 0, False, True, None)),
    ]
    adaptive_cases = [
        dict(x=data(2, 3, 10, 9), args=((4, 5),)),
        dict(x=data(2, 3, 33, 17), args=(1,)),
        dict(x=data(1, 2, 5, 6), args=((13, 7),)),
        dict(x=data(3, 7, 6), args=((None, 4),)),
    ]
    for group in (max_cases, avg_cases, adaptive_cases):
        for case in group:
            case["seed"] = int(rng.integers(2**31))
    return {"max": max_cases, "avg": avg_cases, "adaptive": adaptive_cases}


def _grad(case: Case, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return np.random.default_rng(case["seed"]).standard_normal(shape).astype(dtype)


def _run(
    label: str,
    dtype: np.dtype,
    cases: list[Case],
    exact: bool,
    one: Callable[[Case], Results],
) -> Row:
    """Run `one` on every case; it returns (got, want, must_be_exact) triples."""
    tol = TOLERANCE[dtype.name]
    worst, mismatch, seconds = 0.0, "", 0.0
    for i, case in enumerate(cases):
        start = time.perf_counter()
        pairs = one(case)
        seconds += time.perf_counter() - start
        for got, want, bit_exact in pairs:
            err = error(cast(np.ndarray, got), want)  # numpy inputs: numpy results
            worst = max(worst, err)
            if bit_exact and err != 0.0 and not mismatch:
                mismatch = f"case {i}: not bit-exact"
            elif err > tol and not mismatch:
                mismatch = f"case {i}: error {err:.3g} > {tol:g}"
    return Row(label, dtype.name, len(cases), worst, tol, exact, mismatch, seconds)


def run(device: object = None, dtype: object = "float32") -> list[Row]:
    """Check every op on `device` (as the ops' device= argument) in `dtype`.

    A dtype or device the ops reject raises their PoolError."""
    if dtype == bfloat16.NAME:
        with reporting("check") as where:  # without ml_dtypes: UnsupportedDtypeError
            where.dtype = dtype
            dtype = bfloat16.dtype()
    dt = np.dtype(dtype)  # type: ignore[call-overload]
    if dt.name not in TOLERANCE:  # let an op refuse it, through the one error handler
        ops.max_pool2d(np.zeros((1, 1, 2, 2), dt), 2, device=device)
        raise RuntimeError(f"max_pool2d accepted the unsupported dtype {dt.name}")
    rows = _pool1d_rows(dt, device) + _window_rows(2, _cases(dt), dt, device)
    rows += _window_rows(3, _cases_3d(dt), dt, device)
    return rows + _adaptive_max_rows(dt, device) + _unpool_rows(dt, device)


def _cases_1d(dtype: np.dtype) -> dict[str, list[Case]]:
    """The cases of the 1-D ops, as _cases's over (L,) rows: each family's arguments as
    the 1-D op takes them."""
    rng = np.random.default_rng(SEED + 4)

    def data(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(dtype)

    special = rng.integers(-2, 3, (3, 5, 12)).astype(dtype)  # ties everywhere
    special[0, 1, 2] = special[1, 0, 0] = special[1, 3, 11] = np.nan
    special[2, :2, :4] = -np.inf
    cases = {
        "max": [
            dict(x=data(2, 3, 20), args=(3, 2, 1, 1, True)),
            dict(x=data(1, 2, 17), args=(4, 3, 2, 2, False), index_dtype="int32"),
            dict(x=special, args=(2, 1, 0, 1, False)),
            dict(x=data(4, 9), args=(3, 2, 1, 1, True)),  # unbatched
        ],
        "avg": [
            dict(x=data(2, 3, 20), args=(3, 2, 1, True, True)),
            dict(x=data(2, 3, 20), args=(3, 2, 1, True, False)),
            dict(x=data(1, 2, 17), args=(4, 3, 2, False, True)),
            dict(x=data(4, 9), args=(2, 1, 0, False, True)),
        ],
        "adaptive": [
            dict(x=data(2, 3, 20), args=(6,)),
            dict(x=data(2, 3, 33), args=(1,)),
            dict(x=data(1, 2, 5), args=(13,)),
            dict(x=data(4, 9), args=(4,)),
        ],
    }  # fmt: skip
    for group in cases.values():
        for case in group:
            case["seed"] = int(rng.integers(2**31))
    return cases


def _rows2d(a: np.ndarray) -> np.ndarray:
    """(N, C, L) or (C, L) as the 2-D reference's (N, C, 1, L) or (C, 1, L)."""
    return a[..., None, :]


def _pool1d_rows(dt: np.dtype, device: object) -> list[Row]:
    """max_pool1d (values, and with its indices), avg_pool1d, adaptive_avg_pool1d and
    their backward ops against the 2-D reference on rows of one (torch's own definition:
    H = 1, the window 1 high)."""
    cases = _cases_1d(dt)
    op: Any = pool1d  # the cases' arguments are Any

    def window(k: int, s: int, p: int, *rest: Any) -> tuple[Any, ...]:
        return ((1, k), (1, s), (0, p), *rest)

    def max_args(c: Case) -> tuple[Any, ...]:
        k, s, p, d, ceil_mode = c["args"]
        return (*window(k, s, p), (1, d), ceil_mode)

    def max_values(c: Case) -> Results:
        kind = c.get("index_dtype", "int64")
        got = op.max_pool1d(c["x"], *c["args"], device=device)
        got_v, got_i = op.max_pool1d(c["x"], *c["args"], True, index_dtype=kind, device=device)
        want_v, want_i = ref.max_pool2d_with_indices(_rows2d(c["x"]), *max_args(c))
        want_v = want_v[..., 0, :].astype(dt)
        return [
            (got, want_v, True),
            (got_v, want_v, True),
            (got_i, want_i[..., 0, :].astype(kind), True),
        ]

    def max_backward(c: Case) -> Results:
        x = _rows2d(c["x"])
        _, idx = ref.max_pool2d_with_indices(x, *max_args(c))
        g = _grad(c, idx.shape, dt)
        got = op.max_pool1d_with_indices_backward(
            g[..., 0, :], c["x"], *c["args"], idx[..., 0, :], device=device
        )
        want = ref.max_pool2d_with_indices_backward(g, x, idx, *max_args(c))
        return [(got, want[..., 0, :], False)]

    def avg_args(c: Case) -> tuple[Any, ...]:
        return (*window(*c["args"][:3]), *c["args"][3:], None)

    def avg(c: Case) -> Results:
        got = op.avg_pool1d(c["x"], *c["args"], device=device)
        return [(got, ref.avg_pool2d(_rows2d(c["x"]), *avg_args(c))[..., 0, :], False)]

    def avg_backward(c: Case) -> Results:
        x = _rows2d(c["x"])
        g = _grad(c, ref.avg_pool2d(x, *avg_args(c)).shape, dt)
        got = op.avg_pool1d_backward(g[..., 0, :], c["x"], *c["args"], device=device)
        return [(got, ref.avg_pool2d_backward(g, x, *avg_args(c))[..., 0, :], False)]

    def adaptive(c: Case) -> Results:
        got = op.adaptive_avg_pool1d(c["x"], *c["args"], device=device)
        want = ref.adaptive_avg_pool2d(_rows2d(c["x"]), (1, *c["args"]))
        return [(got, want[..., 0, :], False)]

    def adaptive_backward(c: Case) -> Results:
        x = _rows2d(c["x"])
        g = _grad(c, ref.adaptive_avg_pool2d(x, (1, *c["args"])).shape, dt)
        got = op.adaptive_avg_pool1d_backward(g[..., 0, :], c["x"], device=device)
        return [(got, ref.adaptive_avg_pool2d_backward(g, x)[..., 0, :], False)]

    return [
        _run(label, dt, cases[family], exact, one)
        for label, family, exact, one in (
            ("max_pool1d", "max", True, max_values),
            ("max_pool1d_with_indices_backward", "max", False, max_backward),
            ("avg_pool1d", "avg", False, avg),
            ("avg_pool1d_backward", "avg", False, avg_backward),
            ("adaptive_avg_pool1d", "adaptive", False, adaptive),
            ("adaptive_avg_pool1d_backward", "adaptive", False, adaptive_backward),
        )
    ]


def _unpool_cases(dtype: np.dtype) -> dict[int, list[Case]]:
    """Per rank: distinct indices with output_size given, the same unbatched with int32
    indices, and indices that name few outputs, so many collide (the later input wins)."""
    rng = np.random.default_rng(SEED + 1)
    found: dict[int, list[Case]] = {}
    for n, side in ((1, 10), (2, 4), (3, 3)):
        shape = (2, 3) + (side,) * n
        x = rng.standard_normal(shape).astype(dtype)
        sizes = (2 * side + 1,) * n  # default 2 * side with k2: within (default - 2, + 2)
        plane = (2 * side + 1) ** n
        distinct = np.stack([rng.permutation(plane)[: side**n] for _ in range(6)])
        distinct = distinct.reshape(shape)
        found[n] = [
            dict(x=x, i=distinct, args=(2, None, 0, sizes)),
            dict(x=x[0], i=distinct[0].astype(np.int32), args=(2, None, 0, sizes)),
            dict(x=x, i=rng.integers(0, 3**n, shape), args=(3, 2, 1, None)),
        ]
    return found


def _unpool_rows(dt: np.dtype, device: object) -> list[Row]:
    """max_unpool1d/2d/3d and their backward ops against the reference (bit-exact: both
    copy elements)."""
    rows = []
    for n, cases in _unpool_cases(dt).items():
        forward = getattr(unpool, f"max_unpool{n}d")
        backward = getattr(unpool, f"max_unpool{n}d_backward")

        def one(c: Case, forward: Any = forward, n: int = n) -> Results:
            got = forward(c["x"], c["i"], *c["args"], device=device)
            return [(got, ref.max_unpool(c["x"], c["i"], n, *c["args"]).astype(dt), True)]

        def grad(c: Case, backward: Any = backward, n: int = n) -> Results:
            g = _grad({"seed": n}, ref.max_unpool(c["x"], c["i"], n, *c["args"]).shape, dt)
            got = backward(g, c["x"], c["i"], *c["args"], device=device)
            return [(got, ref.max_unpool_backward(g, c["x"], c["i"], n).astype(dt), True)]

        rows.append(_run(forward.__name__, dt, cases, True, one))
        rows.append(_run(backward.__name__, dt, cases, True, grad))
    return rows


def _adaptive_max_cases(dtype: np.dtype) -> dict[int, list[Case]]:
    """Per rank, inputs (with ties, NaN and -inf) and output sizes of adaptive max pooling:
    down- and upsampling, cells that do not divide the input, None entries, int32."""
    rng = np.random.default_rng(SEED + 1)

    def data(*shape: int) -> np.ndarray:
        x = rng.integers(-2, 3, shape).astype(np.float64)
        x[rng.random(shape) < 0.05] = np.nan
        x[rng.random(shape) < 0.05] = -np.inf
        return x.astype(dtype)

    cases = {
        1: [dict(x=data(2, 3, 11), size=4), dict(x=data(3, 5), size=9, index_dtype="int32"),
            dict(x=data(1, 2, 6), size=6)],
        2: [dict(x=data(2, 3, 10, 9), size=(4, 5)), dict(x=data(3, 5, 6), size=(None, 11)),
            dict(x=data(2, 2, 4, 4), size=1, index_dtype="int32")],
        3: [dict(x=data(2, 2, 5, 6, 7), size=(2, 4, 3)),
            dict(x=data(2, 3, 2, 4), size=(3, None, 5), index_dtype="int32"),
            dict(x=data(1, 1, 3, 3, 3), size=5)],
    }  # fmt: skip
    for group in cases.values():
        for case in group:
            case["seed"] = int(rng.integers(2**31))
    return cases


def _adaptive_max_rows(dt: np.dtype, device: object) -> list[Row]:
    """adaptive_max_pool1d/2d/3d (values and indices bit-exact) and their backward ops."""
    rows = []
    for rank, group in _adaptive_max_cases(dt).items():
        forward = getattr(adaptive_max, f"adaptive_max_pool{rank}d")
        backward = getattr(adaptive_max, f"adaptive_max_pool{rank}d_backward")

        def values(c: Case, forward: Any = forward, rank: int = rank) -> Results:
            kind = c.get("index_dtype", "int64")
            got, got_i = forward(c["x"], c["size"], True, index_dtype=kind, device=device)
            want, want_i = ref.adaptive_max_pool_nd(c["x"], c["size"], rank)
            return [(got, want.astype(dt), True), (got_i, want_i.astype(kind), True)]

        def grads(c: Case, backward: Any = backward, rank: int = rank) -> Results:
            _, idx = ref.adaptive_max_pool_nd(c["x"], c["size"], rank)
            g = _grad(c, idx.shape, dt)
            got = backward(g, c["x"], idx, device=device)
            return [(got, ref.adaptive_max_pool_backward(g, c["x"], idx, rank), False)]

        rows.append(_run(f"adaptive_max_pool{rank}d", dt, group, True, values))
        rows.append(_run(f"adaptive_max_pool{rank}d_backward", dt, group, False, grads))
    return rows


def _cases_3d(dtype: np.dtype) -> dict[str, list[Case]]:
    """The cases of the 3-D ops, as _cases's over (D, H, W) volumes."""
    rng = np.random.default_rng(SEED + 3)

    def data(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(dtype)

    special = rng.integers(-2, 3, (2, 4, 5, 6)).astype(dtype)  # ties everywhere
    special[0, 1, 2, 3] = special[1, 0, 0, 0] = special[1, 3, 4, 5] = np.nan
    special[0, 2:, :2, :2] = -np.inf
    cases = {
        "max": [
            dict(x=data(2, 2, 6, 7, 5), args=(3, 2, 1, 1, True)),
            dict(x=data(1, 2, 4, 5, 6), args=((2, 3, 2), (1, 2, 1), (1, 1, 0), (2, 1, 1), False),
                 index_dtype="int32"),
            dict(x=special, args=(2, 1, 0, 1, False)),
            dict(x=data(1, 1, 2, 3, 3), args=(2, 1, 1, 3, False)),  # windows that miss
        ],
        "avg": [
            dict(x=data(2, 2, 6, 7, 5), args=(3, 2, 1, True, True, None)),
            dict(x=data(2, 2, 6, 7, 5), args=(3, 2, 1, True, False, None)),
            dict(x=data(1, 2, 4, 5, 6), args=((2, 3, 2), (1, 2, 1), (1, 1, 0), False, True, 5)),
            dict(x=data(2, 4, 5, 6), args=(2, 1, 0, False, True, None)),
        ],
        "adaptive": [
            dict(x=data(2, 2, 6, 7, 5), args=((3, 4, 2),)),
            dict(x=data(1, 2, 5, 9, 7), args=(1,)),
            dict(x=data(1, 1, 3, 4, 5), args=((5, 7, 6),)),
            dict(x=data(2, 4, 5, 6), args=((None, 3, 4),)),
        ],
    }  # fmt: skip
    for group in cases.values():
        for case in group:
            case["seed"] = int(rng.integers(2**31))
    return cases


def _window_rows(
    rank: int, cases: dict[str, list[Case]], dt: np.dtype, device: object
) -> list[Row]:
    """The rows of the `rank`-D max, average and adaptive average ops (and their backward
    ops) on `cases`, by family."""
    n = f"{rank}d"
    module = {2: ops, 3: pool3d}[rank]

    def op(name: str) -> Any:
        return getattr(module, name)

    def want(name: str) -> Any:
        return getattr(ref, name)

    def max_values(c: Case) -> Results:
        got = cast(Tensor, op(f"max_pool{n}")(c["x"], *c["args"], device=device))  # no indices
        return [(got, want(f"max_pool{n}")(c["x"], *c["args"]).astype(dt), True)]

    def max_indices(c: Case) -> Results:
        kind = c.get("index_dtype", "int64")
        got, got_i = op(f"max_pool{n}_with_indices")(
            c["x"], *c["args"], index_dtype=kind, device=device
        )
        want_v, want_i = want(f"max_pool{n}_with_indices")(c["x"], *c["args"])
        return [(got, want_v.astype(dt), True), (got_i, want_i.astype(kind), True)]

    def max_backward(c: Case) -> Results:
        _, idx = want(f"max_pool{n}_with_indices")(c["x"], *c["args"])
        g = _grad(c, idx.shape, dt)
        k, s, p, d, ceil_mode = c["args"]
        got = op(f"max_pool{n}_with_indices_backward")(
            g, c["x"], k, s, p, d, ceil_mode, idx, device=device
        )
        return [
            (got, want(f"max_pool{n}_with_indices_backward")(g, c["x"], idx, *c["args"]), False)
        ]

    def avg(c: Case) -> Results:
        got = op(f"avg_pool{n}")(c["x"], *c["args"], device=device)
        return [(got, want(f"avg_pool{n}")(c["x"], *c["args"]), False)]

    def avg_backward(c: Case) -> Results:
        g = _grad(c, want(f"avg_pool{n}")(c["x"], *c["args"]).shape, dt)
        got = op(f"avg_pool{n}_backward")(g, c["x"], *c["args"], device=device)
        return [(got, want(f"avg_pool{n}_backward")(g, c["x"], *c["args"]), False)]

    def adaptive(c: Case) -> Results:
        got = op(f"adaptive_avg_pool{n}")(c["x"], *c["args"], device=device)
        return [(got, want(f"adaptive_avg_pool{n}")(c["x"], *c["args"]), False)]

    def adaptive_backward(c: Case) -> Results:
        g = _grad(c, want(f"adaptive_avg_pool{n}")(c["x"], *c["args"]).shape, dt)
        got = op(f"adaptive_avg_pool{n}_backward")(g, c["x"], device=device)
        return [(got, want(f"adaptive_avg_pool{n}_backward")(g, c["x"]), False)]

    return [
        _run(label, dt, cases[family], exact, one)
        for label, family, exact, one in (
            (f"max_pool{n}", "max", True, max_values),
            (f"max_pool{n}_with_indices", "max", True, max_indices),
            (f"max_pool{n}_with_indices_backward", "max", False, max_backward),
            (f"avg_pool{n}", "avg", False, avg),
            (f"avg_pool{n}_backward", "avg", False, avg_backward),
            (f"adaptive_avg_pool{n}", "adaptive", False, adaptive),
            (f"adaptive_avg_pool{n}_backward", "adaptive", False, adaptive_backward),
        )
    ]


def table_rows(rows: list[Row]) -> list[list[str]]:
    """The rows of the check table: op, dtype, cases, max error, tolerance, result, time."""
    out = []
    for r in rows:
        tol = "exact" if r.exact else f"{r.tolerance:g}"
        result = "pass" if r.passed else f"FAIL ({r.mismatch})"
        out.append(
            [
                r.op,
                r.dtype,
                str(r.cases),
                f"{r.error:.3g}",
                tol,
                result,
                f"{r.seconds * 1e3:.1f} ms",
            ]
        )
    return out


HEADERS = ["op", "dtype", "cases", "max error", "tolerance", "result", "time"]
