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
