"""A parallel map, a reduce and a GPU-or-CPU function on Meridian, as a Ray or Dask
user writes them (docs/python.md). On the local cluster of ./scripts/run.sh:

    PYTHONPATH=build/release/python /usr/bin/python3 examples/python/parallel.py
"""

import os

import numpy as np

import meridian

SAMPLES = 200_000


def darts(seed: int) -> int:
    """Darts of SAMPLES that land inside the quarter circle (a Monte Carlo pi)."""
    rng = np.random.default_rng(seed)
    x, y = rng.random(SAMPLES), rng.random(SAMPLES)
    return int(np.count_nonzero(x * x + y * y <= 1.0))


@meridian.remote(cpu=0.5)
def total(counts: list[int]) -> int:
    return sum(counts)


def matmul_trace(n: int, seed: int) -> tuple[str, float]:
    """trace(A @ A.T) of a random n x n matrix: on the task's GPU with PyTorch when
    the node has a real one, else with NumPy on the CPU."""
    rng = np.random.default_rng(seed)
    a = rng.random((n, n))
    if os.environ.get("CUDA_VISIBLE_DEVICES"):
        import torch

        t = torch.from_numpy(a).cuda()
        return f"GPU {torch.cuda.get_device_name()}", float(torch.trace(t @ t.T).item())
    device = os.environ.get("MERIDIAN_DEVICE_TYPE") or "none"
    return f"CPU (device {device}, emulated)", float(np.trace(a @ a.T))


def main() -> None:
    client = meridian.connect()
    nodes = client.nodes()
    print(f"connected to {client.address}: {len(nodes)} nodes at {len({n.site for n in nodes})} sites")

    # A parallel map: one future per seed, the calls grouped into tasks.
    counts = client.gather(client.map(darts, range(32)))
    # A reduce, as another task, fed the map's results.
    inside = total.remote(counts).result()
    print(f"pi is about {4 * inside / (32 * SAMPLES):.5f} ({inside} of {32 * SAMPLES} darts inside)")

    # A GPU-or-CPU function: asks for an accelerator when the cluster has one.
    kinds = sorted({d for n in nodes if n.state == "alive" for d in n.devices})
    fn = meridian.remote(matmul_trace)
    if kinds:
        fn = fn.options(accelerator=kinds[0])
    where, trace = fn.remote(256, 7).result()
    print(f"trace(A A^T) = {trace:.1f} on {where}")


if __name__ == "__main__":
    main()
