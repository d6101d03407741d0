"""Start-up the entry script adds on each SageMaker host, `install_package: auto` vs installing.

Side by side, same machine, alternating, with a source tree laid out as `sm-launch submit` ships it
(package, pyproject.toml, config, `smlaunch_entry.py` at the top), timed from the spawn until the
entry script announces the `exec` of sm-launch:

- **auto** (the default): this Python has every dependency, so the script only checks them
  against pyproject.toml and puts the shipped code on PYTHONPATH;
- **pip**: `pip install` of the shipped package, offline and without its dependencies
  (`--no-index --no-build-isolation --no-deps --target`): a lower bound of what `install_package:
  true` pays, which on a real host also resolves every dependency against PyPI (25-29 s measured
  with all of them present, issue 23);
- **python**: a bare `python -c` start, the floor any entry pays; `added_s` is auto minus this.

    python bench/entry_startup.py [--rounds 5]

Ends with `RESULT entry_startup added_s=<auto - python, median> pip_lower_bound_s=<median> goal=5`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]


def shipped_tree(root: Path) -> Path:
    """The source tarball's layout, as `launcher.sagemaker.sourcedir` packs it."""
    shutil.copytree(ROOT / "smlaunch", root / "smlaunch", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, root / name)
    shutil.copy(ROOT / "configs" / "hetero.yaml", root / "smlaunch-config.yaml")
    shutil.copy(ROOT / "smlaunch" / "launcher" / "sm_entry.py", root / "smlaunch_entry.py")
    return root


def until(argv: list[str], marker: str, env: dict, cwd: Path) -> float:
    """Seconds from spawn until `marker` appears on stdout (the process is then stopped)."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd)
    for line in proc.stdout:
        if marker in line:
            took = time.perf_counter() - started
            proc.kill()
            proc.wait()
            return took
    raise RuntimeError(f"{argv[:3]} exited {proc.wait()} before printing {marker!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"python": [], "auto": [], "pip": []}
    with tempfile.TemporaryDirectory(prefix="entry-startup-") as tmp:
        tree = shipped_tree(Path(tmp) / "code")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(SMLAUNCH_COMMAND="plan", SMLAUNCH_PIP_INSTALL="auto")
        for r in range(args.rounds):
            times["python"].append(until([sys.executable, "-c", "print('started', flush=True)"], "started", env, tree))
            times["auto"].append(until([sys.executable, "smlaunch_entry.py"], "exec sm-launch", env, tree))
            target = Path(tmp) / f"target-{r}"
            started = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    "--no-index",
                    "--no-build-isolation",
                    "--no-deps",
                    "--target",
                    str(target),
                    str(tree),
                ],
                check=True,
                cwd=tmp,
                env=env,
            )
            times["pip"].append(time.perf_counter() - started)
            shutil.rmtree(target)
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()), flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"median: python {med['python']:.2f} s, auto {med['auto']:.2f} s (added {med['auto'] - med['python']:.2f} s), "
        f"pip (lower bound) {med['pip']:.2f} s"
    )
    report_result(
        f"RESULT entry_startup added_s={med['auto'] - med['python']:.2f} pip_lower_bound_s={med['pip']:.2f} goal=5"
    )


if __name__ == "__main__":
    main()
