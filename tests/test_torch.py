"""clpool.torch against torch itself: forward, loss.backward(), gradcheck, signatures,
modules, memory format and dtypes, on the suite's device."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from pool_cases import adaptive_cases, assert_close, data, same_bits, window_cases  # noqa: E402

import clpool  # noqa: E402
import clpool.torch as ct  # noqa: E402
from clpool import capabilities, discovery  # noqa: E402

NAMES = ["max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"]


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()


def _need_fp64(device) -> None:
    if not discovery.has_fp64(device):
        pytest.skip("the device has no float64")


def _ran_backward(launched, prefix: str = "") -> bool:
    """True when a clpool backward kernel (one named `prefix`...) was launched."""
    return any(name.startswith(prefix) and "backward" in name for name, _ in launched)


# ---------------------------------------------------------------- signatures


EXPECTED = {
    "max_pool2d": [
        ("input", inspect.Parameter.empty), ("kernel_size", inspect.Parameter.empty),
        ("stride", None), ("padding", 0), ("dilation", 1), ("ceil_mode", False),
        ("return_indices", False),
    ],
    "avg_pool2d": [
        ("input", inspect.Parameter.empty), ("kernel_size", inspect.Parameter.empty),
        ("stride", None), ("padding", 0), ("ceil_mode", False), ("count_include_pad", True),
        ("divisor_override", None),
    ],
    "adaptive_avg_pool2d": [
        ("input", inspect.Parameter.empty), ("output_size", inspect.Parameter.empty),
    ],
}  # fmt: skip


def _params(sig: inspect.Signature) -> list[tuple[str, object]]:
    """(name, default) of the positional-or-keyword parameters; fails on any other kind."""
    out = []
    for p in sig.parameters.values():
        if p.kind == inspect.Parameter.KEYWORD_ONLY:
            continue
        assert p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD, p
        out.append((p.name, p.default))
    return out


def _torch_params(name: str) -> list[tuple[str, object]]:
    """torch's own parameters of F.<name>: from inspect where torch exposes them (the
    boolean_dispatch of max_pool2d hides them: its `_max_pool2d` branch has them), else
    from the signature line that opens its docstring."""
    fn = getattr(F, "_" + name) if name == "max_pool2d" else getattr(F, name)
    try:
        return _params(inspect.signature(fn))
    except ValueError:  # a builtin without __text_signature__ (avg_pool2d)
        line = fn.__doc__.strip().splitlines()[0].split("->")[0].strip()
        args = ast.parse(f"def {line}: pass").body[0].args
        names = [a.arg for a in args.args]
        defaults = [ast.literal_eval(d) for d in args.defaults]
        pad = [inspect.Parameter.empty] * (len(names) - len(defaults))
        return list(zip(names, pad + defaults, strict=True))


@pytest.mark.parametrize("name", NAMES)
def test_signatures_are_torch_functionals(name):
    sig = inspect.signature(getattr(ct, name))
    assert _params(sig) == EXPECTED[name]
    assert _params(sig) == _torch_params(name)
    extra = [p for p in sig.parameters.values() if p.kind == inspect.Parameter.KEYWORD_ONLY]
    assert [(p.name, p.default) for p in extra] == [("device", None)]


@pytest.mark.parametrize("name", ["MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d"])
def test_module_constructors_are_torch_modules(name):
    ours, theirs = getattr(ct, name), getattr(torch.nn, name)
    assert _params(inspect.signature(ours.__init__)) == _params(inspect.signature(theirs.__init__))
    assert ours.__constants__ == theirs.__constants__


# ---------------------------------------------------------------- forward


def test_max_forward_matches_torch(device):
    rng = np.random.default_rng(7100)
    for case in window_cases(7100, 24, family="max", torch_rule=True, windows=4):
        x = torch.from_numpy(data(rng, case.shape, special=True))
        want, want_idx = F.max_pool2d(x, *case.max_args, return_indices=True)
        got = ct.max_pool2d(x, *case.max_args)
        assert isinstance(got, torch.Tensor) and same_bits(_np(got), _np(want)), case
        got, got_idx = ct.max_pool2d(x, *case.max_args, return_indices=True, device=device)
        assert got_idx.dtype == torch.int64, case
        assert same_bits(_np(got), _np(want)), case
        assert same_bits(_np(got_idx), _np(want_idx)), case


def test_avg_forward_matches_torch():
    rng = np.random.default_rng(7200)
    for case in window_cases(7200, 24, family="avg", torch_rule=True, windows=4):
        x = torch.from_numpy(data(rng, case.shape))
        got = ct.avg_pool2d(x, *case.avg_args)
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
        assert_close(_np(got), _np(F.avg_pool2d(x, *case.avg_args)), 1e-5, case)


def test_adaptive_forward_matches_torch():
    rng = np.random.default_rng(7300)
    for shape, size in adaptive_cases(7300, 24):
        x = torch.from_numpy(data(rng, shape))
        got = ct.adaptive_avg_pool2d(x, size)
        assert_close(_np(got), _np(F.adaptive_avg_pool2d(x, size)), 1e-5, (shape, size))


def test_keyword_calls_and_empty_batch():
    x = torch.randn(2, 3, 7, 8)
    for name, kw in [
        ("max_pool2d", dict(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=True)),
        ("avg_pool2d", dict(kernel_size=(2, 3), stride=None, padding=(1, 0), ceil_mode=True,
                            count_include_pad=False, divisor_override=None)),
        ("adaptive_avg_pool2d", dict(output_size=(None, 3))),
    ]:  # fmt: skip
        got, want = getattr(ct, name)(input=x, **kw), getattr(F, name)(input=x, **kw)
        assert_close(_np(got), _np(want), 1e-5, name)
        empty = getattr(ct, name)(x[:0], **kw)
        assert empty.shape == want[:0].shape and empty.dtype == want.dtype


def test_device_is_passed_through(device):
    x = torch.randn(1, 2, 4, 4)
    assert ct.avg_pool2d(x, 2, device=device).shape == (1, 2, 2, 2)
    for call in [
        lambda: ct.max_pool2d(x, 2, device="no such opencl device"),
        lambda: ct.max_pool2d(x.requires_grad_(), 2, device="no such opencl device"),
        lambda: ct.avg_pool2d(x, 2, device="no such opencl device"),
        lambda: ct.adaptive_avg_pool2d(x, 2, device="no such opencl device"),
    ]:
        with pytest.raises(clpool.PoolArgumentError):
            call()


def test_argument_errors_are_clpools():
    x = torch.randn(1, 2, 4, 4, requires_grad=True)
    with pytest.raises(clpool.PoolArgumentError):
        ct.max_pool2d(x, 2, padding=2)
    with pytest.raises(clpool.PoolArgumentError):
        ct.avg_pool2d(x, 0)


# ---------------------------------------------------------------- backward


def _grads(fn, x: torch.Tensor, w_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """fn(x) and the gradient of sum(fn(x) * w) with respect to x, for a fixed random w."""
    x = x.detach().clone().requires_grad_()
    out = fn(x)
    out = out[0] if isinstance(out, tuple) else out
    w = torch.from_numpy(data(np.random.default_rng(w_seed), tuple(out.shape), np.float64))
    (out * w.to(out.dtype)).sum().backward()
    return out, x.grad


def test_max_backward_matches_torch(launched):
    rng = np.random.default_rng(7400)
    for i, case in enumerate(window_cases(7400, 16, family="max", torch_rule=True, windows=4)):
        x = torch.from_numpy(data(rng, case.shape))  # no ties: each window has one maximum
        launched.clear()
        out, got = _grads(lambda t, c=case: ct.max_pool2d(t, *c.max_args), x, i)
        assert out.grad_fn is not None and _ran_backward(launched, "max_pool2d_backward")
        _, want = _grads(lambda t, c=case: F.max_pool2d(t, *c.max_args), x, i)
        assert_close(_np(got), _np(want), 1e-5, case)
        _, got = _grads(lambda t, c=case: ct.max_pool2d(t, *c.max_args, return_indices=True),
                        x, i)  # fmt: skip
        assert_close(_np(got), _np(want), 1e-5, case)


def test_avg_backward_matches_torch(launched):
    rng = np.random.default_rng(7500)
    for i, case in enumerate(window_cases(7500, 16, family="avg", torch_rule=True, windows=4)):
        x = torch.from_numpy(data(rng, case.shape))
        launched.clear()
        _, got = _grads(lambda t, c=case: ct.avg_pool2d(t, *c.avg_args), x, i)
        assert _ran_backward(launched, "avg_pool2d_backward")
        _, want = _grads(lambda t, c=case: F.avg_pool2d(t, *c.avg_args), x, i)
        assert_close(_np(got), _np(want), 1e-5, case)


def test_adaptive_backward_matches_torch(launched):
    rng = np.random.default_rng(7600)
    for i, (shape, size) in enumerate(adaptive_cases(7600, 16)):
        x = torch.from_numpy(data(rng, shape))
        launched.clear()
        _, got = _grads(lambda t, s=size: ct.adaptive_avg_pool2d(t, s), x, i)
        assert _ran_backward(launched), (shape, size)
        _, want = _grads(lambda t, s=size: F.adaptive_avg_pool2d(t, s), x, i)
        assert_close(_np(got), _np(want), 1e-5, (shape, size))


GRADCHECK = [
    ("max_pool2d", lambda t: ct.max_pool2d(t, 2, 1, 1)),
    ("max_pool2d ceil dilated", lambda t: ct.max_pool2d(t, 3, 2, 1, 2, True)),
    ("max_pool2d indices", lambda t: ct.max_pool2d(t, (2, 3), 1, return_indices=True)[0]),
    ("avg_pool2d", lambda t: ct.avg_pool2d(t, 3, 2, 1, True, False)),
    ("avg_pool2d divisor", lambda t: ct.avg_pool2d(t, 2, 1, 1, divisor_override=3)),
    ("adaptive_avg_pool2d", lambda t: ct.adaptive_avg_pool2d(t, (3, 4))),
    ("adaptive_avg_pool2d None", lambda t: ct.adaptive_avg_pool2d(t, (None, 4))),
]


@pytest.mark.parametrize("fn", [f for _, f in GRADCHECK], ids=[n for n, _ in GRADCHECK])
def test_gradcheck_float64(device, fn):
    _need_fp64(device)
    x = torch.from_numpy(np.random.default_rng(7700).standard_normal((1, 2, 5, 6)))
    x.requires_grad_()
    assert torch.autograd.gradcheck(fn, (x,), eps=1e-6, atol=1e-5, rtol=1e-4)
    unbatched = x.detach()[0].clone().requires_grad_()
    assert torch.autograd.gradcheck(fn, (unbatched,), eps=1e-6, atol=1e-5, rtol=1e-4)


def test_requires_grad_and_no_grad():
    x = torch.randn(2, 3, 6, 6, requires_grad=True)
    for fn in [lambda t: ct.max_pool2d(t, 2), lambda t: ct.avg_pool2d(t, 2),
               lambda t: ct.adaptive_avg_pool2d(t, 3)]:  # fmt: skip
        assert fn(x).requires_grad and fn(x * 2).requires_grad
        with torch.no_grad():
            assert not fn(x).requires_grad
        assert not fn(x.detach()).requires_grad
    out, idx = ct.max_pool2d(x, 2, return_indices=True)
    assert out.requires_grad and not idx.requires_grad


# ---------------------------------------------------------------- modules


MODULES = [
    ("MaxPool2d", (3, 2, 1), {}),
    ("MaxPool2d", (2,), {"dilation": 2, "ceil_mode": True, "padding": (1, 0)}),
    ("MaxPool2d", ((2, 3),), {"return_indices": True}),
    ("AvgPool2d", (2,), {"ceil_mode": True}),
    ("AvgPool2d", (3, 1, 1), {"count_include_pad": False, "divisor_override": 2}),
    ("AdaptiveAvgPool2d", ((7, None),), {}),
    ("AdaptiveAvgPool2d", (3,), {}),
]


@pytest.mark.parametrize("name, args, kwargs", MODULES)
def test_modules_mirror_torch(name, args, kwargs):
    ours, theirs = getattr(ct, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)
    assert repr(ours) == repr(theirs) and ours.extra_repr() == theirs.extra_repr()
    for attr in theirs.__constants__:
        assert getattr(ours, attr) == getattr(theirs, attr), attr
    x = torch.from_numpy(data(np.random.default_rng(7800), (2, 3, 9, 10)))
    got, want = ours(x), theirs(x)
    if isinstance(want, tuple):
        assert same_bits(_np(got[1]), _np(want[1]))
        got, want = got[0], want[0]
    assert_close(_np(got), _np(want), 1e-5, name)


def test_modules_in_sequential():
    def net(pools):
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Conv2d(2, 4, 3, padding=1), pools.MaxPool2d(2, 2), torch.nn.ReLU(),
            pools.AvgPool2d(2, ceil_mode=True), pools.AdaptiveAvgPool2d((2, None)),
            torch.nn.Flatten(), torch.nn.LazyLinear(3),
        )  # fmt: skip

    x = torch.from_numpy(data(np.random.default_rng(7900), (3, 2, 11, 13)))
    ours, theirs = net(ct), net(torch.nn)
    got, want = ours(x), theirs(x)
    theirs.load_state_dict(ours.state_dict())
    want = theirs(x)
    assert_close(_np(got), _np(want), 1e-5)
    got.square().sum().backward()
    want.square().sum().backward()
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters(), strict=True):
        assert_close(_np(a.grad), _np(b.grad), 1e-4, name)
    assert "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)" in repr(
        ours
    )


# ---------------------------------------------------------------- layout and dtypes


def test_channels_last_in_channels_last_out():
    x = torch.from_numpy(data(np.random.default_rng(8000), (2, 3, 7, 9)))
    x = x.contiguous(memory_format=torch.channels_last).requires_grad_()
    cl_format = torch.channels_last
    for name, args in [("max_pool2d", (3, 2, 1)), ("avg_pool2d", (2, 1, 1)),
                       ("adaptive_avg_pool2d", ((4, 5),))]:  # fmt: skip
        got, want = getattr(ct, name)(x, *args), getattr(F, name)(x, *args)
        assert want.is_contiguous(memory_format=cl_format)
        assert got.is_contiguous(memory_format=cl_format) and not got.is_contiguous(), name
        assert_close(_np(got), _np(want), 1e-5, name)
        (grad,) = torch.autograd.grad(got.sum(), x)
        assert grad.is_contiguous(memory_format=cl_format) and not grad.is_contiguous(), name
    out, idx = ct.max_pool2d(x, 2, return_indices=True)
    assert idx.is_contiguous(memory_format=cl_format) and not idx.is_contiguous()
    assert same_bits(_np(idx), _np(F.max_pool2d(x, 2, return_indices=True)[1]))
    plain = ct.avg_pool2d(torch.randn(2, 3, 6, 6), 2)
    assert plain.is_contiguous()


def test_strided_input():
    x = torch.from_numpy(data(np.random.default_rng(8100), (2, 3, 8, 10)))[:, :, ::2, 1::3]
    assert not x.is_contiguous()
    assert same_bits(_np(ct.max_pool2d(x, 2)), _np(F.max_pool2d(x, 2)))
    assert_close(_np(ct.avg_pool2d(x, 2)), _np(F.avg_pool2d(x, 2)), 1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_dtype_is_kept(device, dtype):
    if dtype not in capabilities.dtypes(device):
        x = torch.randn(1, 2, 4, 4, dtype=getattr(torch, dtype))
        with pytest.raises(clpool.UnsupportedDtypeError):
            ct.avg_pool2d(x, 2)
        return
    tdtype = getattr(torch, dtype)
    x = torch.from_numpy(data(np.random.default_rng(8200), (2, 3, 6, 7), np.float32))
    x = x.to(tdtype).requires_grad_()
    rtol = 1e-3 if dtype == "float16" else 1e-5
    for name, args in [("max_pool2d", (3, 2, 1)), ("avg_pool2d", (2, 1)),
                       ("adaptive_avg_pool2d", (3,))]:  # fmt: skip
        got = getattr(ct, name)(x, *args)
        assert got.dtype == tdtype and got.device == x.device, name
        want = getattr(F, name)(x.detach().float(), *args).to(tdtype)
        if name == "max_pool2d":
            assert same_bits(_np(got), _np(want))
        else:
            assert_close(_np(got), _np(want), rtol, name)
        (grad,) = torch.autograd.grad(got.sum(), x)
        assert grad.dtype == tdtype and grad.shape == x.shape, name


def test_unsupported_dtypes_raise_clpools_error():
    for x in [torch.ones(1, 2, 4, 4, dtype=torch.int32), torch.ones(1, 2, 4, 4).bool()]:
        with pytest.raises(clpool.UnsupportedDtypeError):
            ct.max_pool2d(x, 2)
    with pytest.raises(clpool.UnsupportedDtypeError) as info:
        ct.avg_pool2d(torch.ones(1, 2, 4, 4, dtype=torch.float8_e4m3fn), 2)
    assert info.value.dtype == "float8_e4m3fn"  # a dtype numpy lacks


def test_import_clpool_does_not_import_torch():
    code = "import sys, clpool; assert 'torch' not in sys.modules; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


# ---------------------------------------------------------------- 1-D


EXPECTED_1D = {
    "max_pool1d": EXPECTED["max_pool2d"],
    "avg_pool1d": EXPECTED["avg_pool2d"][:-1],  # torch's avg_pool1d has no divisor_override
    "adaptive_avg_pool1d": EXPECTED["adaptive_avg_pool2d"],
}
CASES_1D = [  # (ours, torch's), the same arguments: ceil mode, dilation, padding, indices
    (lambda t: ct.max_pool1d(t, 3, 2, 1, 2, True, True),
     lambda t: F.max_pool1d(t, 3, 2, 1, 2, True, True)),
    (lambda t: ct.max_pool1d(t, (2,), None, 1), lambda t: F.max_pool1d(t, (2,), None, 1)),
    (lambda t: ct.avg_pool1d(t, 3, 2, 1, True, False),
     lambda t: F.avg_pool1d(t, 3, 2, 1, True, False)),
    (lambda t: ct.avg_pool1d(t, 4), lambda t: F.avg_pool1d(t, 4)),
    (lambda t: ct.adaptive_avg_pool1d(t, 5), lambda t: F.adaptive_avg_pool1d(t, 5)),
]  # fmt: skip


@pytest.mark.parametrize("name", EXPECTED_1D)
def test_1d_signatures_are_torch_functionals(name):
    assert _params(inspect.signature(getattr(ct, name))) == EXPECTED_1D[name]


@pytest.mark.parametrize("case", range(len(CASES_1D)))
def test_1d_forward_backward_and_gradcheck_match_torch(device, case):
    ours, theirs = CASES_1D[case]
    rng = np.random.default_rng(7900 + case)
    x = torch.from_numpy(data(rng, (2, 3, 17), special=False)).requires_grad_()
    got, want = ours(x), theirs(x)
    if isinstance(want, tuple):
        assert torch.equal(got[1], want[1])
        got, want = got[0], want[0]
    assert got.shape == want.shape
    assert_close(_np(got), _np(want), 1e-5, str(case))
    g = torch.from_numpy(data(rng, tuple(want.shape), special=False))
    (mine,), (torchs,) = torch.autograd.grad(got, x, g), torch.autograd.grad(want, x, g)
    assert_close(_np(mine), _np(torchs), 1e-5, f"{case} backward")
    _need_fp64(device)
    x64 = x.detach().double()[0].clone().requires_grad_()  # unbatched too
    first = (lambda t: ours(t)[0]) if isinstance(ours(x64), tuple) else ours
    assert torch.autograd.gradcheck(first, (x64,), eps=1e-6, atol=1e-5, rtol=1e-4)


MODULES_1D = [
    ("MaxPool1d", (3, 2, 1), {"dilation": 2, "ceil_mode": True}),
    ("MaxPool1d", (2,), {"return_indices": True}),
    ("AvgPool1d", (3, 2, 1), {"ceil_mode": True, "count_include_pad": False}),
    ("AvgPool1d", (2,), {}),
    ("AdaptiveAvgPool1d", (4,), {}),
]


@pytest.mark.parametrize("name, args, kwargs", MODULES_1D)
def test_1d_modules_mirror_torch(name, args, kwargs):
    ours, theirs = getattr(ct, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)
    assert repr(ours) == repr(theirs)
    assert ours.__constants__ == theirs.__constants__
    for attr in theirs.__constants__:
        assert getattr(ours, attr) == getattr(theirs, attr), attr
    x = torch.from_numpy(data(np.random.default_rng(7950), (2, 3, 13)))
    got, want = ours(x), theirs(x)
    if isinstance(want, tuple):
        assert torch.equal(got[1], want[1])
        got, want = got[0], want[0]
    assert_close(_np(got), _np(want), 1e-5, name)


def test_1d_errors_name_the_1d_op():
    with pytest.raises(clpool.PoolArgumentError, match="^max_pool1d kernel failed.*stride"):
        ct.max_pool1d(torch.ones(1, 2, 8), 2, 0)
    with pytest.raises(clpool.PoolArgumentError, match="^avg_pool1d kernel failed.*2-D"):
        ct.avg_pool1d(torch.ones(1, 2, 3, 8), 2)
    with pytest.raises(clpool.PoolArgumentError, match="^adaptive_avg_pool1d kernel failed"):
        ct.adaptive_avg_pool1d(torch.ones(1, 2, 8), (2, 3))
