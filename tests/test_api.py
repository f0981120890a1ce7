"""The public API as a PyTorch or PyOpenCL user meets it: torch's parameter names, order and
defaults; results that follow the input (numpy, pyopencl Array, torch tensor, DLPack);
queue= and out= with their events."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest
from pool_cases import fresh_queue, kernel_waits

import clpool
from clpool import plans
from clpool import reference as ref
from clpool.errors import KernelError, PoolArgumentError, UnsupportedDtypeError

torch = pytest.importorskip("torch")
F = torch.nn.functional
aten = torch.ops.aten

OWN = {"device", "queue", "out", "index_dtype"}  # clpool's keyword-only extras
MISSING = inspect.Parameter.empty

# torch's avg_pool2d is a builtin without an inspectable signature: its documented one.
AVG_POOL2D = (
    "avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, "
    "count_include_pad=True, divisor_override=None)"
)
# Backward ops keep their forward's defaults (SPEC: "a keyword call may leave them out");
# indices comes last and is required, so it defaults to None and None is refused.
BACKWARD_DEFAULTS = {
    "max_pool2d_with_indices_backward": dict(
        stride=None, padding=0, dilation=1, ceil_mode=False, indices=None
    ),
    "avg_pool2d_backward": dict(
        stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None
    ),
    "adaptive_avg_pool2d_backward": {},
    "adaptive_max_pool2d_backward": {},
    "adaptive_max_pool3d_backward": {},
    "max_pool3d_with_indices_backward": dict(
        stride=None, padding=0, dilation=1, ceil_mode=False, indices=None
    ),
    "avg_pool3d_backward": dict(
        stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None
    ),
    "adaptive_avg_pool3d_backward": {},
}


def _params(fn) -> list[tuple[str, object]]:
    """(name, default) of `fn`'s parameters that are not keyword-only."""
    return [
        (p.name, p.default)
        for p in inspect.signature(fn).parameters.values()
        if p.kind is not inspect.Parameter.KEYWORD_ONLY
    ]


def _documented(text: str) -> list[tuple[str, object]]:
    """(name, default) of a documented signature such as torch's docstrings give."""
    inner = re.fullmatch(r"\w+\((.*)\)", text).group(1)
    out: list[tuple[str, object]] = []
    for part in inner.split(", "):
        name, _, default = part.partition("=")
        out.append((name, eval(default) if default else MISSING))
    return out


# torch's other builtins, as their docstrings give them
DOCUMENTED = {
    "avg_pool2d": AVG_POOL2D,
    "avg_pool1d": "avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, "
    "count_include_pad=True)",
    "adaptive_avg_pool1d": "adaptive_avg_pool1d(input, output_size)",
    "avg_pool3d": AVG_POOL2D.replace("avg_pool2d", "avg_pool3d"),
}


def _torch_forward(name: str) -> list[tuple[str, object]]:
    if name in DOCUMENTED:
        assert getattr(F, name).__doc__.strip().splitlines()[0].startswith(DOCUMENTED[name])
        return _documented(DOCUMENTED[name])
    # F.max_pool2d and the others are boolean_dispatch wrappers: their parameters are
    # F._max_pool2d's and so on
    wrapped = name in ("max_pool1d", "max_pool2d", "max_pool3d") or "adaptive_max" in name
    fn = getattr(F, "_" + name) if wrapped else getattr(F, name)
    params = _params(fn)
    if name.endswith("_with_indices"):  # torch's takes a return_indices it ignores
        params = [p for p in params if p[0] != "return_indices"]
    return params


def _aten_backward(name: str) -> list[tuple[str, object]]:
    op = getattr(aten, name, None)
    if op is None or "default" not in op.overloads():  # adaptive_avg_pool3d_backward: out= only
        op = getattr(aten, "_" + name)
    names = [a.name for a in op.default._schema.arguments]
    names = ["input" if n == "self" else n for n in names]
    defaults = BACKWARD_DEFAULTS[name]
    return [(n, defaults.get(n, MISSING)) for n in names]


FORWARD = [
    "max_pool2d",
    "max_pool2d_with_indices",
    "avg_pool2d",
    "adaptive_avg_pool2d",
    "max_pool1d",
    "avg_pool1d",
    "adaptive_avg_pool1d",
    "max_pool3d",
    "max_pool3d_with_indices",
    "avg_pool3d",
    "adaptive_avg_pool3d",
    "adaptive_max_pool1d",
    "adaptive_max_pool2d",
    "adaptive_max_pool3d",
]
BACKWARD = list(BACKWARD_DEFAULTS)
# ATen has no 1-D backward ops (torch runs the 2-D ones): clpool's take the 2-D ones'
# parameters, less divisor_override, which avg_pool1d lacks.
BACKWARD_1D = {
    "max_pool1d_with_indices_backward": "max_pool2d_with_indices_backward",
    "avg_pool1d_backward": "avg_pool2d_backward",
    "adaptive_avg_pool1d_backward": "adaptive_avg_pool2d_backward",
    "adaptive_max_pool1d_backward": "adaptive_max_pool2d_backward",
}

# Max unpooling: torch.nn.functional's forward; ATen has no backward op (autograd gathers),
# so clpool's takes grad_output, then the forward's parameters.
UNPOOL = ["max_unpool1d", "max_unpool2d", "max_unpool3d"]
UNPOOL_BACKWARD = {f"{name}_backward": name for name in UNPOOL}
FORWARD += UNPOOL


def test_every_public_op_is_checked():
    suffixes = ("pool1d", "pool2d", "pool3d", "indices", "backward")
    ops = {n for n in clpool.__all__ if n.endswith(suffixes)}
    assert ops == set(FORWARD) | set(BACKWARD) | set(BACKWARD_1D) | set(UNPOOL_BACKWARD)


@pytest.mark.parametrize("name", UNPOOL_BACKWARD)
def test_unpool_backward_signature_is_grad_output_then_the_forwards(name):
    want = [("grad_output", MISSING), *_torch_forward(UNPOOL_BACKWARD[name])]
    assert _params(getattr(clpool, name)) == want


@pytest.mark.parametrize("name", BACKWARD_1D)
def test_1d_backward_signature_is_its_2d_twins(name):
    twin = [p for p in _params(getattr(clpool, BACKWARD_1D[name])) if p[0] != "divisor_override"]
    assert _params(getattr(clpool, name)) == twin


@pytest.mark.parametrize("name", FORWARD)
def test_forward_signature_is_torch_nn_functional(name):
    assert _params(getattr(clpool, name)) == _torch_forward(name)


@pytest.mark.parametrize("name", BACKWARD)
def test_backward_signature_is_aten(name):
    assert _params(getattr(clpool, name)) == _aten_backward(name)


@pytest.mark.parametrize("name", FORWARD + BACKWARD + list(UNPOOL_BACKWARD))
def test_clpool_options_are_keyword_only(name):
    own = {
        p.name
        for p in inspect.signature(getattr(clpool, name)).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    assert own <= OWN and {"device", "queue", "out"} <= own
    if "max" in name and "backward" not in name and name not in UNPOOL:  # unpool: indices in
        assert "index_dtype" in own


def test_the_signature_check_catches_a_difference():
    def old(grad_output, input, indices, kernel_size, stride=None, padding=0, dilation=1,
            ceil_mode=False, *, device=None):  # fmt: skip
        pass

    assert _params(old) != _aten_backward("max_pool2d_with_indices_backward")
    assert _documented(AVG_POOL2D.replace("=None)", "=0)")) != _torch_forward("avg_pool2d")


# ---------------------------------------------------------------- torch's calls, ported


def _x(shape=(2, 3, 9, 10), dtype=np.float32, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def test_max_pool2d_return_indices_is_max_pool2d_with_indices():
    x = _x()
    values, indices = clpool.max_pool2d(x, 3, 2, 1, return_indices=True)
    want, want_i = ref.max_pool2d_with_indices(x, 3, 2, 1)
    assert np.array_equal(values, want.astype(np.float32))
    assert np.array_equal(indices, want_i) and indices.dtype == np.int64
    v32, i32 = clpool.max_pool2d(input=x, kernel_size=3, return_indices=True, index_dtype="int32")
    assert i32.dtype == np.int32 and np.array_equal(v32, clpool.max_pool2d(x, 3))


def test_max_backward_takes_indices_last_as_aten():
    x = _x()
    out, idx = clpool.max_pool2d_with_indices(x, 3, 2, 1, 1, True)
    g = _x(out.shape, seed=1)
    want = ref.max_pool2d_with_indices_backward(g, x, idx, 3, 2, 1, 1, True)
    got = clpool.max_pool2d_with_indices_backward(g, x, 3, 2, 1, 1, True, idx)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    t = aten.max_pool2d_with_indices_backward(
        torch.from_numpy(g), torch.from_numpy(x), [3, 3], [2, 2], [1, 1], [1, 1], True,
        torch.from_numpy(idx),
    )  # fmt: skip
    np.testing.assert_allclose(got, t.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(PoolArgumentError, match="indices"):
        clpool.max_pool2d_with_indices_backward(g, x, 3, 2, 1, 1, True)


def test_avg_and_adaptive_backward_in_aten_order():
    x = _x()
    g = _x(clpool.avg_pool2d(x, 3, 2, 1, True, False, None).shape, seed=2)
    got = clpool.avg_pool2d_backward(g, x, 3, 2, 1, True, False, None)
    want = ref.avg_pool2d_backward(g, x, 3, 2, 1, True, False, None)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    ga = _x((2, 3, 4, 3), seed=3)
    got = clpool.adaptive_avg_pool2d_backward(grad_output=ga, input=x)
    np.testing.assert_allclose(got, ref.adaptive_avg_pool2d_backward(ga, x), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- the result follows the input


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_tensor_gives_a_tensor_of_its_dtype(dtype, device):
    if dtype == torch.float64 and not plans.has_fp64(device):
        pytest.skip("no float64 on this device")
    t = torch.from_numpy(_x()).to(dtype)
    out = clpool.avg_pool2d(t, 3, 2, 1)
    assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.device == t.device
    torch.testing.assert_close(out, F.avg_pool2d(t, 3, 2, 1))
    values, indices = clpool.max_pool2d(t, 2, return_indices=True)
    want, want_i = F.max_pool2d(t, 2, return_indices=True)
    assert torch.equal(values, want) and torch.equal(indices, want_i)
    assert indices.dtype == torch.int64
    g = torch.ones_like(values)
    grad = clpool.max_pool2d_with_indices_backward(g, t, 2, 2, 0, 1, False, indices)
    assert isinstance(grad, torch.Tensor) and grad.dtype == dtype
    torch.testing.assert_close(
        grad,
        aten.max_pool2d_with_indices_backward(
            g, t, [2, 2], [2, 2], [0, 0], [1, 1], False, indices
        ),  # fmt: skip
    )


def test_a_tensor_that_requires_grad_works_without_a_gradient():
    t = torch.from_numpy(_x()).requires_grad_()
    out = clpool.adaptive_avg_pool2d(t, (3, 2))
    assert isinstance(out, torch.Tensor) and not out.requires_grad
    torch.testing.assert_close(out, F.adaptive_avg_pool2d(t, (3, 2)).detach())


def test_a_channels_last_tensor_keeps_its_memory_format():
    t = torch.from_numpy(_x()).contiguous(memory_format=torch.channels_last)
    out = clpool.max_pool2d(t, 2)
    assert out.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(out, F.max_pool2d(t, 2))


def test_bad_tensors_are_argument_or_dtype_errors():
    with pytest.raises(PoolArgumentError, match="meta"):
        clpool.max_pool2d(torch.empty(1, 1, 4, 4, device="meta"), 2)
    with pytest.raises(UnsupportedDtypeError):
        clpool.max_pool2d(torch.ones(1, 1, 4, 4, dtype=torch.float8_e4m3fn), 2)
    with pytest.raises(UnsupportedDtypeError):
        clpool.avg_pool2d(torch.ones(1, 1, 4, 4, dtype=torch.int32), 2)


class _DLPackOnly:
    """A producer that offers nothing but DLPack."""

    def __init__(self, a: np.ndarray) -> None:
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_a_dlpack_producer_is_read_through_dlpack():
    x = _x()
    out = clpool.avg_pool2d(_DLPackOnly(x), 2)
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, ref.avg_pool2d(x, 2), rtol=1e-5, atol=1e-6)
    g = np.ones_like(out)
    grad = clpool.avg_pool2d_backward(_DLPackOnly(g), _DLPackOnly(x), 2)
    np.testing.assert_allclose(grad, ref.avg_pool2d_backward(g, x, 2), rtol=1e-5)


@pytest.mark.parametrize(
    "bad",
    [object(), "abc", None, [[["a"]]], _DLPackOnly(np.array(["x"]))],
    ids=["object", "str", "None", "nested-str-list", "dlpack-of-str"],
)
def test_bad_inputs_are_never_kernel_errors(bad):
    with pytest.raises((PoolArgumentError, UnsupportedDtypeError)) as info:
        clpool.max_pool2d(bad, 2)
    assert not isinstance(info.value, KernelError)


def test_import_clpool_does_not_import_torch():
    code = "import sys, clpool; print('torch' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.stdout.strip() == "False", run.stderr


# ---------------------------------------------------------------- queue= and out=


def _kernel_event(a: cla.Array) -> bool:
    return any(e.command_type == cl.command_type.NDRANGE_KERNEL for e in a.events)


def test_queue_gives_an_array_on_that_queue_for_a_numpy_input(queue):
    x = _x()
    out = clpool.max_pool2d(x, 3, 2, 1, queue=queue)
    assert isinstance(out, cla.Array) and out.queue is queue and _kernel_event(out)
    assert np.array_equal(out.get(), ref.max_pool2d(x, 3, 2, 1).astype(np.float32))
    values, indices = clpool.max_pool2d_with_indices(x, 2, queue=queue)
    assert isinstance(indices, cla.Array) and indices.queue is queue
    t = clpool.avg_pool2d(torch.from_numpy(x), 2, queue=queue)
    assert isinstance(t, cla.Array) and t.queue is queue


def test_a_plan_made_for_one_queue_is_never_used_on_another(device, made):
    x = _x()
    q1, q2 = (fresh_queue(device) for _ in range(2))
    a = clpool.avg_pool2d(x, 2, queue=q1)
    b = clpool.avg_pool2d(x, 2, queue=q2)
    assert a.queue is q1 and b.queue is q2 and a.context != b.context
    assert made == ["avg_pool2d", "avg_pool2d"]
    clpool.avg_pool2d(x, 2, queue=q1)
    assert made == ["avg_pool2d", "avg_pool2d"]
    np.testing.assert_array_equal(a.get(), b.get())


def test_queue_refuses_another_device_or_context(queue, device):
    other = cla.to_device(fresh_queue(device), _x())
    with pytest.raises(PoolArgumentError, match="context"):
        clpool.max_pool2d(other, 2, queue=queue)
    with pytest.raises(PoolArgumentError, match="queue"):
        clpool.max_pool2d(_x(), 2, queue="not a queue")
    others = [d for p in cl.get_platforms() for d in p.get_devices() if d != device]
    if others:
        with pytest.raises(PoolArgumentError, match="differs"):
            clpool.max_pool2d(_x(), 2, queue=queue, device=others[0])


def test_out_is_written_and_returned_with_its_event(queue, made):
    x = _x()
    out = cla.empty(queue, (2, 3, 4, 5), np.float32)
    got = clpool.avg_pool2d(x, 2, out=out)
    assert got is out and _kernel_event(out)
    np.testing.assert_allclose(out.get(), ref.avg_pool2d(x, 2), rtol=1e-5, atol=1e-6)
    other = cla.empty(queue, (2, 3, 4, 5), np.float32)
    assert clpool.avg_pool2d(x, 2, out=other, queue=queue) is other
    clpool.avg_pool2d(x, 2, out=cla.empty(queue, (2, 3, 4, 5), np.float32), queue=queue)
    assert made == ["avg_pool2d"]  # out= runs where out lives; no plan per out array


def test_out_pair_for_max_with_indices(queue):
    x = cla.to_device(queue, _x())
    values = cla.zeros(queue, (2, 3, 4, 5), np.float32)
    indices = cla.zeros(queue, (2, 3, 4, 5), np.int32)
    got = clpool.max_pool2d(x, 2, return_indices=True, index_dtype="int32", out=(values, indices))
    assert got[0] is values and got[1] is indices
    assert _kernel_event(values) and _kernel_event(indices)
    want, want_i = ref.max_pool2d_with_indices(x.get(), 2)
    assert np.array_equal(values.get(), want.astype(np.float32))
    assert np.array_equal(indices.get(), want_i)
    with pytest.raises(PoolArgumentError, match="pair|tuple"):
        clpool.max_pool2d_with_indices(x, 2, out=values)


def test_out_waits_for_its_events(queue):
    x = cla.to_device(queue, _x())
    out = cla.zeros(queue, (2, 3, 4, 5), np.float32)
    queue.finish()
    gate = cl.UserEvent(queue.context)
    out.add_event(gate)
    clpool.max_pool2d(x, 2, out=out)
    kernel_waits(gate, out.events[-1], queue)
    assert np.array_equal(out.get(), ref.max_pool2d(x.get(), 2).astype(np.float32))


def test_a_wrong_out_is_an_argument_error(queue, device):
    x = cla.to_device(queue, _x())
    wrong = [
        cla.empty(queue, (2, 3, 5, 4), np.float32),  # shape
        cla.empty(queue, (2, 3, 4, 5), np.float64),  # dtype
        cla.empty(queue, (2, 3, 4, 10), np.float32)[..., ::2],  # not contiguous
        cla.empty(queue, (2 * 3 * 4 * 5 + 1,), np.float32)[1:].reshape(2, 3, 4, 5),  # offset
        cla.empty(fresh_queue(device), (2, 3, 4, 5), np.float32),  # context
        np.empty((2, 3, 4, 5), np.float32),  # not an Array
    ]
    for out in wrong:
        with pytest.raises(PoolArgumentError, match="out"):
            clpool.avg_pool2d(x, 2, out=out)
