"""The `kuberay:` section: how `sm-launch kuberay` turns the job into a KubeRay `RayJob`.

Only that command reads it, and every field has a default, so `sm-launch kuberay CONFIG --image
IMAGE` works on any config. The instance groups stay the unit: each becomes one worker group with
the group's instance count as replicas and the group's instance spec as pod requests. The base
class repeats `schema.StrictModel` because `schema` imports this module.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from smlaunch.config.base import StrictModel
from smlaunch.config.sagemaker import environment_names

K8S_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
"""An RFC 1123 label, what Kubernetes wants of a namespace and of the names derived from the job."""


class KubeRayConfig(StrictModel):
    """A RayJob for the job: a head pod that trains nothing by default, and one worker group per
    instance group."""

    image: str | None = Field(default=None, min_length=1)
    """The image every pod runs: Ray at the version this machine has, and smlaunch installed
    (`pip install <checkout>`). `--image` overrides it; one of the two is required."""
    namespace: str | None = Field(default=None, pattern=K8S_NAME, max_length=63)
    """The namespace of the ConfigMap and the RayJob; default: kubectl's current one."""
    head_group: str | None = None
    """None (the default): the head is a pod of its own that offers Ray no CPUs or GPUs, so no
    preprocessing or training lands on it. A group's name: the head is that group's first host
    (labelled and sized as it), as on SageMaker, and the group's worker replicas are one fewer."""
    head_cpus: int = Field(default=2, ge=1)
    """CPU request of a head pod of its own (the driver: plan, report, Ray's GCS)."""
    head_memory_gib: float = Field(default=8, gt=0)
    """Memory request of a head pod of its own, in GiB."""
    node_selector: Literal["instance_type", "none"] = "instance_type"
    """`instance_type`: pin each group to nodes of its EC2 type (`node.kubernetes.io/instance-type:
    g5.xlarge` for `ml.g5.xlarge`), as on EKS; `none`: let the scheduler place pods anywhere
    their requests fit."""
    max_run_s: int = Field(default=7200, ge=60)
    """`activeDeadlineSeconds`: KubeRay fails the job and deletes the cluster after this long."""
    ttl_after_finished_s: int = Field(default=300, ge=0)
    """How long the finished cluster stays (for `kubectl logs`) before KubeRay deletes it."""
    shared_volume_claim: str | None = Field(default=None, pattern=K8S_NAME, max_length=253)
    """A PersistentVolumeClaim (ReadWriteMany: EFS, FSx for Lustre, NFS) mounted on every pod at
    `shared_mount`. The pods' own disks go with the cluster when the job ends, and rank 0 writes the
    model and checkpoints on its own pod: `run.dir` must be on this volume (or on S3) to keep them. Path
    channels (not `s3://`) must be on it too. Without one, and with a path `run.dir`, `sm-launch kuberay`
    warns."""
    shared_mount: str = Field(default="/mnt/shared", pattern=r"^/.+$")
    """Where `shared_volume_claim` is mounted in every pod."""
    service_account: str | None = Field(default=None, pattern=K8S_NAME, max_length=253)
    """The pods' service account (e.g. one with an IAM role for `s3://` channels on EKS)."""
    environment: dict[str, str] = {}
    """Extra variables for every pod (they win over the ones smlaunch sets). One whose name looks
    secret (TOKEN, SECRET, PASSWORD, KEY, CREDENTIAL, AUTH) goes into a Kubernetes `Secret`,
    `<job>-env`, that the pods read by `secretKeyRef`; its value is `***` in the ConfigMap's config
    and in what `plan` prints (`docs/security.md`). `RAY_AUTH_MODE` and `RAY_AUTH_TOKEN` are
    KubeRay's (token authentication) and refused here."""

    @field_validator("environment")
    @classmethod
    def _environment(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN"):
                raise ValueError(f"{key} is set by KubeRay (authOptions.mode: token makes the cluster's token)")
        return environment_names(value)
