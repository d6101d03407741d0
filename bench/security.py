"""What issue 79's guards cost: checkpoints read as data, masks checked as decoded, the code folder's walk.

Three parts, each timed side by side in one process, in alternating rounds (the median of each side):

- **checkpoint**: resnet50 with AdamW's state after one step, plus a Pipe epoch's consumed ids at
  ImageNet size (1.28M int64 ids), as a checkpoint holds them. Written as before (`torch.save` of the
  dict) and as now (`checkpoint_data`, which walks the tree and turns NumPy into tensors, then
  `torch.save`); read as before (`torch.load(weights_only=False)`) and as now (`weights_only=True`).
  `write_ratio` and `load_ratio` are now over before; `walk_ms` is `checkpoint_data`'s own time, which
  the write ratio's disk noise (a few percent from run to run) can hide.
- **masks**: a segmentation sample, a 512 x 512 JPEG image and its PNG mask of 21 classes, decoded
  (PIL, as `decode_image` falls back to it) with and without `check_mask_values` on the mask;
  `mask_check_pct` is the check's share of the sample's decode.
- **code folder**: `user_code.shipment` (one walk: credentials by name, `.smlaunchignore`, the
  limits) over a project of 200 modules beside an ImageNet-sized data folder of 1,281,167 empty files:
  listed in `.smlaunchignore` (`ignored_s`: the walk never enters it), and not (`refused_s`: the walk
  stops at `CODE_LIMIT_FILES` with one line). Before the file limit, the walk went through every file
  (`unlimited_walk_s`, the same walk with the limits lifted).

    python bench/security.py [--rounds 9] [--files 1281167] [--scratch /tmp]

Ends with `RESULT security write_ratio=<...> walk_ms=<...> load_ratio=<...> mask_check_pct=<...> ignored_s=<...>
refused_s=<...> unlimited_walk_s=<...> goal=ratios<=1.05,pct<=1,s<=1`.

Nothing here grows with samples or ranks except the consumed ids (a Pipe channel's epoch: 8 bytes an
id, 800 MB at 100M samples, converted without a copy by `torch.from_numpy`); the walk is bounded by
the folder's limits, whatever the data beside it.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
IMAGENET_FILES = 1_281_167
CHECKPOINT: dict[str, float] = {}
"""What `checkpoint_ratios` measured beside its ratios (`walk_ms`)."""


def checkpoint_state() -> dict:
    import numpy as np
    import timm
    import torch

    model = timm.create_model("resnet50", pretrained=False, num_classes=1000)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    ids = np.random.default_rng(0).permutation(IMAGENET_FILES).astype(np.int64)
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 1, "epoch": 1, "ids": ids}


def alternate(rounds: int, before, now) -> tuple[float, float]:
    """Median seconds of `before()` and `now()`, run in ABBA order."""
    times: dict[str, list[float]] = {"before": [], "now": []}
    for i in range(rounds):
        for side in ("before", "now") if i % 2 == 0 else ("now", "before"):
            started = time.perf_counter()
            (before if side == "before" else now)()
            times[side].append(time.perf_counter() - started)
    return statistics.median(times["before"]), statistics.median(times["now"])


def checkpoint_ratios(rounds: int, scratch: Path) -> tuple[float, float]:
    import torch

    from smlaunch.trainers.checkpoints import checkpoint_data

    state = checkpoint_state()
    plain, data = scratch / "plain.pt", scratch / "data.pt"
    save_before, save_now = alternate(
        rounds, lambda: torch.save(state, plain), lambda: torch.save(checkpoint_data(state), data)
    )
    load_before, load_now = alternate(
        rounds,
        lambda: torch.load(plain, map_location="cpu", weights_only=False),
        lambda: torch.load(data, map_location="cpu", weights_only=True),
    )
    walks = []
    for _ in range(rounds):  # the walk alone: what checkpoint_data adds to every write, without the disk's noise
        started = time.perf_counter()
        checkpoint_data(state)
        walks.append(time.perf_counter() - started)
    CHECKPOINT["walk_ms"] = statistics.median(walks) * 1e3
    size = data.stat().st_size / 2**20
    print(f"checkpoint ({size:.0f} MiB): save {save_before:.3f} s -> {save_now:.3f} s, ", end="")
    print(f"load {load_before:.3f} s -> {load_now:.3f} s")
    return save_now / save_before, load_now / load_before


def mask_check_pct(rounds: int) -> float:
    """The check's share of a segmentation sample's decode: its 512 x 512 JPEG image and PNG mask."""
    import numpy as np
    from PIL import Image

    from smlaunch.pipelines.ops.masks import check_mask_values

    rng = np.random.default_rng(0)
    mask = np.repeat(np.repeat(rng.integers(0, 21, (64, 64), dtype=np.uint8), 8, 0), 8, 1)  # regions, as masks are
    image = np.clip(mask[:, :, None] * 12 + rng.integers(0, 40, (512, 512, 3)), 0, 255).astype(np.uint8)
    encoded = []
    for array, mode, kind in ((image, "RGB", "JPEG"), (mask, "L", "PNG")):
        buffer = io.BytesIO()
        Image.fromarray(array, mode=mode).save(buffer, format=kind)
        encoded.append(buffer.getvalue())

    def decode():
        pixels = np.asarray(Image.open(io.BytesIO(encoded[0])).convert("RGB"))
        return pixels, np.asarray(Image.open(io.BytesIO(encoded[1])).convert("L"))[:, :, None]

    def decode_and_check():
        _, decoded = decode()
        check_mask_values([decoded], "mask", 21)

    batch = 64
    before, now = alternate(
        rounds, lambda: [decode() for _ in range(batch)], lambda: [decode_and_check() for _ in range(batch)]
    )
    print(
        f"a sample: image and mask decoded in {before / batch * 1e3:.2f} ms, {now / batch * 1e3:.2f} ms with the check"
    )
    return max(0.0, (now - before) / before * 100)


def folder_walk(scratch: Path, files: int) -> tuple[float, float, float]:
    from smlaunch.errors import ConfigError
    from smlaunch.user_code import shipment

    project = scratch / "project"
    for i in range(200):
        package = project / f"pkg{i // 20}"
        package.mkdir(parents=True, exist_ok=True)
        (package / f"module{i}.py").write_text("def f():\n    return 1\n")
    (project / ".env").write_text("HF_TOKEN=x\n")
    data = project / "data"
    started = time.perf_counter()
    per_folder = 1000
    for start in range(0, files, per_folder):
        folder = data / f"{start // per_folder:05d}"
        folder.mkdir(parents=True)
        for i in range(start, min(files, start + per_folder)):
            os.close(os.open(folder / f"{i:08d}.jpg", os.O_CREAT | os.O_WRONLY, 0o644))
    print(f"code folder: 200 modules beside {files:,} empty files (made in {time.perf_counter() - started:.0f} s)")
    (project / ".smlaunchignore").write_text("data/\n")
    started = time.perf_counter()
    shipped = shipment(str(project))
    ignored = time.perf_counter() - started
    assert len(shipped.files) == 201 and shipped.secrets == [".env"], (len(shipped.files), shipped.secrets)
    (project / ".smlaunchignore").unlink()
    started = time.perf_counter()
    try:
        shipment(str(project))
        raise AssertionError("a folder of a million files shipped")
    except ConfigError as exc:
        refused = time.perf_counter() - started
        print(f"  ignored: {ignored:.3f} s; not ignored: refused in {refused:.3f} s ({str(exc)[:120]}...)")
    started = time.perf_counter()
    shipment(str(project), limit=1 << 40, files_limit=1 << 40)  # the walk before the file limit: every file
    every = time.perf_counter() - started
    print(f"  without the file limit the walk visits every file: {every:.1f} s")
    return ignored, refused, every


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--files", type=int, default=IMAGENET_FILES)
    parser.add_argument("--scratch", default=tempfile.gettempdir())
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.scratch, prefix="bench-security-") as tmp:
        write_ratio, load_ratio = checkpoint_ratios(args.rounds, Path(tmp))
        pct = mask_check_pct(args.rounds)
        ignored, refused, every = folder_walk(Path(tmp), args.files)
    report_result(
        f"RESULT security write_ratio={write_ratio:.3f} walk_ms={CHECKPOINT['walk_ms']:.2f} "
        f"load_ratio={load_ratio:.3f} mask_check_pct={pct:.2f} "
        f"ignored_s={ignored:.3f} refused_s={refused:.3f} unlimited_walk_s={every:.1f} goal=ratios<=1.05,pct<=1,s<=1"
    )


if __name__ == "__main__":
    main()
