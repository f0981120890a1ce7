"""`clpool bench` and its harness: the structure of the report on a tiny shape. Benchmarks
are not tests: no timing, and no relation between times, is asserted."""

from __future__ import annotations

import json
import types

import numpy as np
import pyopencl.array as cla
import pytest
from click.testing import CliRunner

import clpool
from clpool import bench, discovery, kernels
from clpool.cli import main

ROW_KEYS = {"op", "shape", "params", "wall_us", "kernel_us", "calls", "bytes"}
ROW_KEYS |= {"wall_gbps", "kernel_gbps", "kernel_fraction"}
TORCH_KEYS = {"torch", "torch_wall_us", "torch_wall_gbps", "speedup"}
HOST_KEYS = {"shape", "wall_us", "kernel_us", "pyopencl_mul_us", "bare_enqueue_us"}
HOST_KEYS |= {"ratio_to_mul", "channels_last_shape", "channels_last_wall_us"}
STREAM_KEYS = {"op", "shape", "params", "wall_us", "kernel_us", "calls", "wall_over_kernel"}
FAST = ["--min-time", "0.005", "--repeats", "1"]


def invoke(*args: str):
    return CliRunner().invoke(main, ["bench", *args])


def _positive(d: dict, keys: set[str]) -> None:
    for k in keys:
        assert isinstance(d[k], float | int) and d[k] > 0, (k, d[k])


def _check_report(report: dict, device, ops: list[str], shape: list[int]) -> None:
    assert report["device"] == device.name.strip()
    assert report["platform"] == device.platform.name.strip()
    assert report["copy_gbps"] > 0
    assert report["versions"]["clpool"] == clpool.__version__
    assert report["versions"]["driver"] == device.driver_version.strip()
    assert [r["op"] for r in report["rows"]] == ops
    torch_where = bench.torch_device(discovery.runtime(device))
    for row in report["rows"]:
        assert row["shape"] == shape
        assert bench.Case(row["op"], tuple(shape), row["args"]).label == row["params"]
        _positive(row, ROW_KEYS - {"op", "shape", "params"})
        if torch_where is None:
            assert not TORCH_KEYS & row.keys()
        else:
            assert row["torch"] == torch_where and row["torch_wall_us"] > 0
            assert row["speedup"] == row["torch_wall_us"] / row["wall_us"]
            assert row["torch_wall_gbps"] == row["bytes"] / row["torch_wall_us"] / 1e3
            assert ("torch_threads" in row) == (torch_where == "cpu")
        assert row["kernel_fraction"] == row["kernel_gbps"] / report["copy_gbps"]
    host, stream = report["host"], report["stream"]
    assert host.keys() == HOST_KEYS and host["shape"] == [1, 1, 4, 4]
    assert host["channels_last_shape"] == [1, 4, 4, 4]
    _positive(host, HOST_KEYS - {"shape", "channels_last_shape"})
    assert stream.keys() == STREAM_KEYS
    assert stream["op"] == "max_pool2d" and stream["params"] == "k3 s2 p1"
    assert stream["shape"][1:] == [64, 112, 112]
    _positive(stream, STREAM_KEYS - {"op", "shape", "params"})


def test_the_bench_times_every_op():
    """Issue 16: `clpool bench` covers every op clpool exports."""
    public = {name for name in clpool.__all__ if name[0].islower()}
    assert set(bench.OPS) == public - {"default_queue", "devices", "empty_cache"}
    assert len(bench.OPS) == len(set(bench.OPS)) == 32


def test_bench_json_on_a_tiny_shape(device):
    result = invoke("--shape", "1,1,8,8", "--json", *FAST)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)  # progress goes to stderr, the JSON alone to stdout
    assert report["loops"] == 1 and report["min_time_s"] == 0.005
    ops = [c.op for c in bench.default_cases(False, bench.OPS, (1, 1, 8, 8))]
    assert set(ops) == set(bench.OPS) - set(bench.OPS_3D) - set(bench.OPS_1D)
    _check_report(report, device, ops, [1, 1, 8, 8])
    assert "bench" in result.stderr


def test_bench_json_on_a_tiny_volume(device):
    """A shape of five sizes times the 3-D ops, PyTorch beside them."""
    result = invoke("--shape", "1,2,4,5,6", "--json", *FAST)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    ops = [c.op for c in bench.default_cases(False, bench.OPS, (1, 2, 4, 5, 6))]
    assert ops == list(bench.OPS_3D)
    _check_report(report, device, ops, [1, 2, 4, 5, 6])  # with PyTorch, where installed


def test_the_default_sweep_has_the_3d_cases_with_the_batch_scaled_on_a_cpu():
    for cpu, n in ((False, 8), (True, 2)):
        cases = [c for c in bench.default_cases(cpu) if c.op in bench.OPS_3D]
        assert [c.op for c in cases] == list(bench.OPS_3D)
        assert {c.shape for c in cases} == {(n, 64, 16, 56, 56)}
        labels = ["k3 s2 p1"] * len(bench.WINDOWED_3D) + ["out 7"] * len(bench.ADAPTIVE_3D)
        assert [c.label for c in cases] == [*labels, "k2 s2 p0", "k2 s2 p0"]  # unpooling


def test_bench_json_on_a_tiny_sequence(device):
    """A shape of three sizes times the 1-D ops, PyTorch beside them."""
    result = invoke("--shape", "1,2,9", "--json", *FAST)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [row["op"] for row in report["rows"]] == list(bench.OPS_1D)
    _check_report(report, device, list(bench.OPS_1D), [1, 2, 9])


def test_the_default_sweep_has_issue_16s_1d_case_with_the_batch_scaled_on_a_cpu():
    for cpu, n in ((False, 64), (True, 16)):
        cases = [c for c in bench.default_cases(cpu) if c.op in bench.OPS_1D]
        assert [c.op for c in cases] == list(bench.OPS_1D)
        assert {c.shape for c in cases} == {(n, 256, 4096)}
        labels = {c.op: c.label for c in cases}
        assert labels["max_pool1d"] == labels["avg_pool1d_backward"] == "k3 s2 p0"
        assert labels["adaptive_max_pool1d"] == "out 7" and labels["max_unpool1d"] == "k2 s2 p0"


def test_bench_table_labels_wall_and_kernel_columns(device):
    index = discovery.cl_devices().index(device)
    args = ["--device", str(index), "--op", "max_pool2d", "--op", "avg_pool2d_backward"]
    result = invoke(*args, "--shape", "2 3 9 7", "--no-torch", *FAST)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert device.name.strip() in lines[0] and "copy bandwidth" in lines[0]
    assert any(line.startswith("wall = ") and "kernel = " in line for line in lines)
    assert any(line.startswith("host cost") and "x * 2" in line for line in lines)
    assert any(line.startswith("stream") for line in lines)
    header = next(line for line in lines if line.startswith("op "))
    for column in ("wall us", "kernel us", "torch wall us", "wall GB/s", "kernel GB/s"):
        assert column in header
    rows = [
        line.split()[:3]
        for line in lines
        if line.split()[:1] in (["max_pool2d"], ["avg_pool2d_backward"])
    ]
    assert rows == [["max_pool2d", "2x3x9x7", "k3"], ["avg_pool2d_backward", "2x3x9x7", "k3"]]


@pytest.mark.parametrize(
    "args",
    [
        ["--shape", "1,2"],
        ["--shape", "1,2,3,4,5,6"],
        ["--shape", "1,0,4,4"],
        ["--op", "conv2d"],
        ["--repeats", "0"],
    ],
)
def test_bench_refuses_bad_options(args):
    result = invoke(*args)
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_bench_dtype_option(device):
    dtype = "float64" if discovery.has_fp64(device) else "float32"
    result = invoke("--shape", "1,1,8,8", "--op", "avg_pool2d", "--dtype", dtype, "--json", *FAST)
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["rows"]
    assert row["dtype"] == dtype and row["bytes"] == np.dtype(dtype).itemsize * (64 + 16)
    if not discovery.has_fp16(device):
        result = invoke("--shape", "1,1,8,8", "--dtype", "float16", *FAST)
        assert result.exit_code == 2 and "fp16" in result.output


def test_report_from_python(device):
    rt = discovery.runtime(device)
    case = bench.Case(
        "max_pool2d_with_indices", (1, 2, 8, 8), dict(kernel_size=2, stride=2, padding=0)
    )
    steps = []
    report = bench.report(rt, [case], loops=1, min_time=0.005, progress=steps.append)
    _check_report(report, device, ["max_pool2d_with_indices"], [1, 2, 8, 8])
    assert steps == ["stream", "max_pool2d_with_indices 1x2x8x8 k2 s2 p0", "host"]
    assert report["rows"][0]["bytes"] == 4 * (128 + 32) + 8 * 32  # x, out, int64 indices


def test_wall_us_calls_back_to_back_between_finishes():
    calls, finishes = [], []
    us, n = bench.wall_us(lambda: calls.append(1), lambda: finishes.append(len(calls)), 3, 1e-3)
    assert 1 <= n <= bench.MAX_CALLS and us > 0
    # the last three loops and the untimed one before them: n calls between two finishes
    assert finishes[-8:] == [len(calls) - 4 * n + i // 2 * n for i in range(1, 9)]


def test_bench_plot_draws_a_panel_per_op(device, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "bench.png"
    args = ["--op", "max_pool2d", "--op", "avg_pool2d", "--shape", "1,2,8,8", "--no-torch"]
    result = invoke(*args, "--plot", str(path), *FAST)
    assert result.exit_code == 0, result.output
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    assert (width, height) == (9 * 120, round(2 * 2.6 * 120))  # two panels, 120 dpi


def test_bench_plot_without_matplotlib_is_a_usage_error(monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "matplotlib" else real(name, *a),
    )
    result = invoke("--plot", str(tmp_path / "x.png"), "--shape", "1,1,4,4")
    assert result.exit_code == 2 and "clpool[plot]" in result.output
    assert not (tmp_path / "x.png").exists()


def test_the_sweep_unpools_max_pool2d_k2_s2_of_the_first_shape(device):
    """max_unpool2d runs on max_pool2d k2 s2's values and indices of [32,64,112,112] (N / 4
    on a CPU), back to that size, with PyTorch timed the same way beside it."""
    for cpu, n in ((False, 32), (True, 8)):
        (case,) = [c for c in bench.default_cases(cpu) if c.op == "max_unpool2d"]
        assert case.shape == (n, 64, 112, 112) and case.label == "k2 s2 p0"
    tiny = bench.Case("max_unpool2d", (1, 2, 8, 8), dict(bench.UNPOOL_WINDOW))
    rt = discovery.runtime(device)
    timed = bench.time_clpool(tiny, rt, 1, 0.001)
    assert timed["wall_us"] > 0 and timed["bytes"] == (2 * 16 * (4 + 8)) + 2 * 64 * 4
    pytest.importorskip("torch")
    assert bench.time_torch(tiny, "cpu", 1, 0.001) > 0


def test_the_default_sweep_has_adaptive_max_pooling_of_a_classifier_head():
    for cpu, n in ((False, 32), (True, 8)):
        found = [(c.op, c.shape, c.label) for c in bench.default_cases(cpu)
                 if c.op.startswith("adaptive_max_pool2d")]  # fmt: skip
        assert found == [(op, (n, 256, 14, 14), "out 7") for op in bench.ADAPTIVE_MAX]
    assert bench.ADAPTIVE_MAX == ("adaptive_max_pool2d", "adaptive_max_pool2d_backward")


def test_bench_layout_option_times_channels_last_inputs(device, launched):
    """--layout nhwc: clpool's inputs are channels-last (its _strided kernels run) and so are
    PyTorch's; the rows say so."""
    ops = ("max_pool2d_with_indices_backward", "adaptive_avg_pool2d", "adaptive_max_pool2d")
    args = [a for op in ops for a in ("--op", op)]
    result = invoke("--shape", "1,3,8,8", *args, "--layout", "nhwc", "--json", *FAST)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    assert {r["layout"] for r in rows} == {"nhwc"} and all("nhwc" in r["params"] for r in rows)
    assert len(rows) == 4  # the adaptive average to 7 and to 1
    ran = {name for name, _ in launched}
    assert {"max_pool2d_backward_strided", "adaptive_avg_pool2d_forward_strided",
            "adaptive_max_pool2d_forward_strided"} <= ran  # fmt: skip
    assert "clpool_contiguous" not in ran


def test_bench_layout_option_times_ndhwc_inputs_of_the_3d_ops(device, launched):
    """--layout nhwc on a 3-D shape: channels-last-3d inputs (NDHWC), PyTorch's too."""
    result = invoke("--shape", "1,4,4,6,6", "--op", "avg_pool3d_backward", "--op",
                    "max_pool3d", "--layout", "nhwc", "--json", *FAST)  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    assert [r["params"].endswith(" ndhwc") for r in rows] == [True, True]
    ran = {name for name, _ in launched}
    assert {"max_pool3d_forward_strided", "avg_pool3d_backward_strided"} <= ran
    assert "clpool_contiguous" not in ran


def _two_kernels(device):
    """A call that launches two kernels (max_pool2d's, then avg_pool2d's), planned once."""
    x = cla.to_device(discovery.runtime(device).queue, np.ones((1, 2, 8, 8), np.float32))

    def call():
        return clpool.max_pool2d(x, 2), clpool.avg_pool2d(x, 2)

    call()
    return call


def test_recording_holds_every_kernel_a_call_launches(device, launched):
    call = _two_kernels(device)
    with kernels.recording() as events:
        pooled, averaged = call()
    assert events == [pooled.events[-1], averaged.events[-1]]
    x = cla.to_device(pooled.queue, np.arange(2 * 16, dtype=np.float32).reshape(1, 2, 4, 4))
    values, indices = clpool.max_pool2d(x, 2, return_indices=True)
    launched.clear()
    with kernels.recording() as events:  # multi-kernel plans too (the flag, a fallback)
        clpool.max_unpool2d(values, indices, 2, output_size=(4, 4))
    assert len(events) == len(launched) and events
    with kernels.recording() as outside:
        pass
    assert outside == []


def test_kernel_us_sums_the_kernels_of_a_call(device, monkeypatch):
    """Each call's kernels take 3 us and 5 us: kernel_us is their sum, 8 us, not the last
    kernel's 5 us (after one untimed call)."""
    call = _two_kernels(device)
    durations = iter([3000, 5000] * 5)

    def enqueue(*args, **kwargs):
        return types.SimpleNamespace(profile=types.SimpleNamespace(start=0, end=next(durations)))

    monkeypatch.setattr(kernels.cl, "enqueue_nd_range_kernel", enqueue)
    assert bench.kernel_us(call, discovery.runtime(device).queue, 4) == pytest.approx(8.0)


def test_wall_time_runs_on_clpools_queue_and_kernel_time_on_a_profiling_one(device, monkeypatch):
    """clpool's own queue records no profiling times (they cost NVIDIA's driver host time on
    every enqueue), so a case's wall loops run there and its kernel times on the bench's
    profiling queue, whose events carry them."""
    profiling = discovery.cl.command_queue_properties.PROFILING_ENABLE
    own = discovery.runtime(device)
    assert not own.queue.properties & profiling
    queues = []
    original = bench.kernel_us

    def kernel_us(call, queue, calls):
        queues.append(queue)
        return original(call, queue, calls)

    walled = []
    wall_us = bench.wall_us

    def wall(call, finish, loops, min_time):
        walled.append(call().queue)
        return wall_us(call, finish, loops, min_time)

    monkeypatch.setattr(bench, "kernel_us", kernel_us)
    monkeypatch.setattr(bench, "wall_us", wall)
    case = bench.Case("max_pool2d", (1, 2, 6, 6), dict(kernel_size=2, stride=2, padding=0))
    assert bench.time_clpool(case, own, 1, 0.001)["kernel_us"] > 0
    assert queues == [bench.profiling_queue(own)] and walled == [own.queue]
    assert queues[0].properties & profiling and queues[0] is not own.queue
