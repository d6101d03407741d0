"""The job as Kubernetes objects for KubeRay: a ConfigMap holding the config, and a `RayJob`.

A pure function of the config, the image and the Ray version: `sm-launch kuberay` prints what
this returns, and the tests validate it against KubeRay's CRD schema. The mapping keeps the
instance group as the unit, so the selectors that keep preprocessing on CPU hosts and training on
GPU hosts (`ray-subcluster`, `sm-group`) hold in the cluster as on SageMaker:

* each instance group is a worker group with `instance_count` replicas (fixed: min = max, since
  the train worker count and the data split are planned from them), its Ray node labels in the
  group's `labels` (KubeRay >= 1.5 passes them to `ray start --labels`) and pod requests from the
  group's instance spec, minus what a Kubernetes node keeps for itself (one vCPU, 15 % of memory);
* the head is a pod of its own offering Ray no CPUs or GPUs, so nothing is scheduled there but the
  driver, unless `kuberay.head_group` makes it that group's first host, as on SageMaker;
* the entrypoint is `sm-launch run` on the config mounted from the ConfigMap; KubeRay sets
  `RAY_ADDRESS`, so the run attaches to the cluster instead of starting one;
* Ray's token authentication is on (`authOptions.mode: token`: KubeRay makes the Secret), the
  job has a deadline and the cluster is deleted when it ends;
* with `autoscale:` (issue 42) the one group `cluster.autoscale.rules.scaled_group` names is the
  exception to fixed replicas: KubeRay's in-tree autoscaler (Ray's v2) runs beside the head, and
  that group starts at `min_data_hosts` and may grow to `max_data_hosts`. The run asks for its
  hosts by the group's labels (`launcher.attached.elastic`), which every pod of the group carries,
  the ones the autoscaler adds included. Every other group keeps min = max = replicas, so the
  autoscaler can touch nothing else.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

import yaml

from smlaunch.cluster.autoscale.rules import scaled_group
from smlaunch.cluster.labels import GROUP_LABEL, SUBCLUSTER
from smlaunch.cluster.node import worker_pool_env
from smlaunch.cluster.topology import config_train_group
from smlaunch.config.kuberay import KubeRayConfig
from smlaunch.config.schema import LaunchConfig
from smlaunch.config.shown import shown_config
from smlaunch.errors import ConfigError
from smlaunch.redaction import looks_secret

CONFIG_DIR = "/home/ray/smlaunch"
"""Where the ConfigMap is mounted in the head pod (the `ray` user's home in Ray's images)."""
NODE_RESERVED_VCPUS = 1
NODE_MEMORY_FRACTION = 0.85
GPU_RESOURCE = "nvidia.com/gpu"
AUTOSCALER_IDLE_TIMEOUT_S = 60
"""How long a scaled host nothing asks for stays. The run gives hosts back by draining them itself
(`autoscale.cooldown_s` paces that), so this only clears what is left once its request is withdrawn;
KubeRay's own sample value."""
AUTOSCALER_CONTAINER = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}}
"""The autoscaler sidecar's resources (KubeRay's defaults, written out so the head pod's footprint
is in the manifest, not in the operator's version)."""


def k8s_name(job: str) -> str:
    """The job's name as an RFC 1123 label short enough for KubeRay's derived names (47 chars)."""
    name = re.sub(r"[^a-z0-9-]+", "-", job.lower()).strip("-")[:40].strip("-")
    return name or "smlaunch-job"


def manifest(cfg: LaunchConfig, image: str | None, ray_version: str) -> list[dict]:
    """[ConfigMap, RayJob] for `cfg`; `image` overrides `kuberay.image`. The job runs attached to
    the RayJob's cluster, so what an attached run refuses (Pipe channels, ...) is refused here."""
    from smlaunch.cluster.attached.plan import attachable

    attachable(cfg)
    kuberay = cfg.kuberay or KubeRayConfig()
    image = image or kuberay.image
    if not image:
        raise ConfigError(
            "kuberay.image: no image; give --image IMAGE or kuberay.image (an image with "
            f"Ray {ray_version} and smlaunch installed)"
        )
    name = k8s_name(cfg.job)
    groups = cfg.cluster.instance_groups
    train_group, _ = config_train_group(cfg)
    metadata = {"name": name, "labels": {"app.kubernetes.io/name": "smlaunch", "smlaunch/job": name}}
    if kuberay.namespace:
        metadata["namespace"] = kuberay.namespace
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {**metadata, "name": f"{name}-config"},
        "data": {"config.yaml": yaml.safe_dump(shown_config(cfg, exclude_none=True), sort_keys=False)},
    }
    secret = secret_of(kuberay, {**metadata, "name": f"{name}-env"})
    head_of = next((g for g in groups if g.name == kuberay.head_group), None)
    scaled = scaled_group(cfg)
    workers = []
    for group in groups:
        replicas, low, high = worker_counts(cfg, group, head_of, scaled)
        if high == 0:
            continue
        subcluster = "train" if group.name == train_group else "data"
        workers.append(
            {
                "groupName": group_name(group.name),
                "replicas": replicas,
                "minReplicas": low,
                "maxReplicas": high,
                "labels": {SUBCLUSTER: subcluster, GROUP_LABEL: group.name},
                "rayStartParams": ray_resources(group),
                "template": pod(group, image, kuberay, container="ray-worker", secret=secret),
            }
        )
    if head_of is None:
        head = {
            "rayStartParams": {"num-cpus": "0", "num-gpus": "0"},
            "template": pod(None, image, kuberay, container="ray-head", config_map=f"{name}-config", secret=secret),
        }
    else:
        head = {
            "labels": {SUBCLUSTER: "train" if head_of.name == train_group else "data", GROUP_LABEL: head_of.name},
            "rayStartParams": ray_resources(head_of),
            "template": pod(head_of, image, kuberay, container="ray-head", config_map=f"{name}-config", secret=secret),
        }
    job = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": metadata,
        "spec": {
            "entrypoint": f"sm-launch run {CONFIG_DIR}/config.yaml",
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": kuberay.ttl_after_finished_s,
            "activeDeadlineSeconds": kuberay.max_run_s,
            "backoffLimit": 0,
            "rayClusterSpec": {
                "rayVersion": ray_version,
                **(autoscaler() if scaled else {}),
                "authOptions": {"mode": "token"},
                "headGroupSpec": head,
                "workerGroupSpecs": workers,
            },
        },
    }
    return ([secret] if secret else []) + [config_map, job]


def secret_of(kuberay: KubeRayConfig, metadata: dict) -> dict | None:
    """The Kubernetes Secret holding `kuberay.environment`'s secret-looking variables (None when
    there are none): the pods read them by `secretKeyRef`, so their values are in no ConfigMap and
    no pod spec, where anyone who may list pods or read the RayJob would see them. The manifest is
    applied with `kubectl apply -f -`: it is the one place the values are, and is not kept."""
    hidden = {k: v for k, v in kuberay.environment.items() if looks_secret(k)}
    if not hidden:
        return None
    return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": "Opaque", "stringData": hidden}


def worker_counts(cfg: LaunchConfig, group, head_of, scaled) -> tuple[int, int, int]:
    """(replicas, minReplicas, maxReplicas) of a group's workers. Fixed at its instance count
    unless it is the scaled group: then it starts at `autoscale.min_data_hosts` (at least one) and
    may go down to it and up to `max_data_hosts`. A head that is one of the group's hosts counts as
    one of them (it carries the group's labels, so the run counts it too), hence one fewer worker in
    each."""
    on_head = int(group is head_of)
    if scaled is None or group.name != scaled.name:
        fixed = group.instance_count - on_head
        return fixed, fixed, fixed
    autoscale = cfg.autoscale
    if autoscale is None:  # `scaled_group` finds a group only in an autoscale: section
        raise ValueError(f"group {group.name} is scaled, but the config has no autoscale: section")
    low, high = max(0, autoscale.min_data_hosts - on_head), autoscale.max_data_hosts - on_head
    # `min_data_hosts: 0` still starts one: epoch 1 runs the whole chain, before its prefix is cached.
    return max(low, 1 - on_head), low, high


def autoscaler() -> dict:
    """The `rayClusterSpec` fields that start KubeRay's autoscaler sidecar as Ray's autoscaler v2,
    whose resource requests carry label selectors (the run asks for data hosts by label).
    `version: v2` is KubeRay's switch: the operator sets `RAY_enable_autoscaler_v2` on the head
    itself and refuses a spec that also sets that variable, so the head's env stays as it is; the
    pods' `restartPolicy` stays unset too (v2 accepts Never or nothing)."""
    return {
        "enableInTreeAutoscaling": True,
        "autoscalerOptions": {
            "version": "v2",
            "upscalingMode": "Default",
            "idleTimeoutSeconds": AUTOSCALER_IDLE_TIMEOUT_S,
            "resources": {k: dict(v) for k, v in AUTOSCALER_CONTAINER.items()},
        },
    }


def code_notes(cfg: LaunchConfig) -> list[str]:
    """What the image must hold when the config names functions of the user's (`plan`'s preflight
    found each in this folder): their modules, in the image's working directory, where the
    entrypoint's `sm-launch run` starts and which it ships to the workers as the job's working_dir."""
    from smlaunch.user_code import code_folder, resolve, user_functions

    named = user_functions(cfg)
    if not named:
        return []
    folder = os.path.realpath(code_folder())
    files: set[str] = set()
    for field, path in named:
        module = path.partition(":")[0]
        found = os.path.realpath(getattr(sys.modules.get(resolve(path, field).__module__), "__file__", "") or "")
        files.add(
            os.path.relpath(found, folder) if found.startswith(folder + os.sep) else module.replace(".", "/") + ".py"
        )
    return [
        f"the job imports {', '.join(dict.fromkeys(p for _, p in named))}: the image's working directory "
        f"must hold {', '.join(sorted(files))} as this folder does (the run ships that directory to the workers)"
    ]


def storage_notes(cfg: LaunchConfig) -> list[str]:
    """Where the job's outputs and path channels would live in the cluster: a warning per place
    that is a pod's own disk (gone with the cluster); ConfigError for a `run.dir` off the shared
    volume when one is mounted."""
    kuberay = cfg.kuberay or KubeRayConfig()
    mount = kuberay.shared_mount.rstrip("/") + "/"
    paths = {
        f"channels.{name}.source": ch.source
        for name, ch in cfg.channels.items()
        if not ch.source.startswith(("s3://", "builtin:"))
    }
    on_s3 = cfg.run.dir.startswith("s3://")  # outputs uploaded: the pods' role must be able to write there
    if not kuberay.shared_volume_claim:
        return (
            []
            if on_s3
            else [
                f"run.dir: {cfg.run.dir} is on the pods' own disks: the model and checkpoints (written on rank 0's "
                "pod) and the report (the head's) go with the cluster when the job ends; set "
                "kuberay.shared_volume_claim and a run.dir under its mount, or an s3:// run.dir"
            ]
        ) + [
            f"{field}: {source} must be on a volume every data pod mounts (kuberay.shared_volume_claim)"
            for field, source in paths.items()
        ]
    if not on_s3 and not (cfg.run.dir.rstrip("/") + "/").startswith(mount):
        raise ConfigError(
            f"run.dir: {cfg.run.dir} is not under kuberay.shared_mount ({kuberay.shared_mount}); "
            f"the pods keep nothing else: set run.dir={mount}runs (or an s3:// URI)"
        )
    return [
        f"{field}: {source} is not under {kuberay.shared_mount}; every data pod must see it"
        for field, source in paths.items()
        if not (source.rstrip("/") + "/").startswith(mount)
    ]


def group_name(name: str) -> str:
    """A worker group's name must be a DNS label (KubeRay names the pods after it)."""
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:50] or "group"


def ray_resources(group) -> dict[str, str]:
    """What the group's pod offers Ray: the CPUs it requests, and its GPUs."""
    params = {"num-cpus": str(pod_cpus(group))}
    if group.spec.gpus:
        params["num-gpus"] = str(group.spec.gpus)
    return params


def pod_cpus(group) -> int:
    return max(1, group.spec.vcpus - NODE_RESERVED_VCPUS)


def pod_memory(group) -> str | None:
    gib = group.spec.memory_gib
    return f"{int(gib * NODE_MEMORY_FRACTION * 1024)}Mi" if gib else None


def pod(
    group,
    image: str,
    kuberay: KubeRayConfig,
    *,
    container: str,
    config_map: str | None = None,
    secret: dict | None = None,
) -> dict:
    """The pod template of a group's hosts (or of a head pod of its own when `group` is None);
    `secret`: the job's Secret of `kuberay.environment` (`secret_of`), read by reference."""
    if group is None:
        requests = {"cpu": str(kuberay.head_cpus), "memory": f"{int(kuberay.head_memory_gib * 1024)}Mi"}
        limits = {"memory": requests["memory"]}
    else:
        requests = {"cpu": str(pod_cpus(group))}
        limits = {}
        memory = pod_memory(group)
        if memory:
            requests["memory"] = limits["memory"] = memory
        if group.spec.gpus:
            requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(group.spec.gpus)
    env = {
        "RAY_USAGE_STATS_ENABLED": "0",
        "PYTHONUNBUFFERED": "1",
        # the raylet's pool as every other path sets it, for the Ray CPUs the pod's `ray start` gets
        **(worker_pool_env(pod_cpus(group)) if group is not None else {}),
        **kuberay.environment,
    }
    hidden = secret["stringData"] if secret else {}
    spec_container: dict[str, Any] = {
        "name": container,
        "image": image,
        "resources": {"requests": requests, "limits": limits},
        "env": [
            {"name": k, "valueFrom": {"secretKeyRef": {"name": secret["metadata"]["name"], "key": k}}}
            if secret and k in hidden
            else {"name": k, "value": v}
            for k, v in env.items()
        ],
    }
    if container == "ray-head":
        spec_container["ports"] = [
            {"containerPort": 6379, "name": "gcs"},
            {"containerPort": 8265, "name": "dashboard"},
            {"containerPort": 10001, "name": "client"},
        ]
    spec: dict = {"containers": [spec_container]}
    mounts, volumes = [], []
    if config_map:
        mounts.append({"name": "smlaunch-config", "mountPath": CONFIG_DIR, "readOnly": True})
        volumes.append({"name": "smlaunch-config", "configMap": {"name": config_map}})
    if kuberay.shared_volume_claim:
        mounts.append({"name": "shared", "mountPath": kuberay.shared_mount})
        volumes.append({"name": "shared", "persistentVolumeClaim": {"claimName": kuberay.shared_volume_claim}})
    if mounts:
        spec_container["volumeMounts"], spec["volumes"] = mounts, volumes
    if group is not None and kuberay.node_selector == "instance_type":
        spec["nodeSelector"] = {"node.kubernetes.io/instance-type": group.instance_type.removeprefix("ml.")}
    if group is not None and group.spec.gpus:  # GPU node groups are usually tainted so CPU pods stay off
        spec["tolerations"] = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    if kuberay.service_account:
        spec["serviceAccountName"] = kuberay.service_account
    return {"spec": spec}


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the config in the ConfigMap) as literal blocks, readable in the manifest."""


_Dumper.add_representer(
    str,
    lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None),
)


def manifest_yaml(documents: list[dict]) -> str:
    return yaml.dump_all(documents, Dumper=_Dumper, sort_keys=False)
