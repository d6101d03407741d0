"""The fake 3-host job of the multi-host tests: configs/tiny.yaml as a simulated SageMaker job
(`support.simulated_job.digits_job`), metric lines every 2 steps."""

from __future__ import annotations

from pathlib import Path

from support.simulated_job import DIGITS_LAYOUT, digits_job

ROOT = Path(__file__).resolve().parents[2]
HOSTS = ("algo-1", "algo-2", "algo-3")


def FakeJob(root: Path, steps: int = 20, join_timeout_s: float = 120, layout=DIGITS_LAYOUT):  # noqa: N802
    return digits_job(
        root, ROOT / "configs" / "tiny.yaml", steps=steps, join_timeout_s=join_timeout_s, log_every=2, layout=layout
    )
