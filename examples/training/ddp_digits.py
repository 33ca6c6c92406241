"""An ordinary PyTorch DistributedDataParallel program: an MLP on the handwritten
digits that scikit-learn ships, trained data-parallel over gloo (CPU).

Nothing in it knows Meridian. Like any DDP script it reads the conventional
environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK), which
torchrun sets, and which Meridian sets for each member of a gang
(examples/training/ddp-digits.yaml; docs/training.md).

Rank 0 prints one JSON line: test accuracy, final training loss, and a checksum of
the parameters; every rank prints the same checksum when DDP kept them in step.
"""

import json
import os
import sys
import time

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> int:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    epochs = int(os.environ.get("EPOCHS", "40"))
    batch = int(os.environ.get("BATCH", "16"))

    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x / 16.0, dtype=torch.float32)
    y = torch.tensor(y, dtype=torch.long)
    # The same split on every rank: 360 test images, the rest for training, each
    # rank a disjoint share of those.
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    test, train = order[:360], order[360:]
    mine = train[rank::world]
    steps = (len(train) // world) // batch  # the same on every rank

    torch.manual_seed(0)  # the same initial model everywhere (DDP broadcasts rank 0's anyway)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    started = time.time()
    loss = torch.tensor(0.0)
    for epoch in range(epochs):
        shuffled = mine[torch.randperm(len(mine), generator=torch.Generator().manual_seed(epoch))]
        for s in range(steps):
            idx = shuffled[s * batch:(s + 1) * batch]
            opt.zero_grad()
            loss = loss_fn(ddp(x[idx]), y[idx])
            loss.backward()  # gradients all-reduced across the ranks here
            opt.step()
        if rank == 0:
            print(f"epoch {epoch + 1}/{epochs} loss {loss.item():.4f}", file=sys.stderr, flush=True)

    with torch.no_grad():
        accuracy = (model(x[test]).argmax(1) == y[test]).float().mean().item()
        checksum = sum(p.double().sum().item() for p in model.parameters())
    report = {
        "rank": rank,
        "world_size": world,
        "accuracy": round(accuracy, 4),
        "loss": round(loss.item(), 4),
        "checksum": f"{checksum:.10f}",
        "epochs": epochs,
        "steps_per_epoch": steps,
        "seconds": round(time.time() - started, 2),
        "site": os.environ.get("MERIDIAN_SITE", ""),
    }
    print(json.dumps(report), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
