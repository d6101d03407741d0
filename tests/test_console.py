"""The console: one logging switch (-q, default, -v), plain progress lines off a terminal, and the
trainer's progress and metric lines drawn on the launcher from the workers' events."""

import logging
import re

import pytest

from smlaunch import console
from smlaunch.launcher.job.train_progress import TrainProgress

log = logging.getLogger("smlaunch")


@pytest.fixture(autouse=True)
def default_console():
    console.setup(0)
    yield
    console.setup(0)


def _record(step, epoch=1, loss=1.0):
    return {
        "kind": "step",
        "step": step,
        "epoch": epoch,
        "loss": loss,
        "step_time_s": 0.1,
        "data_wait_s": 0.02,
        "images_per_s": 320.0,
        "t": 0.0,
    }


def test_levels_go_where_a_person_and_cloudwatch_expect(capsys):
    log.info("plain line")
    log.warning("something to look at")
    log.error("bad thing\nwith a second line")
    log.debug("only with -v")
    out, err = capsys.readouterr()
    assert out == "plain line\nWARNING: something to look at\n"
    assert err == "sm-launch: error: bad thing with a second line\n"  # errors are one line


def test_quiet_prints_errors_and_results_only(capsys):
    console.setup(-1)
    log.info("chatter")
    log.warning("a warning")
    log.log(console.RESULT, "report: here")
    log.error("broken")
    with console.Progress("work", total=10) as bar:
        bar.update(10)
        bar.tick()
    out, err = capsys.readouterr()
    assert out == "report: here\n" and err == "sm-launch: error: broken\n"


def test_verbose_shows_debug_lines(capsys):
    console.setup(1)
    log.debug("detail")
    assert capsys.readouterr().out == "debug: smlaunch: detail\n"


def test_off_a_terminal_progress_is_a_plain_periodic_line_without_escape_codes(capsys, monkeypatch):
    monkeypatch.setattr(console, "PLAIN_EVERY_S", 0.0)
    with console.Progress("copy", total=4, unit="file") as bar:
        bar.describe("12 MB/s")
        bar.update(1)
        bar.update(3)
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("copy: 1/4 files (25 %), 12 MB/s, elapsed 0 s, ETA ")
    assert "copy: 4/4 files (100 %)" in out and "\x1b" not in out and "\r" not in out


def test_the_log_file_gets_everything(tmp_path, capsys):
    console.setup(-1)
    path = console.log_to_file(tmp_path / "logs" / "sm-launch.log")
    log.debug("deep detail")
    log.info("a line the console hides")
    console.close_file()
    text = path.read_text()
    assert "deep detail" in text and "a line the console hides" in text and capsys.readouterr().out == ""


class _Board:
    """The relay's remote interface as the progress thread calls it, without Ray."""

    def __init__(self, events):
        self.events = list(events)

    @property
    def drain(self):
        relay = self

        class _Remote:
            @staticmethod
            def remote():
                out, relay.events = relay.events, []
                return out

        return _Remote


def test_train_progress_prints_metric_lines_every_log_every_and_validation(monkeypatch, capsys):
    import ray

    monkeypatch.setattr(ray, "get", lambda value, timeout=None: value)
    events = [_record(n) for n in range(1, 7)] + [
        {"kind": "validation", "step": 6, "epoch": 1, "accuracy": 0.5, "loss": 1.25},
        {"kind": "resumed", "step": 4, "text": "resumed from the last checkpoint of this run at step 4"},
        _record(5),
        _record(6),
        {"kind": "warning", "text": "channel 'train': skipped a corrupt record"},
    ]
    with TrainProgress(_Board(events), total_steps=6, initial_step=0, log_every=3) as progress:
        pass
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if not line.startswith("train:")]
    assert lines == [
        "step=1 loss=1.0000 images_per_sec=320.0 data_wait_pct=20.0",
        "step=3 loss=1.0000 images_per_sec=320.0 data_wait_pct=20.0",
        "step=6 loss=1.0000 images_per_sec=320.0 data_wait_pct=20.0",
        "validation step=6 epoch=1 accuracy=0.5000 loss=1.2500",
        "resumed from the last checkpoint of this run at step 4",
        "step=6 loss=1.0000 images_per_sec=320.0 data_wait_pct=20.0",
        "WARNING: channel 'train': skipped a corrupt record",
    ]
    assert progress.bar.n == 6


def test_raylet_messages_go_to_the_log_not_stdout(capsys, caplog, monkeypatch):
    import ray._private.worker as ray_worker

    monkeypatch.setattr(ray_worker, "print_to_stdstream", ray_worker.print_to_stdstream)  # restored afterwards
    console.quiet_ray()
    with caplog.at_level(logging.INFO, logger="ray.raylet_messages"):
        ray_worker.print_to_stdstream(
            {"lines": ["WARNING: 4 PYTHON worker processes have been started"], "pid": "raylet", "is_err": False},
            ignore_prefix=False,
        )
    assert capsys.readouterr().out == ""
    assert any(re.search(r"\(raylet\) WARNING: 4 PYTHON worker", r.getMessage()) for r in caplog.records)


def test_console_lines_outlive_the_pipes_reader_and_the_log_file_keeps_them_all(tmp_path):
    """The training toolkit pipes both streams to itself (capture_error) and dies on a stop: every
    line after that still goes somewhere (here /dev/null; on SageMaker the container's output), none
    raises or prints a logging error, the log file has them all, and the process exits 0 (a failed
    flush at exit would make it 120)."""
    import subprocess
    import sys

    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"""
import logging, sys, time
from smlaunch import console
console.setup()
console.log_to_file({str(tmp_path / "run.log")!r})
log = logging.getLogger("smlaunch")
log.info("first")
sys.stdin.readline()  # the parent closed the pipes' read ends
for i in range(200):
    log.info(f"after the reader went {{i}}")
    log.error(f"an error line {{i}}")
print("a print too", flush=True)
""",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip().endswith("first")
    child.stdout.close()
    child.stderr.close()
    child.stdin.write("go\n")
    child.stdin.flush()
    assert child.wait(60) == 0
    text = (tmp_path / "run.log").read_text()
    assert "after the reader went 199" in text and "an error line 199" in text and "Logging error" not in text
