"""The clpool command line: devices, check, bench."""

from __future__ import annotations

import json
import math
import sys
import time

import click
import pyopencl as cl

from . import __version__, discovery, verify
from .errors import KernelError, PoolError, reporting


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=True)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [line.format(*headers), line.format(*("-" * w for w in widths))]
    out += [line.format(*map(str, r)) for r in rows]
    return "\n".join(s.rstrip() for s in out)


@click.group()
@click.version_option(__version__, prog_name="clpool")
def main() -> None:
    """clpool: PyTorch's 2-D pooling ops as OpenCL kernels, on any OpenCL device."""


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--no-verify", is_flag=True, help="Show the verdicts known now; run no canary.")
def devices(as_json: bool, no_verify: bool) -> None:
    """List the OpenCL devices, their capabilities and clpool's verdict on each.

    A device not yet verified is verified first: a canary runs every kernel on it in a
    child process (once per driver and clpool version; the verdict is cached). The
    default device is marked *."""
    if not no_verify:
        for i, d in enumerate(discovery.cl_devices()):
            if verify.cached(d).status == verify.UNVERIFIED:
                click.echo(f"verifying device {i} ({d.name.strip()}) in a child process", err=True)
    found = discovery.devices(verified=not no_verify)
    if as_json:
        click.echo(json.dumps([d.as_dict() for d in found], indent=2))
        return
    if not found:
        click.echo("no OpenCL device found (pip install 'clpool[pocl]' gives a CPU device)")
        sys.exit(1)
    headers = ["#", "platform", "device", "type", "OpenCL", "driver", "CUs", "memory"]
    headers += ["fp16", "fp64", "verdict"]
    rows = [
        [f"{d.index}{'*' if d.default else ''}", d.platform, d.name, d.type, d.opencl_version]
        + [d.driver_version, d.compute_units, _gib(d.global_mem), _yes(d.fp16), _yes(d.fp64)]
        + [d.verdict]
        for d in found
    ]
    click.echo(_table(headers, rows))
    for d in found:
        if d.reason:
            click.echo(f"device {d.index} refused: {d.reason}")
    if not any(d.default for d in found):
        click.echo("no device is verified: clpool has no default device")


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


@main.command()
@click.option(
    "--device",
    "device_spec",
    help="Device index or name (default: CLPOOL_DEVICE, else the first GPU, else the first CPU).",
)
@click.option("--dtype", default="float32", show_default=True, help="float32, float16 or float64.")
def check(device_spec: str | None, dtype: str) -> None:
    """Run all seven ops on the device against the float64 reference.

    Exits 1 on any mismatch or a device clpool refuses, 2 for a device that does not
    exist or a dtype the device lacks."""
    import numpy as np

    from . import check as checker

    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise click.BadParameter(f"not a dtype: {dtype!r}", param_hint="--dtype") from None
    d = _device_or_exit(device_spec, "check")
    try:
        rows = checker.run(d, dt)
    except PoolError as e:
        click.echo(str(e), err=True)
        sys.exit(1 if isinstance(e, KernelError) else 2)
    click.echo(
        f"{d.platform.name.strip()} | {d.name.strip()}: {dt.name} against the float64 reference"
    )
    click.echo(_table(checker.HEADERS, checker.table_rows(rows)))
    failed = [r.op for r in rows if not r.passed]
    click.echo(f"FAILED: {', '.join(failed)}" if failed else "all seven ops pass")
    sys.exit(1 if failed else 0)


@main.command()
@click.option(
    "--device",
    "device_spec",
    help="Device index or name (default: CLPOOL_DEVICE, else the first GPU, else the first CPU).",
)
@click.option("--op", "op_names", multiple=True, help="Only this op (repeatable).")
@click.option("--shape", help="One input shape N,C,H,W instead of the default sweep.")
@click.option("--repeats", default=20, show_default=True, help="Timed runs per case.")
@click.option("--no-torch", is_flag=True, help="Do not time PyTorch beside clpool.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def bench(
    device_spec: str | None,
    op_names: tuple[str, ...],
    shape: str | None,
    repeats: int,
    no_torch: bool,
    as_json: bool,
) -> None:
    """Time each op (device time from OpenCL profiling events) against the copy bandwidth."""
    from . import bench as harness

    unknown = set(op_names) - set(harness.OPS)
    if unknown:
        raise click.BadParameter(f"unknown op {sorted(unknown)}; choose from {harness.OPS}")
    try:
        dims = tuple(int(v) for v in shape.split(",")) if shape else None
    except ValueError:
        dims = ()
    if dims is not None and (len(dims) != 4 or min(dims) < 1):
        raise click.BadParameter(f"--shape wants four positive sizes N,C,H,W, got {shape!r}")
    rt = discovery.runtime(_device_or_exit(device_spec, "bench"))
    cpu = not rt.device.type & cl.device_type.GPU
    cases = harness.default_cases(cpu, op_names or harness.OPS, dims)
    copy = harness.copy_bandwidth(rt, max(2**26, max(4 * math.prod(c.shape) for c in cases)))
    rows = []
    with click.progressbar(cases, label="bench", file=sys.stderr) as bar:
        for row in harness.run(rt, bar, repeats, with_torch=not no_torch):
            row["copy_fraction"] = row["gbps"] / copy
            rows.append(row)
    host = harness.host_overhead_us(rt)
    report = dict(
        device=rt.device.name.strip(),
        platform=rt.device.platform.name.strip(),
        date=time.strftime("%Y-%m-%d"),
        copy_gbps=copy,
        **host,
        rows=rows,
    )
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    click.echo(
        f"{report['platform']} | {report['device']}: copy bandwidth {copy:,.0f} GB/s "
        f"(read + write); warm call on a tiny array {host['host_call_us']:.1f} us wall "
        f"({host['bare_enqueue_us']:.1f} us to enqueue an empty kernel), "
        f"{host['host_call_kernel_us']:.1f} us on the device"
    )
    torch_where = rows[0].get("torch", "-") if rows else "-"
    table = [
        [
            r["op"],
            "x".join(map(str, r["shape"])),
            r["params"],
            f"{r['us']:.1f}",
            f"{r['gbps']:.0f}",
            f"{100 * r['copy_fraction']:.0f}%",
            f"{r['torch_us']:.1f}" if "torch_us" in r else "-",
            f"{r['speedup']:.2f}x" if "speedup" in r else "-",
        ]
        for r in rows
    ]
    click.echo(
        _table(
            [
                "op",
                "shape",
                "params",
                "us",
                "GB/s",
                "of copy",
                f"torch {torch_where} us",
                "speedup",
            ],
            table,
        )
    )


def _device_or_exit(spec: str | None, command: str) -> cl.Device:
    """The chosen device, or the one handler's message and exit 1 (refused) or 2 (no such
    device)."""
    try:
        with reporting(command):
            return discovery.select(spec)
    except PoolError as e:
        click.echo(str(e), err=True)
        sys.exit(1 if isinstance(e, KernelError) else 2)
