"""`sm-launch track --replay RUN_DIR`: send a run folder's journal to its MLflow run afterwards.

The journal (`tracker.JOURNAL`, under the head's `output/data/tracking/`) holds everything the job
tracked, in order, whether or not the store took it: the start (store, experiment, run name), the
run's id once opened, the params and tags, every point, the artifacts and the status. Sent again, it
reopens that run (or creates it, where the store was never reached) and sends only what the run
lacks: a point at or under its metric's last step is not sent twice (`store.LAST_STEP_TAG`), nor is
a param. Running it twice changes nothing the second time, except the status set again.
"""

from __future__ import annotations

import json
from pathlib import Path

from smlaunch.errors import UserError
from smlaunch.launcher.tracking.tracker import JOURNAL


def find_journal(run_dir: str) -> Path:
    """The journal under `run_dir` (a run directory, a job's output/data, or the file itself)."""
    path = Path(run_dir)
    if path.is_file():
        return path
    found = sorted(path.glob(f"**/tracking/{JOURNAL}")) if path.is_dir() else []
    if not found:
        raise UserError(f"track: no tracking/{JOURNAL} under {run_dir} (a run with tracking.mlflow writes one)")
    if len(found) > 1:
        raise UserError(f"track: {len(found)} journals under {run_dir}; name one: {', '.join(map(str, found[:3]))}")
    return found[0]


def read_journal(path: Path) -> list[dict]:
    entries = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entries.append(json.loads(line))
        except ValueError:  # a line cut by a crash: the last one, and nothing after it was written
            raise UserError(f"track: {path} line {number}: not JSON (a line cut short?)") from None
    if not entries or entries[0].get("kind") != "start":
        raise UserError(f"track: {path}: not a tracking journal (no start line)")
    return entries


def replay(run_dir: str, uri: str | None = None) -> dict:
    """Send the journal; returns what was sent (`run_id`, `points`, `skipped`, `status`)."""
    from smlaunch.launcher.tracking.store import MlflowStore

    path = find_journal(run_dir)
    entries = read_journal(path)
    start = entries[0]
    run_id = next((e["run_id"] for e in entries if e["kind"] == "run"), None)
    store = MlflowStore(uri or start["uri"])
    store.open(start["experiment"], start["run_name"], run_id, {})
    points, params, tags, artifacts, status = [], {}, {}, [], "FAILED"
    for e in entries:
        if e["kind"] == "points":
            points += [tuple(p) for p in e["points"]]
        elif e["kind"] == "params":
            params.update(e["params"])
            tags.update(e["tags"])
        elif e["kind"] == "artifact":
            artifacts.append(Path(e["path"]))
        elif e["kind"] == "end":
            status = e["status"]
    skipped = store.log(points, params, tags)
    for artifact in artifacts:  # as the run folder holds them now (a downloaded output: beside the journal)
        local = artifact if artifact.exists() else path.parent.parent / artifact.name
        if local.exists() and local.name != "model.pt":
            store.artifact(local)
    store.terminate(status)
    if run_id is None:  # the job never reached the store: the run now exists, under this id
        with open(path, "a", encoding="utf-8") as journal:
            journal.write(json.dumps({"kind": "run", "run_id": store.run_id, "reopened": False}) + "\n")
    return {
        "run_id": store.run_id,
        "uri": store.uri,
        "points": len(points) - skipped,
        "skipped": skipped,
        "status": status,
    }
