"""What an attacker who can write one file plants: a checkpoint whose unpickling runs a command."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


class Planted:
    """Pickled as a call to `os.system(touch <marker>)`: the marker exists if anything unpickled it."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def plant_checkpoint(directory: Path, marker: Path, step: int = 9) -> None:
    """A `state.pt` holding a `Planted` beside real-looking fields, and a `meta.json` rewritten to vouch
    for it (size and SHA-256): a complete checkpoint, as far as the hash can tell."""
    import torch

    directory.mkdir(parents=True)
    state = {"step": step, "epoch": 1, "model": {"w": torch.ones(1)}, "payload": Planted(marker)}
    torch.save(state, directory / "state.pt")
    data = (directory / "state.pt").read_bytes()
    meta = {"step": step, "epoch": 1, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (directory / "meta.json").write_text(json.dumps(meta))
