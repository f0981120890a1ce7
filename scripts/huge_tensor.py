"""Pool a tensor of more than 2^31 elements on one device and check every result.

Each forward op and max backward runs on the whole input, then again plane by plane
(each plane is under 2^31 elements, so those runs need no 64-bit offsets): the two must
agree bit for bit. With torch on a CUDA device beside it, the same ops run in PyTorch
and are compared too. Usage (the lent H200):

    CLPOOL_DEVICE=nvidia python3 scripts/huge_tensor.py [N C H W]
"""

from __future__ import annotations

import sys
import time

import numpy as np
import pyopencl.array as cla

import clpool
from clpool import discovery


def main() -> None:
    shape = tuple(int(v) for v in sys.argv[1:5]) or (1, 2, 40000, 30000)
    rt = discovery.runtime(discovery.select())
    print(f"device {rt.device.name}, input {shape} float32, {np.prod(shape):,} elements "
          f"({np.prod(shape) / 2**31:.2f} x 2^31)")
    rng = np.random.default_rng(0)
    host = rng.standard_normal(shape, dtype=np.float32)
    x = cla.to_device(rt.queue, host)
    window = dict(kernel_size=3, stride=2, padding=1)
    runs = {
        "max_pool2d": lambda t: clpool.max_pool2d(t, **window),
        "max_pool2d_with_indices": lambda t: clpool.max_pool2d_with_indices(t, **window),
        "avg_pool2d": lambda t: clpool.avg_pool2d(t, **window),
        "adaptive_avg_pool2d": lambda t: clpool.adaptive_avg_pool2d(t, (1000, 1000)),
    }
    results, failures = {}, 0
    for name, run in runs.items():
        t0 = time.perf_counter()
        whole = run(x)
        whole = [a.get() for a in whole] if isinstance(whole, tuple) else [whole.get()]
        seconds = time.perf_counter() - t0
        same = all(
            np.array_equal(w[:, c], p)
            for c in range(shape[1])
            for w, p in zip(whole, _per_plane(run, x, c), strict=True)
        )
        failures += not same
        results[name] = whole
        print(f"{name:34s} whole vs per plane: {'same' if same else 'DIFFERENT'} "
              f"({seconds:.1f} s)")
    out, idx = results["max_pool2d_with_indices"]
    grad = rng.standard_normal(out.shape, dtype=np.float32)
    g_dev, i_dev = cla.to_device(rt.queue, grad), cla.to_device(rt.queue, idx)
    whole = clpool.max_pool2d_with_indices_backward(g_dev, x, indices=i_dev, **window).get()
    same = all(
        np.array_equal(whole[:, c], clpool.max_pool2d_with_indices_backward(
            g_dev[:, c:c + 1].copy(), x[:, c:c + 1].copy(),
            indices=i_dev[:, c:c + 1].copy(), **window).get()[:, 0])
        for c in range(shape[1]))
    failures += not same
    print(f"{'max_pool2d_with_indices_backward':34s} whole vs per plane: "
          f"{'same' if same else 'DIFFERENT'}")
    failures += _against_torch(host, results, grad, whole, window)
    print("FAILED" if failures else "all results agree")
    sys.exit(1 if failures else 0)


def _per_plane(run, x: cla.Array, c: int) -> list[np.ndarray]:
    part = run(x[:, c:c + 1].copy())
    return [a.get()[:, 0] for a in (part if isinstance(part, tuple) else (part,))]


def _against_torch(host, results, grad, grad_x, window) -> int:
    try:
        import torch
        import torch.nn.functional as F  # noqa: N812
    except ImportError:
        print("torch not installed: no PyTorch comparison")
        return 0
    if not torch.cuda.is_available():
        print("torch sees no CUDA device: no PyTorch comparison")
        return 0
    t = torch.from_numpy(host).cuda()
    k, s, p = window["kernel_size"], window["stride"], window["padding"]
    out, idx = F.max_pool2d(t, k, s, p, return_indices=True)
    checks = {
        "max_pool2d": np.array_equal(results["max_pool2d"][0], out.cpu().numpy()),
        "max_pool2d_with_indices": np.array_equal(results["max_pool2d_with_indices"][1],
                                                  idx.cpu().numpy()),
        "avg_pool2d": np.allclose(results["avg_pool2d"][0],
                                  F.avg_pool2d(t, k, s, p).cpu().numpy(), rtol=1e-5, atol=1e-6),
        "adaptive_avg_pool2d": np.allclose(
            results["adaptive_avg_pool2d"][0],
            F.adaptive_avg_pool2d(t, (1000, 1000)).cpu().numpy(), rtol=1e-5, atol=1e-6),
    }
    want = torch.ops.aten.max_pool2d_with_indices_backward(
        torch.from_numpy(grad).cuda(), t, [k, k], [s, s], [p, p], [1, 1], False, idx)
    checks["max_pool2d_with_indices_backward"] = np.allclose(
        grad_x, want.cpu().numpy(), rtol=1e-5, atol=1e-6)
    for name, ok in checks.items():
        print(f"{name:34s} vs torch CUDA: {'same' if ok else 'DIFFERENT'}")
    return sum(not ok for ok in checks.values())


if __name__ == "__main__":
    main()
