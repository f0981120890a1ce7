"""The 1-D ops (on the 2-D kernels with H = 1) against PyTorch CPU and the float64
reference: random sweeps with padding, dilation, ceil mode, ties, NaN and -inf; the
backward ops; device arrays (strided too); tensors in, tensors out; errors under the 1-D
op's own label."""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest
from pool_cases import assert_close, check_error, fresh_queue, kernel_waits, same_bits

import clpool
from clpool import launch, policy
from clpool import reference as ref
from clpool.errors import PoolArgumentError

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _cases(seed: int, count: int, dilation: bool = True):
    """(shape, kernel, stride, padding, dilation, ceil_mode) that torch accepts."""
    rng = np.random.default_rng(seed)
    found = []
    while len(found) < count:
        k, s, d = int(rng.integers(1, 6)), int(rng.integers(1, 4)), int(rng.integers(1, 3))
        d = d if dilation else 1
        p = (
            int(rng.integers(0, ((k - 1) * d + 1) // 2 + 1))
            if dilation
            else int(rng.integers(0, k // 2 + 1))
        )
        length = int(rng.integers(1, 40))
        ceil = bool(rng.integers(0, 2))
        if (length + 2 * p - d * (k - 1) - 1) // s + 1 < 1:
            continue
        if dilation and p > k // 2:  # torch refuses padding past half the kernel itself
            continue
        shape = (int(rng.integers(1, 3)), int(rng.integers(1, 4)), length)
        found.append((shape if rng.integers(0, 4) else shape[1:], k, s, p, d, ceil))
    return found


def _data(rng: np.random.Generator, shape, dtype=np.float32) -> np.ndarray:
    x = rng.integers(-3, 4, size=shape).astype(dtype)  # ties
    x.reshape(-1)[rng.random(x.size) < 0.05] = -0.0  # ties of -0 and +0: the first wins
    x.reshape(-1)[rng.random(x.size) < 0.05] = -np.inf
    x.reshape(-1)[rng.random(x.size) < 0.03] = np.nan
    return x


@pytest.fixture(params=["device", "gpu"])
def planning(request):
    """Plans as the device makes them, and as a GPU's (tiles of one row of columns)."""
    if request.param == "gpu":
        with policy.use(gpu=True, per_plane=False):
            yield request.param
    else:
        yield request.param


def test_a_gpu_tile_of_one_row_takes_its_rows_as_columns(device, build_options):
    """The 1-D ops' planes are one row: a GPU's tile of avg_pool2d, rows x columns, runs as
    1 x (rows x columns); max_pool2d's values take the table's tile for one row (1 x 4,
    where its 2-D tile, 2 x 4, would run as 1 x 8: twice as slow on the H200), keeping
    NaN apart (the NaN cases are test_max_pool1d_and_its_backward_equal_torch's)."""
    x = np.arange(2 * 3 * 40, dtype=np.float32).reshape(2, 3, 40)
    pol = policy.current()
    with policy.use(gpu=True, per_plane=False):
        got = clpool.avg_pool1d(x, 3, 2)
        rows, cols = policy.current().tile(device, "avg_pool2d_forward")
        assert rows > 1
        assert_close(got, F.avg_pool1d(torch.from_numpy(x), 3, 2).numpy())
        wide = f"-DCLPOOL_COLS={rows * cols}"
        assert any("-DCLPOOL_ROWS=1" in o and wide in o for o in build_options)
        build_options.clear()
        got = clpool.max_pool1d(x, 3, 2)
    assert same_bits(got, F.max_pool1d(torch.from_numpy(x), 3, 2).numpy())
    rows, cols = pol.tiles["GPU"]["max_pool2d_values row"]
    assert any(
        f"-DCLPOOL_ROWS={rows}" in o and f"-DCLPOOL_COLS={cols}" in o and "-DCLPOOL_NAN_APART" in o
        for o in build_options
    )


def test_a_tile_for_one_row_comes_before_the_2d_tiles(device):
    """A 1-D op's planes take the table's tile for one row, whatever the 2-D tiles for its
    stride or dtype (bfloat16's 4 x 4 as one row would be 1 x 16)."""
    table = policy.current().tiles["GPU"]
    with policy.use(gpu=True):
        pol = policy.current()
        for kernel in ("max_pool2d_values", "adaptive_avg_pool2d_backward equal"):
            want = table[f"{kernel} row"]
            assert pol.tile(device, kernel, stride1=True, bfloat16=True, row=True) == want
            assert pol.tile(device, kernel, bfloat16=True, tiling=True, row=True) == want
            assert pol.tile(device, kernel, bfloat16=True) == table[f"{kernel} bfloat16"]


def test_a_strided_1d_input_builds_its_strided_kernel_without_nan_apart(device, build_options):
    """-DCLPOOL_NAN_APART is the GPU tile's option: a strided input runs the _strided
    kernel, which does not read it, so its program is built without it (no second variant
    of the same program)."""
    base = np.arange(3 * 2 * 40, dtype=np.float32).reshape(3, 2, 40)
    base[1, 0, 5] = np.nan
    view = cla.to_device(fresh_queue(device), base).transpose((1, 0, 2))
    with policy.use(gpu=True, per_plane=False):
        got = clpool.max_pool1d(view, 3, 2).get()
    want = F.max_pool1d(torch.from_numpy(np.ascontiguousarray(base.transpose(1, 0, 2))), 3, 2)
    assert same_bits(got, want.numpy())
    built = [o for o in build_options if "-DCLPOOL_NO_INDICES" in o]
    assert built and not any("-DCLPOOL_NAN_APART" in o for o in built)


def test_a_backward_whose_grad_output_has_one_row_keeps_its_tile(device, build_options):
    """A GPU's gradient of 1 x 1 cells (a grad_output plane of one row) is tiled as its
    input's plane of many rows, not as a 1-D op's (on the H200, [32,64,112,112] from 1 x 1
    took 438 us so, 32 us as rows)."""
    x = np.zeros((2, 3, 40, 24), np.float32)
    g = np.arange(6, dtype=np.float32).reshape(2, 3, 1, 1)
    with policy.use(gpu=True, per_plane=False):
        got = clpool.adaptive_avg_pool2d_backward(g, x)
        rows, cols = policy.current().tile(device, "adaptive_avg_pool2d_backward equal")
    assert_close(got, np.broadcast_to(g / 40 / 24, x.shape), 1e-6)  # a GPU's division
    assert any(f"-DCLPOOL_ROWS={rows}" in o and f"-DCLPOOL_COLS={cols}" in o for o in build_options)
    assert not any("-DCLPOOL_ROWS=1" in o for o in build_options)


def test_max_pool1d_and_its_backward_equal_torch(device, planning):
    rng = np.random.default_rng(160)
    for shape, k, s, p, d, ceil in _cases(160, 30):
        x = _data(rng, shape)
        t = torch.from_numpy(x).requires_grad_()
        want, want_i = F.max_pool1d(t, k, s, p, d, ceil, return_indices=True)
        got, got_i = clpool.max_pool1d(x, k, s, p, d, ceil, return_indices=True)
        case = (shape, k, s, p, d, ceil)
        assert same_bits(got, want.detach().numpy()) and same_bits(got_i, want_i.numpy()), case
        assert same_bits(clpool.max_pool1d(x, k, s, p, d, ceil), got), case
        g = rng.standard_normal(got.shape).astype(np.float32)
        want.backward(torch.from_numpy(g))
        grad = clpool.max_pool1d_with_indices_backward(g, x, k, s, p, d, ceil, got_i)
        assert_close(grad, t.grad.numpy(), 1e-6, case)


def test_avg_pool1d_and_its_backward_equal_torch_and_the_reference(device, planning):
    rng = np.random.default_rng(161)
    for shape, k, s, p, _, ceil in _cases(161, 30, dilation=False):
        x = rng.standard_normal(shape).astype(np.float32)
        for include_pad in (True, False):
            t = torch.from_numpy(x).requires_grad_()
            want = F.avg_pool1d(t, k, s, p, ceil, include_pad)
            got = clpool.avg_pool1d(x, k, s, p, ceil, include_pad)
            case = (shape, k, s, p, ceil, include_pad)
            assert_close(got, want.detach().numpy(), 1e-5, case)
            x4 = x[..., None, :]
            assert_close(
                got,
                ref.avg_pool2d(x4, (1, k), (1, s), (0, p), ceil, include_pad)[..., 0, :],
                1e-5,
                case,
            )
            g = rng.standard_normal(got.shape).astype(np.float32)
            want.backward(torch.from_numpy(g))
            grad = clpool.avg_pool1d_backward(g, x, k, s, p, ceil, include_pad)
            assert_close(grad, t.grad.numpy(), 1e-5, case)


def test_adaptive_avg_pool1d_and_its_backward_equal_torch(device):
    rng = np.random.default_rng(162)
    for length, size in [(1, 1), (7, 3), (10, 10), (5, 9), (64, 7), (33, 1), (100, 16)]:
        x = rng.standard_normal((2, 3, length)).astype(np.float32)
        t = torch.from_numpy(x).requires_grad_()
        want = F.adaptive_avg_pool1d(t, size)
        got = clpool.adaptive_avg_pool1d(x, size)
        assert_close(got, want.detach().numpy(), 1e-5, (length, size))
        g = rng.standard_normal(got.shape).astype(np.float32)
        want.backward(torch.from_numpy(g))
        assert_close(clpool.adaptive_avg_pool1d_backward(g, x), t.grad.numpy(), 1e-5)


def _reference_average(x: np.ndarray, size: int) -> np.ndarray:
    """The float64 reference's adaptive average of a 1-D or 2-D input (1-D: a row each)."""
    if x.ndim == 3:
        return ref.adaptive_avg_pool2d(x[..., None, :], (1, size))[..., 0, :]
    return ref.adaptive_avg_pool2d(x, size)


@pytest.mark.parametrize("nan", [False, True])
def test_a_gpus_wide_cells_reduce_a_work_group_each(device, launched, nan):
    """On a GPU, cells of 64 elements or more of a plane of one row (1-D), and a plane's one
    cell (outputs of 1, 1x1, 1x1x1), are reduced by a work-group each: max pooling folds
    its work-items' partial results in any order and still gives ATen's values and indices
    bit for bit (the last NaN, else the first of tied maxima, a cell of -inf its first
    element); the averages equal PyTorch's and the float64 reference's within 1e-5."""
    rng = np.random.default_rng(170 + nan)
    cases = [((2, 3, 4096), 7), ((3, 2, 1000), 3), ((2, 2, 300), 1), ((1, 3, 200), 2),
             ((2, 3, 40, 50), 1), ((2, 2, 5, 6, 7), 1)]  # fmt: skip
    with policy.use(gpu=True, per_plane=False):
        for shape, size in cases:
            rank = len(shape) - 2
            x = rng.integers(-3, 4, size=shape).astype(np.float32)  # ties
            x[0, 0, ..., : x.shape[-1] // 2] = -np.inf  # cells all of -inf
            if nan:
                x.reshape(-1)[rng.random(x.size) < 0.004] = np.nan
            want, want_i = getattr(F, f"adaptive_max_pool{rank}d")(
                torch.from_numpy(x), size, return_indices=True
            )
            got, got_i = getattr(clpool, f"adaptive_max_pool{rank}d")(x, size, True)
            assert same_bits(got, want.numpy()) and same_bits(got_i, want_i.numpy()), shape
            if rank < 3:
                x[~np.isfinite(x)] = 0.5
                got = getattr(clpool, f"adaptive_avg_pool{rank}d")(x, size)
                want = getattr(F, f"adaptive_avg_pool{rank}d")(torch.from_numpy(x), size)
                assert_close(got, want.numpy(), 1e-5, shape)
                assert_close(got, _reference_average(x, size), 1e-5, shape)
    names = {name for name, _ in launched}
    assert {"adaptive_max_pool_global", "adaptive_avg_pool2d_global"} <= names


@pytest.mark.parametrize("index", [np.int64, np.int32])
def test_a_gpus_wide_cells_of_a_row_store_their_gradients_by_work_group(device, launched, index):
    """On a GPU, the backward of cells of 64 elements or more of a plane of one row takes a
    work-group per cell, which stores the elements from its start to the next cell's:
    ATen's bits for the average and for the max, where two cells share an element that
    both name, one names or neither does; an index outside its cell (outside the plane,
    or naming the next cell's element) adds nothing, as in the float64 reference."""
    rng = np.random.default_rng(180)
    cases = [((2, 3, 4096), 7), ((3, 2, 1000), 13), ((1, 2, 200), 3), ((2, 1, 130), 1),
             ((1, 1, 640), 10)]  # fmt: skip
    with policy.use(gpu=True, per_plane=False):
        for shape, size in cases:
            x = rng.standard_normal(shape).astype(np.float32)
            w = shape[-1]
            # cells k - 1 and k share element k * w // size where size does not divide
            # k * w; for odd k it is both cells' maximum
            x[..., [k * w // size for k in range(1, size, 2) if k * w % size]] = 10
            g = rng.standard_normal(shape[:-1] + (size,)).astype(np.float32)
            g[0, 0, 0] = -0.0  # its share is +0, as ATen's sum (0 + -0)
            want = torch.ops.aten._adaptive_avg_pool2d_backward(
                torch.from_numpy(g[..., None, :]), torch.from_numpy(x[..., None, :])
            )
            got = clpool.adaptive_avg_pool1d_backward(g, x)
            assert same_bits(got, want.numpy()[..., 0, :]), shape
            t = torch.from_numpy(x).requires_grad_()
            out, idx = F.adaptive_max_pool1d(t, size, return_indices=True)
            out.backward(torch.from_numpy(g))
            idx = idx.numpy().astype(index)
            got = clpool.adaptive_max_pool1d_backward(g, x, idx)
            assert same_bits(got, t.grad.numpy()), shape
            bad = idx.copy()
            bad[0, 0, 0], bad[-1, -1, -1] = -1, w  # ignored by the reference too
            ignored = bad.copy()
            if size > 1:  # the last cell's element, and one of the second cell only
                bad[0, -1, 0], bad[-1, 0, 0] = w - 1, w // size + 5
                ignored[0, -1, 0] = ignored[-1, 0, 0] = -1
            got = clpool.adaptive_max_pool1d_backward(g, x, bad)
            want = ref.adaptive_max_pool_backward(g, x, ignored, 1).astype(np.float32)
            assert same_bits(got, want), shape
    names = {name for name, _ in launched}
    assert {"adaptive_avg_pool2d_global_backward", "adaptive_max_pool_global_backward"} <= names


def test_device_arrays_strided_too_stay_on_the_device(device):
    queue = fresh_queue(device)
    rng = np.random.default_rng(163)
    x = rng.standard_normal((2, 4, 30)).astype(np.float32)
    for xd, host in [
        (cla.to_device(queue, x), x),
        (cla.to_device(queue, x)[:, :, ::2], x[:, :, ::2]),
        (cla.to_device(queue, x)[1:], x[1:]),
    ]:
        got, idx = clpool.max_pool1d(xd, 3, 2, 1, return_indices=True)
        assert isinstance(got, cla.Array) and got.events
        want, want_i = F.max_pool1d(
            torch.from_numpy(np.ascontiguousarray(host)), 3, 2, 1, return_indices=True
        )
        assert same_bits(got.get(), want.numpy()) and same_bits(idx.get(), want_i.numpy())
        avg = clpool.avg_pool1d(xd, 4, 3)
        assert_close(
            avg.get(), F.avg_pool1d(torch.from_numpy(np.ascontiguousarray(host)), 4, 3).numpy()
        )


# (forward, backward(grad_output, input, forward's result)) of each 1-D op, for clpool and
# torch.nn.functional (the backward ops are clpool's: torch's come through autograd)
LAYOUT_OPS = {
    "max_pool1d": (
        lambda m, x: m.max_pool1d(x, 3, 2, 1, return_indices=True),
        lambda g, x, r: clpool.max_pool1d_with_indices_backward(g, x, 3, 2, 1, 1, False, r[1]),
    ),
    "avg_pool1d": (
        lambda m, x: m.avg_pool1d(x, 4, 3, 1),
        lambda g, x, r: clpool.avg_pool1d_backward(g, x, 4, 3, 1),
    ),
    "adaptive_avg_pool1d": (
        lambda m, x: m.adaptive_avg_pool1d(x, 7),
        lambda g, x, r: clpool.adaptive_avg_pool1d_backward(g, x),
    ),
    "adaptive_max_pool1d": (
        lambda m, x: m.adaptive_max_pool1d(x, 7, True),
        lambda g, x, r: clpool.adaptive_max_pool1d_backward(g, x, r[1]),
    ),
}


def _host(a) -> np.ndarray:
    return launch.to_host(a) if isinstance(a, cla.Array) else a.detach().numpy()


@pytest.mark.parametrize("name", list(LAYOUT_OPS))
def test_inputs_with_channels_innermost_are_read_as_they_lie(device, launched, name):
    """An (N, C, L) input with its channels innermost ((N, L, C) memory, a transposed
    (N, L, C) tensor) is read as it lies: no copy kernel on the device, and a tensor is not
    copied on the host either. Results and gradients take PyTorch's strides (its 1-D ops
    keep the channels innermost) and values."""
    forward, backward = LAYOUT_OPS[name]
    rng = np.random.default_rng(167)
    nlc = _data(rng, (2, 50, 32))
    leaf = torch.from_numpy(nlc).transpose(1, 2).requires_grad_()
    want = forward(F, leaf)
    want = want if isinstance(want, tuple) else (want,)
    n, c, length = want[0].shape
    g = torch.from_numpy(rng.standard_normal((n, length, c)).astype(np.float32))
    want[0].backward(g.transpose(1, 2))  # channels innermost, as autograd hands it down
    exact = "max" in name
    queue = fresh_queue(device)
    on_device = cla.to_device(queue, nlc).transpose((0, 2, 1))
    g_on_device = cla.to_device(queue, g.numpy()).transpose((0, 2, 1))
    for x, grad in [(leaf.detach(), g.transpose(1, 2)), (on_device, g_on_device)]:
        got = forward(clpool, x)
        got = got if isinstance(got, tuple) else (got,)
        back = backward(grad, x, got)
        for r, w in [*zip(got, want, strict=True), (back, leaf.grad)]:
            assert _host(r).strides == _host(w).strides, (name, type(x))
            if exact:
                assert same_bits(_host(r), _host(w)), name
            else:
                assert_close(_host(r), _host(w))
    assert not [k for k, _ in launched if k.startswith("clpool_contiguous")], launched


def test_events_pass_through_the_1d_view(device):
    """A 1-D op waits for its input's and its out='s events, and out= (not a copy of its
    event list) carries the kernel's event."""
    queue = fresh_queue(device)
    x = cla.to_device(queue, np.arange(2 * 3 * 9, dtype=np.float32).reshape(2, 3, 9))
    want = F.max_pool1d(torch.from_numpy(x.get()), 3).numpy()
    queue.finish()
    gate = cl.UserEvent(queue.context)
    x.add_event(gate)
    got = clpool.max_pool1d(x, 3)
    kernel_waits(gate, got.events[-1], queue)
    assert same_bits(got.get(), want)
    out = cla.zeros(queue, (2, 3, 3), np.float32)
    queue.finish()
    gate = cl.UserEvent(queue.context)
    out.add_event(gate)
    clpool.max_pool1d(x, 3, out=out)
    kernel_waits(gate, out.events[-1], queue)
    assert same_bits(out.get(), want)


def test_tensors_in_tensors_out():
    t = torch.randn(2, 3, 20, dtype=torch.float64, requires_grad=True)
    if not clpool.discovery.has_fp64(clpool.discovery.select()):
        t = t.float()
    got = clpool.max_pool1d(t, 3, 2)
    assert isinstance(got, torch.Tensor) and got.dtype == t.dtype and got.shape == (2, 3, 9)
    assert torch.equal(got, F.max_pool1d(t.detach(), 3, 2))
    out = clpool.adaptive_avg_pool1d(t, 4)
    assert isinstance(out, torch.Tensor) and out.shape == (2, 3, 4)


@pytest.mark.parametrize(
    "call, label",
    [
        (lambda x: clpool.max_pool1d(x, (2, 2)), "max_pool1d"),
        (lambda x: clpool.max_pool1d(x[0, 0], 2), "max_pool1d"),
        (lambda x: clpool.avg_pool1d(x, 0), "avg_pool1d"),
        (lambda x: clpool.avg_pool1d(x, 2, padding=2), "avg_pool1d"),
        (lambda x: clpool.adaptive_avg_pool1d(x, -1), "adaptive_avg_pool1d"),
        (
            lambda x: clpool.max_pool1d_with_indices_backward(
                x, x, 2, 2, 0, 1, False, np.zeros((1, 2, 3), np.int64)
            ),
            "max_pool1d_with_indices_backward",
        ),
        (
            lambda x: clpool.max_pool1d_with_indices_backward(x, x, 2),
            "max_pool1d_with_indices_backward",
        ),
        (lambda x: clpool.avg_pool1d_backward(x, x[0, 0], 2), "avg_pool1d_backward"),
        (lambda x: clpool.adaptive_max_pool1d(x, (2, 2)), "adaptive_max_pool1d"),
    ],
)
def test_errors_are_named_for_the_1d_op(device, call, label):
    """Each error names the 1-D op, and the device and dtype the call would run on, whether
    its arguments or its shapes are wrong."""
    x = np.ones((1, 2, 8), np.float32)
    with pytest.raises(PoolArgumentError) as info:
        call(x)
    check_error(info, label, device, "float32")
