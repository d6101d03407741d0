"""What `trainers.user_loop` does around your own loop without a cluster: the batches it hands the
loop, the step records it makes of its reports, the rows by host, and the one line an error becomes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from smlaunch.trainers.user_loop import Meter, _strip_dict, _strip_table, error_line, merge_rank_summaries


class _EventSender:
    def __init__(self):
        self.sent = []

    def put(self, kind, **fields):
        self.sent.append((kind, fields))


def test_batches_lose_the_chain_s_columns_and_their_hosts_are_counted():
    meter = Meter(0, 2, ("algo-1", "algo-2", "algo-3"), _EventSender())
    table = pa.table(
        {
            "image": [b"a", b"b", b"c"],
            "label": [1, 2, 3],
            "id": [7, 8, 9],
            "pos": [0, 1, 2],
            "seek": [0, 0, 0],
            "host": np.array([1, 2, 2], dtype=np.int16),
            "prep_s": [0.1] * 3,
        }
    )
    assert _strip_table(table, meter).column_names == ["image", "label"]
    assert _strip_dict({"x": np.zeros(2), "host": np.array([1, 3]), "id": np.arange(2)}, meter).keys() == {"x"}
    summary = meter.rank_summary()  # host 3 is past the plan's hosts: "unknown"
    assert summary["host_rows"] == {"algo-1": 0, "algo-2": 2, "algo-3": 2, "unknown": 1}
    merged = merge_rank_summaries([summary, {"host_rows": {"algo-2": 5, "algo-3": 0}}])
    assert merged == {"algo-2": 7, "algo-3": 2, "unknown": 1}


def test_reports_become_step_records_with_rows_and_waits_measured_at_the_shard():
    console = _EventSender()
    meter = Meter(0, 2, ("algo-1",), console)
    batches = list(meter.timed(iter([{"image": np.zeros((4, 3))}, {"image": np.zeros((4, 3))}]), "train"))
    assert len(batches) == 2 and meter.rows == {"train": 8} and meter.epochs == 1
    meter.on_report({"step": 7, "loss": 0.5, "acc": 0.25, "note": "text"}, checkpoint=None)
    meter.on_report({"loss": 0.4}, checkpoint="a checkpoint")  # no step key: the loop's own step is kept
    (_, first), (_, second) = console.sent
    assert first["step"] == 7 and first["metrics"] == {"loss": 0.5, "acc": 0.25} and first["loop"]
    assert first["loss"] == 0.5 and first["images_per_s"] > 0 and first["epoch"] == 1
    assert second["step"] == 2 and second["images_per_s"] == 0.0  # the report count: no rows since the first
    assert (meter.reports, meter.checkpoints, meter.steps.count) == (2, 1, 2)
    other = Meter(1, 2, ("algo-1",), _EventSender())  # rank 1 counts reports, posts nothing
    other.on_report({"step": 3}, None)
    assert other.step == 3 and not other.console.sent


def test_an_error_in_the_loop_is_one_line_naming_the_rank_function_and_the_user_s_frame(tmp_path, monkeypatch):
    monkeypatch.setenv("SM_LAUNCH_CODE_DIR", str(tmp_path))
    (tmp_path / "mine.py").write_text("def train(config):\n    helper()\n\ndef helper():\n    raise KeyError('lr')\n")
    import importlib.util

    spec = importlib.util.spec_from_file_location("mine", tmp_path / "mine.py")
    mine = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mine)
    try:
        mine.train({})
    except KeyError as exc:
        line = error_line(exc, 1, "mine:train")
    assert line == "trainer.loop mine:train failed on rank 1 at mine.py:5 in helper: KeyError: 'lr'"


def test_the_loop_s_frame_is_found_in_the_shipped_copy_it_was_imported_from(tmp_path, monkeypatch):
    """On a SageMaker host or a cluster the loop's module is the job's shipped copy, imported from a
    folder that is not the one sm-launch runs in: its frames are still the loop's."""
    import importlib.util
    import sys

    monkeypatch.setenv("SM_LAUNCH_CODE_DIR", str(tmp_path / "where-sm-launch-runs"))
    shipped = tmp_path / "opt_ml_code" / "user_code" / "team"
    shipped.mkdir(parents=True)
    (shipped / "__init__.py").write_text("")
    (shipped / "loops.py").write_text("def train(config):\n    raise ValueError('no data')\n")

    def failed_line(name: str, path) -> str:  # the module imported from the shipped copy, its loop run
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, name, module)
        spec.loader.exec_module(module)
        try:
            module.train({})
        except ValueError as exc:
            return error_line(exc, 0, f"{name}:train")

    line = failed_line("team.loops", shipped / "loops.py")
    assert line == "trainer.loop team.loops:train failed on rank 0 at team/loops.py:2 in train: ValueError: no data"
    # a loop in a package's __init__.py: the folder is still the one above the package
    (shipped / "__init__.py").write_text("def train(config):\n    raise ValueError('empty')\n")
    line = failed_line("team", shipped / "__init__.py")
    assert line == "trainer.loop team:train failed on rank 0 at team/__init__.py:2 in train: ValueError: empty"


def test_a_loop_that_never_reports_is_still_timed_as_one_record():
    console = _EventSender()
    meter = Meter(0, 1, ("algo-1",), console)
    list(meter.timed(iter([{"x": np.zeros(5)}]), "train"))
    meter.close()
    ((_, record),) = console.sent
    assert record["step"] == 1 and record["images_per_s"] > 0 and meter.reports == 0
