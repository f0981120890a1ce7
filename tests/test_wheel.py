"""The wheel: it ships the kernel sources inside the package, and an installed copy finds
them and runs an op with no source checkout in sight."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path

    import numpy as np

    import clpool
    from clpool import discovery, programs

    site = Path(sys.argv[1]).resolve()
    package = Path(clpool.__file__).resolve().parent
    folder = programs.kernel_dir().resolve()
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    out = clpool.max_pool2d(x, 2)
    expected = x.reshape(2, 3, 4, 2, 4, 2).max(axis=(3, 5))
    out3, idx = clpool.max_pool2d_with_indices(x[0], 3, stride=2, padding=1)
    print(json.dumps({
        "file": str(Path(clpool.__file__).resolve()),
        "package": str(package),
        "kernel_dir": str(folder),
        "under_site": package.is_relative_to(site),
        "kernels_in_package": folder.is_relative_to(package),
        "sources": sorted(p.name for p in folder.iterdir()),
        "device": discovery.select().name.strip(),
        "env_device": os.environ.get("CLPOOL_DEVICE"),
        "shape": list(out.shape),
        "equal": bool(np.array_equal(out, expected)),
        "shape3": list(out3.shape),
        "idx_dtype": str(idx.dtype),
    }))
""")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
        cwd=dist, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    wheels = list(dist.glob("clpool-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_ships_every_kernel_source_inside_the_package(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {p.name for p in (ROOT / "kernels_cl").iterdir() if p.suffix in {".cl", ".h"}}
    assert sources
    for name in sources:
        assert f"clpool/kernels_cl/{name}" in names, sorted(names)
    for module in ("__init__.py", "__main__.py", "cli.py", "discovery.py", "errors.py",
                   "ops.py", "programs.py"):
        assert f"clpool/{module}" in names
    assert "clpool/py.typed" in names  # type hints for users' checkers
    assert "clpool/types.py" in names  # the ops' argument types (Size, Tensor)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), sorted(names)
    assert not any(n.startswith(("tests/", "kernels_cl/")) for n in names), sorted(names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "clpool = clpool.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    assert "Project-URL: Source, https://github.com/clpool/clpool\n" in text, text
    kept = (ROOT / "clpool" / "_version.py").read_text()  # the version's one source
    version = re.search(r'^__version__ = "(.+)"$', kept, re.M)[1]
    assert f"\nVersion: {version}\n" in text, text


def test_installed_wheel_finds_its_kernels_and_runs(wheel, device, tmp_path):
    site = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site),
         str(wheel)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    assert (site / "clpool" / "kernels_cl" / "clpool.h").is_file()

    work = tmp_path / "elsewhere"  # outside the source tree
    work.mkdir()
    assert not work.resolve().is_relative_to(ROOT)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(site)
    env["CLPOOL_DEVICE"] = os.environ["CLPOOL_DEVICE"]  # the suite's device
    env.pop("PYTHONSAFEPATH", None)
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(site)], cwd=work, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["under_site"], got["file"]
    assert got["kernels_in_package"], got["kernel_dir"]
    assert not Path(got["kernel_dir"]).is_relative_to(ROOT)
    assert Path(got["kernel_dir"]) == site.resolve() / "clpool" / "kernels_cl"
    assert "clpool.h" in got["sources"] and "max_pool.cl" in got["sources"]
    assert got["env_device"] == os.environ["CLPOOL_DEVICE"]
    assert got["device"] == device.name.strip()
    assert got["shape"] == [2, 3, 4, 4] and got["equal"]
    assert got["shape3"] == [3, 4, 4] and got["idx_dtype"] == "int64"

    cli = subprocess.run([sys.executable, "-m", "clpool", "devices", "--json"], cwd=work,
                         env=env, capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    assert device.name.strip() in [d["name"] for d in json.loads(cli.stdout)]
