"""Each simulated host's `/opt/ml` tree, laid out and filled as SageMaker fills a real one.

A local run gets one tree per host under the run directory, with the config files SageMaker
writes (`resourceconfig.json`, `inputdataconfig.json`, `hyperparameters.json`), so code that
reads a real host's tree reads a simulated one the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

from smlaunch.cluster.plan import LaunchPlan

SUBDIRS = ("input/config", "input/data", "model", "output/data", "checkpoints", "code")


def create_host_trees(plan: LaunchPlan) -> None:
    groups: dict[str, dict] = {}
    for host in plan.hosts:
        group = groups.setdefault(host.group, {"instance_group_name": host.group,
                                               "instance_type": host.instance_type, "hosts": []})
        group["hosts"].append(host.name)
    for host in plan.hosts:
        root = Path(host.opt_ml)
        for sub in SUBDIRS:
            (root / sub).mkdir(parents=True, exist_ok=True)
        resource = {"current_host": host.name, "current_instance_type": host.instance_type,
                    "current_group_name": host.group, "hosts": [h.name for h in plan.hosts],
                    "instance_groups": list(groups.values()), "network_interface_name": "lo"}
        channels = {c.name: {"TrainingInputMode": c.input_mode, "S3DistributionType": "FullyReplicated",
                             "RecordWrapperType": "None"} for c in plan.channels if host.name in c.hosts}
        config = root / "input" / "config"
        (config / "resourceconfig.json").write_text(json.dumps(resource, indent=2))
        (config / "inputdataconfig.json").write_text(json.dumps(channels, indent=2))
        (config / "hyperparameters.json").write_text("{}")
