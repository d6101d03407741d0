"""Ray Data's budget from an execution's first step (`pipelines.budget`), on the real 3-node
cluster: the two read tasks of a short pass run at the same time on the two data hosts, where
Ray 2.60 alone runs them one after the other (its limits read zero for the first second)."""

import pytest


@pytest.mark.ray
def test_a_short_pass_runs_its_read_tasks_side_by_side(data_cluster):
    import ray.data
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    from smlaunch.pipelines.budget import budget_from_first_step

    assert budget_from_first_step(), "Ray Data's ResourceManager no longer has the method or interval it wraps"

    def timed_read():  # nested: pickled by value for the worker
        import os
        import time

        import pyarrow as pa

        start = time.time()
        time.sleep(0.5)
        yield pa.table({"start": [start], "end": [time.time()], "pid": [os.getpid()]})

    class TwoTasks(Datasource):
        def estimate_inmemory_data_size(self):
            return None

        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            meta = BlockMetadata(num_rows=1, size_bytes=None, exec_stats=None, input_files=None)
            return [ReadTask(timed_read, meta) for _ in range(2)]

    ctx = ray.data.DataContext.get_current()
    saved = ctx.execution_options.label_selector
    ctx.execution_options.label_selector = {"ray-subcluster": "data"}
    try:
        passes = []
        for _ in range(2):  # the first pass may create Ray Data's coordinator actor; the second is a warm one
            ds = ray.data.read_datasource(TwoTasks(), label_selector={"ray-subcluster": "data"}, override_num_blocks=2)
            passes.append(sorted(ds.take_all(), key=lambda row: row["start"]))
    finally:
        ctx.execution_options.label_selector = saved
    first, second = passes[1]
    assert first["pid"] != second["pid"]
    assert second["start"] < first["end"], f"the read tasks ran one after the other: {passes[1]}"


@pytest.mark.ray
def test_an_execution_its_budget_holds_back_waits_instead_of_spinning(data_cluster):
    """A slow consumer under a small object store budget: every row arrives, and the scheduling
    loop goes round a few times per block instead of thousands of times a second (Ray 2.60 alone:
    its `ray.wait` returns at once once the budget holds back outputs of finished tasks)."""
    import time

    import numpy as np
    import ray.data
    from ray.data import ExecutionOptions, ExecutionResources

    from smlaunch._ray_compat import data_streaming_executor
    from smlaunch.pipelines.budget import HELD_STEP_S, calm_when_held

    assert calm_when_held(), "Ray Data's StreamingExecutor no longer has the step or the counters paced"
    executor = data_streaming_executor()
    paced = executor._scheduling_loop_step
    steps = [0]

    def counted(self, topology):
        steps[0] += 1
        return paced(self, topology)

    def widen(batch):  # 1 MiB a block of 1,000 rows: four blocks fill the budget
        return {"id": batch["id"], "pixels": np.zeros((len(batch["id"]), 1024), np.uint8)}

    ctx = ray.data.DataContext.get_current()
    saved = ctx.execution_options
    ctx.execution_options = ExecutionOptions(resource_limits=ExecutionResources(object_store_memory=4 << 20))
    executor._scheduling_loop_step = counted
    blocks, rows = 24, 0
    try:
        start = time.monotonic()
        ds = ray.data.range(blocks * 1000, override_num_blocks=blocks).map_batches(widen, batch_size=None)
        for batch in ds.iter_batches(batch_size=1000, prefetch_batches=0):
            rows += len(batch["id"])
            time.sleep(0.15)  # a trainer slower than the chain: the budget fills and holds
        held_s = time.monotonic() - start
    finally:
        executor._scheduling_loop_step = paced
        ctx.execution_options = saved
    assert rows == blocks * 1000
    paced_at_most = held_s / HELD_STEP_S + 20 * blocks
    assert steps[0] < paced_at_most, f"{steps[0]} scheduling steps in {held_s:.1f} s: the loop spun"
