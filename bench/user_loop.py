"""Your own loop under sm-launch vs the same loop under a plain `TorchTrainer`, side by side.

One running Ray cluster, started as an operator would (`ray start`: a train-labelled head of 1 CPU,
a data-labelled worker of 2 CPUs, token authentication; bench/startup.py's `operator_cluster`). The
same loop (bench/user_loop_job.py: timm's resnet10t, SGD, a report per step) runs, taking turns,
`--rounds` times each, in a fresh process each time:

- **ours**: `sm-launch run CONFIG --address ...` with `trainer.loop: user_loop_job:train_func`, the
  channel an image folder of the digits (1,437 PNGs), the chain `decode_image` + `to_uint8_chw` on
  the data node (with a `center_crop` of 32, which the 32x32 images pass unchanged: sm-launch asks for
  one size);
- **plain**: the loop in a `TorchTrainer` on the same cluster, its dataset the same folder read by
  `ray.data.read_binary_files` and decoded by a `map_batches` pinned to the data node by label, as
  Ray's docs write it.

Each loop notes when each of its steps ended; from the process's start: the first step, and the
images/s over the steps after the first `WARM` (median of the rounds). Ends with
`RESULT user_loop throughput_ratio=<ours/plain> first_step_ratio=<ours/plain> goal=0.97`.

    python bench/user_loop.py [--rounds 2] [--steps 60]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]
WARM = 10
BATCH = 64


def write_folder(folder: Path) -> None:
    """The digits' train split as class folders of 32x32 PNGs (bench/ray_reference_job.py's rows)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from ray_reference_job import digits_png_rows

    for i, row in enumerate(digits_png_rows()):
        (folder / str(row["label"])).mkdir(parents=True, exist_ok=True)
        (folder / str(row["label"]) / f"{i:05d}.png").write_bytes(row["png"])


def plain_main(address: str, folder: str, steps: int) -> None:
    """The plain side, in its own process: the loop in a `TorchTrainer` on the running cluster."""
    import numpy as np
    import ray
    from PIL import Image
    from ray.data import ExecutionOptions
    from ray.train import DataConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    from user_loop_job import train_func

    data, train = {"ray-subcluster": "data"}, {"ray-subcluster": "train"}

    def decode(batch):
        images = [np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in batch["bytes"]]
        labels = [int(Path(p).parent.name) for p in batch["path"]]
        return {"image": np.stack(images).transpose(0, 3, 1, 2).copy(), "label": np.array(labels)}

    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    ds = ray.data.read_binary_files(folder, include_paths=True).map_batches(
        decode, batch_size=BATCH, label_selector=data
    )
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"steps": steps, "batch_size": BATCH},
        scaling_config=ScalingConfig(num_workers=1, label_selector=train),
        datasets={"train": ds},
        dataset_config=DataConfig(execution_options={"train": ExecutionOptions(label_selector=data)}),
    )
    print("RETURNED " + json.dumps(trainer.fit().return_value), flush=True)


def rates(returned: dict, started: float) -> dict:
    ends = returned["step_ends"]
    steady = ends[WARM:]
    waited = sum(returned["waits"][WARM + 1 : len(ends)])
    return {
        "first_step_s": round(ends[0] - started, 2),
        "images_per_s": round((len(steady) - 1) * returned["batch_size"] / (steady[-1] - steady[0]), 2),
        "data_wait_pct": round(100 * waited / (steady[-1] - steady[0]), 1),
        "torch_threads": returned["threads"],
    }


def run_ours(project: Path, address: str, env: dict, steps: int, n: int) -> dict:
    cfg = {
        "job": "user-loop-bench",
        "cluster": {
            "instance_groups": [
                {"name": "train_group", "instance_type": "ml.g5.xlarge", "instance_count": 1},
                {"name": "data_group", "instance_type": "ml.c5.xlarge", "instance_count": 1},
            ]
        },
        "channels": {"train": {"source": str(project / "digits"), "record_format": "image_folder"}},
        "pipeline": {
            "batch_size": BATCH,
            "ops": [{"op": "decode_image"}, {"op": "center_crop", "size": 32}, {"op": "to_uint8_chw"}],
        },
        "trainer": {
            "loop": "user_loop_job:train_func",
            "steps": steps,
            "log_every": 1000,
            "loop_config": {"steps": steps, "batch_size": BATCH},
            "resume": False,
        },
        "run": {"dir": str(project / "runs"), "name": f"ours-{n}"},
    }
    (project / "job.yaml").write_text(yaml.safe_dump(cfg))
    started = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "smlaunch", "run", "job.yaml", "--address", address],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise SystemExit(f"sm-launch failed ({done.returncode}):\n{done.stderr[-3000:]}")
    report = json.loads((project / "runs" / f"ours-{n}" / "output" / "data" / "report.json").read_text())
    return rates(report["loop"]["returned"], started)


def run_plain(project: Path, address: str, env: dict, steps: int) -> dict:
    started = time.time()
    code = f"import user_loop; user_loop.plain_main({address!r}, {str(project / 'digits')!r}, {steps})"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=project,
        env={**env, "PYTHONPATH": str(project)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise SystemExit(f"the plain TorchTrainer failed ({done.returncode}):\n{done.stderr[-3000:]}")
    returned = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RETURNED "))[9:])
    return rates(returned, started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "bench"))
    from startup import TOKEN, environment, operator_cluster

    with tempfile.TemporaryDirectory(prefix="smlaunch-user-loop-") as tmp:
        project = Path(tmp) / "project"
        project.mkdir()
        for name in ("user_loop_job.py", "user_loop.py"):
            (project / name).write_text((ROOT / "bench" / name).read_text())
        write_folder(project / "digits")
        env = {**environment(), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN}
        env.pop("PYTHONPATH", None)  # sm-launch finds the loop in the folder it runs in
        results = {"ours": [], "plain": []}
        with operator_cluster(Path(tmp)) as address:
            for n in range(args.rounds):
                results["plain"].append(run_plain(project, address, env, args.steps))
                results["ours"].append(run_ours(project, address, env, args.steps, n))
                print(f"round {n + 1}: plain {results['plain'][-1]}, ours {results['ours'][-1]}", flush=True)
    median = {
        side: {k: statistics.median(r[k] for r in rs) for k in ("first_step_s", "images_per_s")}
        for side, rs in results.items()
    }
    print(
        f"plain TorchTrainer: first step {median['plain']['first_step_s']:.1f} s, "
        f"{median['plain']['images_per_s']:.1f} images/s"
    )
    print(
        f"sm-launch trainer.loop: first step {median['ours']['first_step_s']:.1f} s, "
        f"{median['ours']['images_per_s']:.1f} images/s"
    )
    throughput = median["ours"]["images_per_s"] / median["plain"]["images_per_s"]
    first = median["ours"]["first_step_s"] / median["plain"]["first_step_s"]
    report_result(f"RESULT user_loop throughput_ratio={throughput:.3f} first_step_ratio={first:.3f} goal=0.97")
    return 0


if __name__ == "__main__":
    sys.exit(main())
