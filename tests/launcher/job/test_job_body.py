"""`run_job`, the body every path runs: what it does around a path's cluster, with fakes for the
cluster (a context manager that records what it sees) and for the training (a constructed report).

The paths' own clusters are tested where they are (`tests/launcher/local`, `.../sagemaker`,
`.../attached`); this fixes the order and the timings they all get."""

import contextlib
import json
import time
from pathlib import Path

import pytest

from smlaunch.launcher.job import run as body
from smlaunch.launcher.job.run import ClusterUp, run_job
from smlaunch.launcher.job.stopping import StopRequest
from support.constructed_runs import constructed_report


class RecordingStop(StopRequest):
    def __init__(self, events):
        super().__init__()
        self.events = events

    def install(self, signals=()):
        self.events.append("stop installed")
        return self


@pytest.fixture
def fake_training(configs, tmp_path, monkeypatch):
    """`train_on_cluster` replaced: records its arguments, returns a constructed run's report."""
    seen = {}
    report, plan = constructed_report(configs, tmp_path, compute_s=0.1, wait_s=0.0, chain_s_per_row=0.001, steps=4)

    def train(cfg, plan, resume_from, timings, stop, listed, marks, elastic=None, tracker=None):
        seen.update(
            plan=plan,
            timings=dict(timings),
            stop=stop,
            listed=listed,
            resolved=(Path(plan.run_dir) / "resolved_config.yaml").exists(),
        )
        seen.setdefault("events", []).append("trained")
        if seen.get("fail"):
            raise RuntimeError("a rank failed")
        marks.update(listed=time.time(), first_step=time.time())  # as the listing and rank 0 give them
        return {**report, "summary": dict(report["summary"])}

    monkeypatch.setattr(body, "train_on_cluster", train)
    return seen, plan


def cluster(plan, events, listed=None):
    @contextlib.contextmanager
    def up():
        events.append("cluster up")
        handed = ClusterUp(plan, listed)
        try:
            yield handed
        except BaseException as exc:
            events.append(f"cluster down after {type(exc).__name__}")
            raise
        events.append(f"cluster down with report of {handed.report['summary']['steps']} steps")
        # report.json is on disk when the cluster goes down; its plots are drawn meanwhile (`Rendering`)
        written = Path(handed.report["path"])
        assert written.exists() and handed.rendering is not None and handed.rendering.path == written

    return up()


def test_the_body_installs_the_stop_once_the_cluster_is_up_and_hands_the_report_back_before_teardown(
    fake_training, tmp_path
):
    seen, plan = fake_training
    from smlaunch.config import load_config

    cfg = load_config(Path(__file__).resolve().parents[3] / "configs" / "tiny.yaml", [f"run.dir={tmp_path}"])
    events = seen.setdefault("events", [])
    stop = RecordingStop(events)
    report = run_job(cfg, cluster(plan, events, listed="listing-future"), stop)

    assert events == ["cluster up", "stop installed", "trained", "cluster down with report of 4 steps"]
    assert seen["plan"] is plan and seen["stop"] is stop and seen["listed"] == "listing-future"
    assert seen["resolved"], "the resolved config is written into the final plan's run directory before training"
    assert set(seen["timings"]) == {"cluster_start_s"}
    summary = report["summary"]
    assert summary["wall_s"] >= seen["timings"]["cluster_start_s"] >= 0
    path = Path(report["path"])
    assert path == Path(plan.head_host.opt_ml) / "output" / "data" / "report.json"
    written = json.loads(path.read_text())
    assert written["summary"]["wall_s"] == summary["wall_s"], "the report on disk carries the run's wall time"
    assert "path" not in written
    # The phases, seconds after the command (this process) started, in the order the run passed them;
    # the report's own writing and the teardown are added to report.json afterwards.
    phases = summary["phases_s"]
    assert list(phases) == ["cluster_up", "listed", "first_step", "report", "teardown"]
    assert list(phases.values()) == sorted(phases.values()) and phases["cluster_up"] > 0
    assert written["summary"]["phases_s"] == phases
    # ... counted from this process's start, which the summary gives as a Unix time (a bench that
    # starts the command itself, e.g. `sm-launch simulate`'s head host, measures its exit from it)
    import psutil

    assert summary["command_started_at"] == round(psutil.Process().create_time(), 3) < time.time()
    # ... and on disk by the time the body returns
    assert (path.parent / "summary.md").exists() and (path.parent / "throughput.png").stat().st_size > 0


def test_a_failed_training_reaches_the_paths_teardown_as_its_error(fake_training, tmp_path):
    seen, plan = fake_training
    from smlaunch.config import load_config

    cfg = load_config(Path(__file__).resolve().parents[3] / "configs" / "tiny.yaml", [f"run.dir={tmp_path}"])
    seen["fail"] = True
    events = seen.setdefault("events", [])
    with pytest.raises(RuntimeError, match="a rank failed"):
        run_job(cfg, cluster(plan, events), None)
    assert events == ["cluster up", "trained", "cluster down after RuntimeError"]
    assert not list(tmp_path.rglob("report.json"))


def test_every_path_runs_the_body_and_keeps_only_its_cluster():
    """The local run, a SageMaker head and a running cluster each hand `run_job` their context manager;
    none of them trains, times or rewrites the report itself."""
    import inspect

    from smlaunch.launcher.attached import run as attached
    from smlaunch.launcher.local import run as local
    from smlaunch.launcher.sagemaker import run as sagemaker

    for module, cm in ((local, "local_cluster"), (attached, "attached_cluster"), (sagemaker, "head_cluster")):
        source = inspect.getsource(module)
        assert "run_job(" in source and f"def {cm}(" in source, module.__name__
        for own in ("train_on_cluster(", "forward_stop_to_trainer(", "wall_s", "cluster_start_s", "write_report("):
            assert own not in source, f"{module.__name__} does {own} itself"
