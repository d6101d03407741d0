"""The job body's work while any path's cluster comes up (`launcher.job.run.preload_driver_imports`):
torch and the TensorBoard writer load in a thread, and ray does not load (on the local path it must
load after `LocalCluster` has put the cluster's auth settings in the environment)."""

import subprocess
import sys

PRELOAD = """
import sys
from smlaunch.launcher.job.run import preload_driver_imports
thread = preload_driver_imports()
thread.join(120)
assert not thread.is_alive(), "preloading took over 120 s"
loaded = set(sys.modules)
preloaded = sorted(m for m in loaded if m.startswith(("torch", "tensorboardX")))
assert {"torch", "tensorboardX.event_file_writer"} <= loaded, preloaded[:5]
ray = sorted(m for m in loaded if m == "ray" or m.startswith("ray."))
assert not ray, ray[:5]
print("ok")
"""


def test_preloading_loads_torch_and_the_tensorboard_writer_but_not_ray():
    done = subprocess.run([sys.executable, "-c", PRELOAD], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
