"""Ray Data's scheduling loop held back by an object store budget, with and without
`pipelines.budget.calm_when_held` (issue 80): the same pass in two fresh processes, side by side.

A 24-block pass (1 MiB a block) under a 4 MiB budget, read by a consumer that sleeps 0.15 s a
batch, as a trainer slower than the chain does; local Ray, 2 CPUs. Each side reports the loop's
steps and its process's CPU seconds over two passes (the executor runs in the consuming process).

    python bench/held_loop.py

Ends with `RESULT held_loop steps_ratio=<paced/plain> cpu_ratio=<paced/plain> goal=cpu_ratio<=0.5`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = 24


def side(paced: bool) -> dict:
    """One process: two held passes; their steps, CPU seconds, wall seconds and rows."""
    sys.path.insert(0, str(ROOT))
    import numpy as np
    import ray
    import ray.data
    from ray.data import ExecutionOptions, ExecutionResources

    from smlaunch._ray_compat import data_streaming_executor
    from smlaunch.pipelines.budget import calm_when_held

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200 << 20, log_to_driver=False)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    if paced:
        assert calm_when_held(), "this Ray's executor cannot be paced"
    executor = data_streaming_executor()
    inner, steps = executor._scheduling_loop_step, [0]

    def counted(self, topology):
        steps[0] += 1
        return inner(self, topology)

    executor._scheduling_loop_step = counted

    def widen(batch):
        return {"id": batch["id"], "pixels": np.zeros((len(batch["id"]), 1024), np.uint8)}

    ctx.execution_options = ExecutionOptions(resource_limits=ExecutionResources(object_store_memory=4 << 20))
    cpu, wall, rows = time.process_time(), time.monotonic(), 0
    for _ in range(2):
        ds = ray.data.range(BLOCKS * 1000, override_num_blocks=BLOCKS).map_batches(widen, batch_size=None)
        for batch in ds.iter_batches(batch_size=1000, prefetch_batches=0):
            rows += len(batch["id"])
            time.sleep(0.15)
    return {"steps": steps[0], "cpu_s": time.process_time() - cpu, "wall_s": time.monotonic() - wall, "rows": rows}


def main() -> int:
    runs = {}
    for name in ("plain", "paced"):
        out = subprocess.run(
            [sys.executable, __file__, "--side", name], capture_output=True, text=True, timeout=300, check=True
        ).stdout
        runs[name] = json.loads(out.strip().splitlines()[-1])
        print(name, runs[name])
    plain, paced = runs["plain"], runs["paced"]
    assert plain["rows"] == paced["rows"] == 2 * BLOCKS * 1000
    report_result(
        f"RESULT held_loop steps_ratio={paced['steps'] / plain['steps']:.3f} "
        f"cpu_ratio={paced['cpu_s'] / plain['cpu_s']:.3f} goal=cpu_ratio<=0.5"
    )
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--side":
        print(json.dumps(side(sys.argv[2] == "paced")))
        sys.exit(0)
    sys.exit(main())
