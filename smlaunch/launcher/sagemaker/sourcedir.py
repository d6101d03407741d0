"""The source tarball of a submitted job: the package, its project file and the resolved config.

`sourcedir.tar.gz` holds `smlaunch/` (Python files only), `pyproject.toml` and `README.md` (so `pip
install` of the folder works), the entry script as `smlaunch_entry.py`, the job's config as
`smlaunch-config.yaml`, and, when the config names functions of the user's (a model factory, a
task, `map` or `user` ops), the folder sm-launch runs in under `user_code/`. The config shipped is
the resolved one: overrides applied, local folder and manifest sources replaced by the S3 URIs they
were uploaded to, and a local `model.pretrained` by the weights' S3 URI. A `builtin:` source stays
as it is: hosts read every channel from `/opt/ml/input/data`, and the builtin name is what gives
the class count and the rows per epoch (hence the LR schedule of an `epochs` job), so the job
trains exactly as the same config does locally. A `file_system` channel keeps its `file_system` and
its local stand-in `source` (the schema refuses an `s3://` one there; on SageMaker the hosts read
the mount under `/opt/ml/input/data/<channel>` and never open `source`). The shipped config is
validated as the hosts will load it, so a rewrite that breaks a schema rule fails at submit, not on
every host.
The archive is deterministic (sorted, zero times and owners), so the same inputs give the same
bytes.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import yaml

from smlaunch.config.schema import LaunchConfig
from smlaunch.errors import UserError
from smlaunch.launcher.sagemaker.training_job import CONFIG_NAME, ENTRY_SCRIPT

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
"""The `smlaunch` package directory that is shipped (this checkout's)."""
PROJECT_FILES = ("pyproject.toml", "README.md")


def resolved_config(cfg: LaunchConfig, uris: dict[str, str], pretrained: str | None = None) -> dict:
    """The config as the hosts should read it: local sources become their channels' S3 URIs (`uris`,
    from `channel_uris`, which has none for a file system channel), and `model.pretrained` becomes
    `pretrained` when given."""
    from smlaunch.config.loader import validate_config
    from smlaunch.config.shown import shown_config

    data = shown_config(cfg, exclude_none=True)  # the environment's secrets travel as the job's Environment
    for name, ch in cfg.channels.items():
        if ch.file_system is None and not ch.source.startswith("builtin:"):
            data["channels"][name]["source"] = uris[name]
    if pretrained is not None:
        data["model"]["pretrained"] = pretrained
    validate_config(data, source="the shipped config")
    return data


def _members(project: Path) -> list[tuple[str, Path]]:
    missing = [f for f in PROJECT_FILES if not (project / f).is_file()]
    if missing:
        raise UserError(
            f"submit ships the project from a checkout, but {', '.join(missing)} is missing beside "
            f"the smlaunch package in {project}; install smlaunch with pip install -e from a checkout"
        )
    files = [(name, project / name) for name in PROJECT_FILES]
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        if "__pycache__" not in path.parts:
            files.append((str(Path("smlaunch") / path.relative_to(PACKAGE_ROOT)), path))
    files.append((ENTRY_SCRIPT, PACKAGE_ROOT / "launcher" / "sm_entry.py"))
    return files


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    tar.addfile(info, io.BytesIO(data))


def pack_sourcedir(config: dict, dest: str | Path, code: list[tuple[str, str, int]] | None = None) -> list[str]:
    """Write `sourcedir.tar.gz` to `dest`; returns the member names. `code`: the user's code folder's
    files (`user_code.code_files`), shipped under `user_code/`, which the entry script puts first
    on every host's import path (`SM_LAUNCH_CODE_DIR`), apart from the package's own files."""
    names = []
    raw = io.BytesIO()
    members = _members(PACKAGE_ROOT.parent)
    members += [(f"user_code/{Path(rel).as_posix()}", Path(path)) for rel, path, _ in code or ()]
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, path in members:
            _add(tar, name, path.read_bytes(), 0o755 if name == ENTRY_SCRIPT else 0o644)
            names.append(name)
        _add(tar, CONFIG_NAME, yaml.safe_dump(config, sort_keys=False).encode())
        names.append(CONFIG_NAME)
    with open(dest, "wb") as out, gzip.GzipFile(fileobj=out, mode="wb", mtime=0, filename="") as gz:
        gz.write(raw.getvalue())
    return names
