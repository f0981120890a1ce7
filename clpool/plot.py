"""`clpool bench --plot`: the bench report drawn as GB/s per case, clpool beside PyTorch,
under the device's copy bandwidth (matplotlib, the extra "plot")."""

from __future__ import annotations

from typing import Any


def draw(report: dict[str, Any], path: str) -> None:
    """Write a PNG (or any format matplotlib knows by `path`'s suffix): one panel per op,
    a group of bars per shape: clpool wall, clpool kernel and PyTorch wall GB/s."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rows"]
    ops = list(dict.fromkeys(r["op"] for r in rows))
    fig, axes = plt.subplots(len(ops), 1, figsize=(9, 2.6 * len(ops)), squeeze=False)
    for ax, op in zip(axes[:, 0], ops, strict=True):
        mine = [r for r in rows if r["op"] == op]
        labels = [f"{'x'.join(map(str, r['shape']))}\n{r['params']}" for r in mine]
        bars = {
            "clpool wall": [r["wall_gbps"] for r in mine],
            "clpool kernel": [r["kernel_gbps"] for r in mine],
        }
        if all("torch_wall_gbps" in r for r in mine):
            bars[f"PyTorch {mine[0]['torch']} wall"] = [r["torch_wall_gbps"] for r in mine]
        width = 0.8 / len(bars)
        for i, (name, values) in enumerate(bars.items()):
            ax.bar([x + i * width for x in range(len(mine))], values, width, label=name)
        ax.axhline(report["copy_gbps"], color="black", linestyle="--", label="copy bandwidth")
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(mine))], labels, fontsize=7)
        ax.set_title(f"{op} ({mine[0]['dtype']})", fontsize=9)
        ax.set_ylabel("GB/s")
    axes[0, 0].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{report['platform']} | {report['device']}, {report['date']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
