"""`launcher.local.run`'s work while the cluster starts: the channels are listed in a thread, and ray
does not load (it must load after `LocalCluster` has put the cluster's auth settings in the
environment, or the driver cannot talk to its own token-authenticated GCS)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

LIST_AHEAD = """
import sys
from pathlib import Path
from smlaunch.config.loader import load_config
from smlaunch.cluster.environment import detect_local_environment
from smlaunch.cluster.host_tree import create_host_trees
from smlaunch.cluster.plan import build_plan
from smlaunch.launcher.local.run import list_while_starting
from smlaunch.pipelines.sources.channels import deliver_channels

folder, run_dir = Path(sys.argv[1]), sys.argv[2]
for c in range(3):
    (folder / f"class-{c}").mkdir(parents=True)
    for i in range(40):
        (folder / f"class-{c}" / f"{i}.png").write_bytes(b"png")
cfg = load_config("configs/tiny.yaml", [f"run.dir={run_dir}", f"channels.train.source={folder}",
                                        "channels.train.record_format=image_folder"])
plan = build_plan(cfg, detect_local_environment())
create_host_trees(plan)
deliver_channels(plan)
listing = list_while_starting(plan).result(timeout=120)["train"]
assert listing.classes == ["class-0", "class-1", "class-2"], listing.classes
assert sorted(rel for files in listing.files.values() for rel, _ in files) == sorted(
    f"class-{c}/{i}.png" for c in range(3) for i in range(40))
ray = sorted(m for m in sys.modules if m == "ray" or m.startswith("ray."))
assert not ray, ray[:5]
(folder / "class-3").mkdir()  # a class folder without an image: the error comes where the listing is used
try:
    list_while_starting(plan).result(timeout=120)
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def test_a_local_run_lists_its_channels_while_the_cluster_starts_without_loading_ray(tmp_path):
    """The simulated hosts' channel directories are on this machine: a thread lists them before
    any cluster exists (ray is not loaded), with the listing's own errors where it is used."""
    done = subprocess.run(
        [sys.executable, "-c", LIST_AHEAD, str(tmp_path / "images"), str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (
        done.stdout.strip() == "DataError channel 'train': class folder class-3 holds no image (extensions: jpg, "
        "jpeg, png, ppm, bmp, pgm, tif, tiff, webp); torchvision's ImageFolder refuses it too, as it would shift every "
        "label after it"
    ), done.stdout
