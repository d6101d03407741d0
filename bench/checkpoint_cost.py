"""What a timed checkpoint costs (issue 41): the price of `trainer.checkpoint_every_s`.

Under a PID 1 that lets no SageMaker stop reach sm-launch (tini, a bash entry script), the last
timed checkpoint is all a stop leaves, so sm-launch writes one every 300 s by default
(`cluster.plan.UNSAFE_STOP_CHECKPOINT_S`). Training waits while rank 0 writes it. This times, for a
few timm models of growing size with AdamW's state after one step, side by side on the same disk:

- **torch.save**: the state dict saved with `torch.save`, the least any checkpoint costs;
- **ours**: what a checkpoint does here: `trainers.checkpoints.write_state` (`torch.save`, the
  SHA-256 and `meta.json` that make a half-copied checkpoint detectable) into a temporary
  directory, then the copy into the checkpoint directory that Ray Train's `report` makes.

and gives ours as a share of 300 s of training. A real run reports its own checkpoints' seconds
in its summary (`checkpoint_s`, `checkpoint_pct`).

    python bench/checkpoint_cost.py [--models resnet10t,resnet50,vit_base_patch16_224] [--dir /tmp] [--repeat 3]

Ends with `RESULT checkpoint_cost resnet50_s=<ours> pct_at_300s=<resnet50's share> ratio_vs_torch_save=<ours
over torch.save, resnet50> goal=pct_at_300s<=1`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
EVERY_S = 300.0


def state_of(name: str) -> dict:
    """The model's and AdamW's state after one step, as a checkpoint holds them."""
    import timm
    import torch

    model = timm.create_model(name, pretrained=False, num_classes=1000)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for p in model.parameters():  # a gradient is all AdamW needs to build its state; no forward pass
        p.grad = torch.zeros_like(p)
    optimizer.step()
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 1, "epoch": 1}


def best_of(repeat: int, run) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> int:
    import torch

    from smlaunch.trainers.checkpoints import write_state

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet10t,resnet50,vit_base_patch16_224")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="the disk checkpoints go to")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    rows = {}
    print(f"{'model':<24}{'state MB':>10}{'torch.save s':>14}{'ours s':>9}{'ratio':>7}{'% of 300 s':>12}")
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        root = Path(scratch)
        for name in args.models.split(","):
            state = state_of(name)

            def plain(state=state):
                torch.save(state, root / "plain.pt")

            def ours(state=state):
                staging, stored = root / "staging", root / "stored"
                shutil.rmtree(staging, ignore_errors=True)
                shutil.rmtree(stored, ignore_errors=True)
                staging.mkdir()
                write_state(str(staging), state)
                shutil.copytree(staging, stored)  # Ray Train's report copies the directory into storage

            plain_s, ours_s = best_of(args.repeat, plain), best_of(args.repeat, ours)
            size = (root / "plain.pt").stat().st_size / 2**20
            rows[name] = (plain_s, ours_s)
            print(
                f"{name:<24}{size:>10.0f}{plain_s:>14.3f}{ours_s:>9.3f}{ours_s / plain_s:>7.2f}"
                f"{100 * ours_s / EVERY_S:>12.2f}",
                flush=True,
            )
    key = "resnet50" if "resnet50" in rows else next(iter(rows))
    plain_s, ours_s = rows[key]
    report_result(
        f"RESULT checkpoint_cost {key}_s={ours_s:.3f} pct_at_300s={100 * ours_s / EVERY_S:.2f} "
        f"ratio_vs_torch_save={ours_s / plain_s:.2f} goal=pct_at_300s<=1"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
