"""The clpool command line: devices, check, bench."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import click
import numpy as np
import pyopencl as cl

from . import __version__, bfloat16, discovery, plans, programs, verify
from .errors import KernelError, PoolError, reporting


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def _table(headers: list[str], rows: Sequence[Sequence[object]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=True)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [line.format(*headers), line.format(*("-" * w for w in widths))]
    out += [line.format(*map(str, r)) for r in rows]
    return "\n".join(s.rstrip() for s in out)


@click.group()
@click.version_option(__version__, prog_name="clpool")
@click.option("-v", "--verbose", is_flag=True, help="Show OpenCL compilers' warnings.")
def main(verbose: bool) -> None:
    """clpool: PyTorch's pooling ops (1-D, 2-D and 3-D) as OpenCL kernels, on any OpenCL
    device."""
    programs.announce = lambda what: click.echo(f"{what} (first use; cached after)", err=True)
    if verbose:
        os.environ["PYOPENCL_COMPILER_OUTPUT"] = "1"
        programs.quiet = False
    else:  # PyOpenCL's own kernels too (bench's `x * 2`)
        warnings.filterwarnings("ignore", category=cl.CompilerWarning)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--no-verify", is_flag=True, help="Show the verdicts known now; run no canary.")
def devices(as_json: bool, no_verify: bool) -> None:
    """List the OpenCL devices, their capabilities and clpool's verdict on each.

    A device not yet verified is verified first: a canary runs every kernel on it in a
    child process (once per driver and clpool version; the verdict is cached). The
    default device is marked *."""
    if not no_verify:
        for i, cl_device in enumerate(discovery.cl_devices()):
            if verify.cached(cl_device).status == verify.UNVERIFIED:
                name = cl_device.name.strip()
                click.echo(f"verifying device {i} ({name}) in a child process", err=True)
    found = discovery.devices(verified=not no_verify)
    if as_json:
        click.echo(json.dumps([d.as_dict() for d in found], indent=2))
        return
    if not found:
        click.echo("no OpenCL device found (pip install 'clpool[pocl]' gives a CPU device)")
        sys.exit(1)
    headers = ["#", "platform", "device", "type", "OpenCL", "driver", "CUs", "memory"]
    headers += ["fp16", "bf16", "fp64", "verdict"]
    rows = [
        [f"{d.index}{'*' if d.default else ''}", d.platform, d.name, d.type, d.opencl_version]
        + [d.driver_version, d.compute_units, _gib(d.global_mem), _yes(d.fp16), _yes(d.bf16)]
        + [_yes(d.fp64)]
        + [d.verdict]
        for d in found
    ]
    click.echo(_table(headers, rows))
    for d in found:
        if d.reason:
            click.echo(f"device {d.index} refused: {d.reason}")
    if not any(d.default for d in found):
        click.echo("no device is verified: clpool has no default device")


# The --device option of the commands that run on one device.
DEVICE_OPTION = click.option(
    "--device",
    "device_spec",
    help="Device index or name (default: CLPOOL_DEVICE, else the first GPU, else the first CPU).",
)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


@main.command()
@DEVICE_OPTION
@click.option(
    "--dtype", default="float32", show_default=True, help="float32, float16, bfloat16 or float64."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def check(device_spec: str | None, dtype: str, as_json: bool) -> None:
    """Run every op on the device against the float64 reference.

    Exits 1 on any mismatch or a device clpool refuses, 2 for a device that does not
    exist or a dtype the device lacks."""
    from . import check as checker

    dt = _dtype_or_exit(dtype, "check")
    d = _device_or_exit(device_spec, "check")
    try:
        rows = checker.run(d, dt)
    except PoolError as e:
        click.echo(str(e), err=True)
        sys.exit(1 if isinstance(e, KernelError) else 2)
    failed = [r.op for r in rows if not r.passed]
    if as_json:
        found = [dict(asdict(r), passed=r.passed) for r in rows]
        where = dict(platform=d.platform.name.strip(), device=d.name.strip(), dtype=dt.name)
        click.echo(json.dumps(dict(where, passed=not failed, ops=found), indent=2))
        sys.exit(1 if failed else 0)
    click.echo(
        f"{d.platform.name.strip()} | {d.name.strip()}: {dt.name} against the float64 reference"
    )
    click.echo(_table(checker.HEADERS, checker.table_rows(rows)))
    click.echo(f"FAILED: {', '.join(failed)}" if failed else f"all {len(rows)} ops pass")
    sys.exit(1 if failed else 0)


@main.command()
@DEVICE_OPTION
@click.option("--op", "op_names", multiple=True, help="Only this op (repeatable).")
@click.option(
    "--shape",
    help="One input shape N,C,H,W (N,C,D,H,W: the 3-D ops; N,C,L: the 1-D ops) instead of "
    "the sweep.",
)
@click.option(
    "--repeats", default=5, show_default=True, help="Timed loops per case (the median is kept)."
)
@click.option(
    "--min-time",
    default=0.2,
    show_default=True,
    help="Seconds each timed loop of back-to-back calls runs at least.",
)
@click.option(
    "--dtype",
    type=click.Choice(["float32", "float16", "bfloat16", "float64"]),
    default="float32",
    show_default=True,
    help="The inputs' dtype.",
)
@click.option(
    "--layout",
    type=click.Choice(["nchw", "nhwc"]),
    default="nchw",
    show_default=True,
    help="The inputs' memory format (nhwc: channels-last, PyTorch's too).",
)
@click.option("--no-torch", is_flag=True, help="Do not time PyTorch beside clpool.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, writable=True),
    help="Also draw GB/s per op against the copy bandwidth into this PNG (extra: plot).",
)
def bench(
    device_spec: str | None,
    op_names: tuple[str, ...],
    shape: str | None,
    repeats: int,
    min_time: float,
    dtype: str,
    layout: str,
    no_torch: bool,
    as_json: bool,
    plot_path: str | None,
) -> None:
    """Time each op side by side: clpool's wall time per call back to back, its kernel
    time from OpenCL profiling events, and PyTorch's wall time timed the same way; plus
    the copy bandwidth, the host cost of a call on a tiny array and a stream of calls."""
    from . import bench as harness

    unknown = set(op_names) - set(harness.OPS)
    if unknown:
        raise click.BadParameter(f"unknown op {sorted(unknown)}; choose from {harness.OPS}")
    try:
        dims = tuple(int(v) for v in shape.replace(",", " ").split()) if shape else None
    except ValueError:
        dims = ()
    if dims is not None and (len(dims) not in (3, 4, 5) or min(dims) < 1):
        raise click.BadParameter(
            f"--shape wants four positive sizes N,C,H,W (five, N,C,D,H,W, for the 3-D ops; "
            f"three, N,C,L, for the 1-D ops), got {shape!r}"
        )
    if repeats < 1 or min_time <= 0:
        raise click.BadParameter("--repeats and --min-time must be positive")
    if plot_path and importlib.util.find_spec("matplotlib") is None:
        raise click.UsageError("--plot needs matplotlib: pip install 'clpool[plot]'")
    rt = discovery.runtime(_device_or_exit(device_spec, "bench"))
    cpu = not rt.device.type & cl.device_type.GPU
    problem = plans.dtype_problem(_dtype_or_exit(dtype, "bench"), rt.device)
    if problem:
        click.echo(f"bench: {problem}", err=True)
        sys.exit(2)
    cases = harness.default_cases(cpu, op_names or harness.OPS, dims, dtype, layout)
    with click.progressbar(length=len(cases) + 2, label="bench", file=sys.stderr) as bar:
        report = harness.report(
            rt, cases, repeats, not no_torch, min_time, progress=lambda _: bar.update(1)
        )
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        click.echo(_bench_text(report))
    if plot_path:
        from .plot import draw

        draw(report, plot_path)
        click.echo(f"plot written to {plot_path}", err=True)


def _bench_text(report: dict[str, Any]) -> str:
    """The bench report as text: a header, the host cost, the stream and the table, each
    time labelled wall (perf_counter, calls back to back) or kernel (profiling events)."""
    host, stream, rows = report["host"], report["stream"], report["rows"]
    lines = [
        f"{report['platform']} | {report['device']}: copy bandwidth "
        f"{report['copy_gbps']:,.0f} GB/s (read + write, profiling events)",
        "wall = wall time per call, calls back to back between queue.finish() "
        f"(median of {report['loops']} loops of >= {report['min_time_s']} s); "
        "kernel = the op's kernel time from OpenCL profiling events (median over calls)",
        f"host cost, warm call on a {'x'.join(map(str, host['shape']))} device array, wall: "
        f"clpool max_pool2d k2 {host['wall_us']:.1f} us, PyOpenCL x * 2 "
        f"{host['pyopencl_mul_us']:.1f} us (clpool / (x * 2) = {host['ratio_to_mul']:.2f}), "
        f"empty kernel enqueue {host['bare_enqueue_us']:.1f} us; "
        f"clpool kernel {host['kernel_us']:.1f} us; clpool max_pool2d k2 of a channels-last "
        f"{'x'.join(map(str, host['channels_last_shape']))} array "
        f"{host['channels_last_wall_us']:.1f} us",
        f"stream, {stream['op']} {stream['params']} on {'x'.join(map(str, stream['shape']))}"
        f" back to back: wall {stream['wall_us']:.1f} us/call, kernel "
        f"{stream['kernel_us']:.1f} us/call (wall / kernel = {stream['wall_over_kernel']:.2f}; "
        "the target on a GPU: at most 1.15)",
        "",
    ]
    torch_where = f"{rows[0]['torch']} " if rows and "torch" in rows[0] else ""
    if rows and "torch_threads" in rows[0]:
        torch_where += f"{rows[0]['torch_threads']} threads "
    headers = ["op", "shape", "params", "dtype", "wall us", "kernel us"]
    headers += [f"torch {torch_where}wall us"]
    headers += ["speedup (wall)", "wall GB/s", "kernel GB/s", "kernel of copy"]
    table = [
        [r["op"], "x".join(map(str, r["shape"])), r["params"], r["dtype"]]
        + [f"{r['wall_us']:.1f}", f"{r['kernel_us']:.1f}"]
        + [f"{r['torch_wall_us']:.1f}" if "torch_wall_us" in r else "-"]
        + [f"{r['speedup']:.2f}x" if "speedup" in r else "-"]
        + [_rate(r["wall_gbps"]), _rate(r["kernel_gbps"])]
        + [f"{100 * r['kernel_fraction']:.0f}%"]
        for r in rows
    ]
    return "\n".join([*lines, _table(headers, table)])


def _rate(gbps: float) -> str:
    """GB/s as whole numbers, with two decimals below 10."""
    return f"{gbps:.0f}" if gbps >= 10 else f"{gbps:.2f}"


def _dtype_or_exit(name: str, command: str) -> np.dtype:
    """The dtype `name` (bfloat16: ml_dtypes'), or the one handler's message and exit 2 where
    ml_dtypes is missing."""
    if name != bfloat16.NAME:
        try:
            return np.dtype(name)
        except TypeError:
            raise click.BadParameter(f"not a dtype: {name!r}", param_hint="--dtype") from None
    try:
        with reporting(command) as where:
            where.dtype = name
            return bfloat16.dtype()
    except PoolError as e:
        click.echo(str(e), err=True)
        sys.exit(2)


def _device_or_exit(spec: str | None, command: str) -> cl.Device:
    """The chosen device, or the one handler's message and exit 1 (refused) or 2 (no such
    device)."""
    try:
        with reporting(command):
            return discovery.select(spec)
    except PoolError as e:
        click.echo(str(e), err=True)
        sys.exit(1 if isinstance(e, KernelError) else 2)
