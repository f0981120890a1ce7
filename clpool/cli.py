"""The clpool command line: devices, check, bench."""

from __future__ import annotations

import json
import sys

import click

from . import discovery


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=True)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [line.format(*headers), line.format(*("-" * w for w in widths))]
    out += [line.format(*map(str, r)) for r in rows]
    return "\n".join(s.rstrip() for s in out)


@click.group()
@click.version_option(package_name="clpool")
def main() -> None:
    """clpool: PyTorch's 2-D pooling ops as OpenCL kernels, on any OpenCL device."""


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def devices(as_json: bool) -> None:
    """List the OpenCL devices and their capabilities."""
    found = discovery.devices()
    if as_json:
        click.echo(json.dumps([d.as_dict() for d in found], indent=2))
        return
    if not found:
        click.echo("no OpenCL device found (pip install 'clpool[pocl]' gives a CPU device)")
        sys.exit(1)
    rows = [[d.index, d.platform, d.name, d.type, d.opencl_version, d.compute_units,
             _gib(d.global_mem), "yes" if d.fp16 else "no", "yes" if d.fp64 else "no"]
            for d in found]
    click.echo(_table(["#", "platform", "device", "type", "OpenCL", "CUs", "memory", "fp16",
                       "fp64"], rows))


@main.command()
@click.option("--device", "device_spec", help="Device index or name (default: CLPOOL_DEVICE, "
                                               "else the first GPU, else the first CPU).")
@click.option("--dtype", default="float32", show_default=True,
              help="float32, float16 or float64.")
def check(device_spec: str | None, dtype: str) -> None:
    """Run all seven ops on the device against the float64 reference.

    Exits 1 on any mismatch, 2 when the ops refuse the device or dtype."""
    import numpy as np

    from . import check as checker
    from .errors import PoolError

    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise click.BadParameter(f"not a dtype: {dtype!r}", param_hint="--dtype") from None
    try:
        rows = checker.run(device_spec, dt)
    except PoolError as e:
        click.echo(str(e), err=True)
        sys.exit(2)
    d = discovery.select(device_spec)
    click.echo(f"{d.platform.name.strip()} | {d.name.strip()}: {dt.name} against the float64 "
               "reference")
    click.echo(_table(checker.HEADERS, checker.table_rows(rows)))
    failed = [r.op for r in rows if not r.passed]
    click.echo(f"FAILED: {', '.join(failed)}" if failed else "all seven ops pass")
    sys.exit(1 if failed else 0)
