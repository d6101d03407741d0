"""SageMaker training instance types: which names are valid, and what a host of each holds.

Two sources, kept apart on purpose:

* **Valid names** come from botocore's SageMaker service model (`TrainingInstanceType`, 225 values
  in botocore 1.44), the list the CreateTrainingJob API itself checks against. A name outside it
  is refused with the closest valid ones, whether the job runs locally or on SageMaker.
* **Specs** (vCPUs, GPUs, memory) come from the table below, written from AWS's published EC2
  specifications of the same instance families (aws.amazon.com/ec2/instance-types, read
  2026-11). Most families follow AWS's size naming (`large` = 2 vCPUs, `xlarge` = 4,
  `Nxlarge` = 4N) and a fixed memory per vCPU; the exceptions are listed as such. Types too new
  for the table (g7, g7e, p6e-gb200, p6-b300 at the time of writing) are valid, and a config
  gives their `vcpus` and `gpus` itself.

The plan needs the specs to simulate a job locally (CPUs scale with vCPUs), to pick the group that
trains (the one with GPUs) and to count train workers; the advisor needs vCPUs to predict what a
CPU host adds.
"""

from __future__ import annotations

import difflib
import functools
import re
from typing import NamedTuple


class InstanceSpec(NamedTuple):
    vcpus: int
    gpus: int
    memory_gib: float = 0.0
    """0 when not known (a type whose spec the config gave)."""
    accelerator: str | None = None
    """The GPU model (or accelerator chip) the type carries."""


def _vcpus(size: str) -> int:
    """AWS's size naming: large 2, xlarge 4, Nxlarge 4N vCPUs."""
    if size == "large":
        return 2
    if size == "xlarge":
        return 4
    return 4 * int(size.removesuffix("xlarge"))


def _family(
    family: str,
    sizes: list[str],
    gib_per_vcpu: float,
    gpus: dict[str, int] | None = None,
    accelerator: str | None = None,
) -> dict[str, InstanceSpec]:
    gpus = gpus or {}
    return {
        f"ml.{family}.{s}": InstanceSpec(
            _vcpus(s), gpus.get(s, 0), _vcpus(s) * gib_per_vcpu, accelerator if gpus.get(s) else None
        )
        for s in sizes
    }


_STD = ["large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge"]
_7I = _STD + ["48xlarge"]
_8I = _STD + ["32xlarge", "48xlarge", "96xlarge"]
_FLEX = ["large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge"]
_G = ["xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge"]
_G_GPUS = {
    "xlarge": 1,
    "2xlarge": 1,
    "4xlarge": 1,
    "8xlarge": 1,
    "16xlarge": 1,
    "12xlarge": 4,
    "24xlarge": 4,
    "48xlarge": 8,
}

SPECS: dict[str, InstanceSpec] = {
    # compute optimised: 2 GiB per vCPU
    **_family("c5", ["xlarge", "2xlarge", "4xlarge", "9xlarge", "18xlarge"], 2),
    **_family("c6i", ["xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge", "32xlarge"], 2),
    **_family("c7i", _7I, 2),
    **_family("c7i-flex", _FLEX[1:], 2),
    **_family("c8i", _8I[1:], 2),
    **_family("c8i-flex", _FLEX[1:], 2),
    # general purpose: 4 GiB per vCPU
    **_family("m4", ["xlarge", "2xlarge", "4xlarge", "10xlarge", "16xlarge"], 4),
    **_family("m5", ["large", "xlarge", "2xlarge", "4xlarge", "12xlarge", "24xlarge"], 4),
    **_family("m6i", _STD + ["32xlarge"], 4),
    **_family("m7i", _7I, 4),
    **_family("m7i-flex", _FLEX, 4),
    **_family("m8i", _8I, 4),
    **_family("m8i-flex", _FLEX, 4),
    # memory optimised: 8 GiB per vCPU
    **_family("r5", _STD, 8),
    **_family("r5d", _STD, 8),
    **_family("r6i", _STD + ["32xlarge"], 8),
    **_family("r7i", _7I, 8),
    **_family("r8i", _8I, 8),
    **_family("r8i-flex", _FLEX, 8),
    # NVIDIA GPUs: 1 GPU up to 8xlarge and at 16xlarge, 4 at 12xlarge and 24xlarge, 8 at 48xlarge
    **_family("g4dn", _G[:6], 4, _G_GPUS, "T4"),
    **_family("g5", _G, 4, _G_GPUS, "A10G"),
    **_family("g6", _G, 4, _G_GPUS, "L4"),
    **_family("g6e", _G, 8, _G_GPUS, "L40S"),
    "ml.p3.2xlarge": InstanceSpec(8, 1, 61, "V100"),
    "ml.p3.8xlarge": InstanceSpec(32, 4, 244, "V100"),
    "ml.p3.16xlarge": InstanceSpec(64, 8, 488, "V100"),
    "ml.p3dn.24xlarge": InstanceSpec(96, 8, 768, "V100"),
    "ml.p4d.24xlarge": InstanceSpec(96, 8, 1152, "A100"),
    "ml.p4de.24xlarge": InstanceSpec(96, 8, 1152, "A100"),
    "ml.p5.4xlarge": InstanceSpec(16, 1, 256, "H100"),
    "ml.p5.48xlarge": InstanceSpec(192, 8, 2048, "H100"),
    "ml.p5e.48xlarge": InstanceSpec(192, 8, 2048, "H200"),
    "ml.p5en.48xlarge": InstanceSpec(192, 8, 2048, "H200"),
    "ml.p6-b200.48xlarge": InstanceSpec(192, 8, 2048, "B200"),
    "ml.p2.xlarge": InstanceSpec(4, 1, 61, "K80"),
    "ml.p2.8xlarge": InstanceSpec(32, 8, 488, "K80"),
    "ml.p2.16xlarge": InstanceSpec(64, 16, 732, "K80"),
    # exceptions to the naming rules
    "ml.c4.xlarge": InstanceSpec(4, 0, 7.5),
    "ml.c4.2xlarge": InstanceSpec(8, 0, 15),
    "ml.c4.4xlarge": InstanceSpec(16, 0, 30),
    "ml.c4.8xlarge": InstanceSpec(36, 0, 60),
    "ml.c5n.xlarge": InstanceSpec(4, 0, 10.5),
    "ml.c5n.2xlarge": InstanceSpec(8, 0, 21),
    "ml.c5n.4xlarge": InstanceSpec(16, 0, 42),
    "ml.c5n.9xlarge": InstanceSpec(36, 0, 96),
    "ml.c5n.18xlarge": InstanceSpec(72, 0, 192),
    "ml.t3.medium": InstanceSpec(2, 0, 4),
    "ml.t3.large": InstanceSpec(2, 0, 8),
    "ml.t3.xlarge": InstanceSpec(4, 0, 16),
    "ml.t3.2xlarge": InstanceSpec(8, 0, 32),
    # AWS Trainium: accelerators, but not GPUs to Ray or to PyTorch's CUDA backend
    "ml.trn1.2xlarge": InstanceSpec(8, 0, 32, "Trainium"),
    "ml.trn1.32xlarge": InstanceSpec(128, 0, 512, "Trainium"),
    "ml.trn1n.32xlarge": InstanceSpec(128, 0, 512, "Trainium"),
    "ml.trn2.48xlarge": InstanceSpec(192, 0, 2048, "Trainium2"),
}


@functools.lru_cache(maxsize=1)
def training_instance_types() -> tuple[str, ...]:
    """The `TrainingInstanceType` values of botocore's SageMaker service model (read once, ~0.3 s)."""
    import botocore.session
    from botocore.model import StringShape

    shape = botocore.session.get_session().get_service_model("sagemaker").shape_for("TrainingInstanceType")
    if not isinstance(shape, StringShape):
        raise TypeError(
            f"botocore's SageMaker TrainingInstanceType is a {type(shape).__name__}, not an enum of strings"
        )
    return tuple(shape.enum)


def check_training_type(name: str) -> None:
    """`ValueError` naming the closest valid types when `name` is not a SageMaker training type."""
    valid = training_instance_types()
    if name in valid:
        return
    close = difflib.get_close_matches(name, valid, n=3, cutoff=0.75)
    hint = (
        f"did you mean {' or '.join(close)}?"
        if close
        else f"valid families: {', '.join(sorted({t.rsplit('.', 1)[0] for t in valid}))}"
    )
    raise ValueError(
        f"{name!r} is not a SageMaker training instance type (botocore's TrainingInstanceType list); {hint}"
    )


def known_spec(name: str) -> InstanceSpec | None:
    return SPECS.get(name)


def is_cpu_only(name: str) -> bool:
    spec = SPECS.get(name)
    return spec is not None and spec.gpus == 0 and spec.accelerator is None


LOCAL_STORAGE_FAMILIES = frozenset(
    {
        "g4dn",
        "g4ad",
        "g5",
        "g6",
        "g6e",
        "gr6",
        "p3dn",
        "p4d",
        "p4de",
        "p5",
        "p5e",
        "p5en",
        "p6-b200",
        "trn1",
        "trn1n",
        "trn2",
    }
)
"""Accelerated families with NVMe instance storage (AWS EC2 instance type pages); CPU families
with it end in `d` (c5d, m5d, r5d, c6id, m7gd). SageMaker refuses a VolumeKmsKeyId on them."""


def has_local_storage(instance_type: str) -> bool:
    family = instance_type.removeprefix("ml.").split(".")[0]
    return family in LOCAL_STORAGE_FAMILIES or bool(re.fullmatch(r"[cmrxz]\d+[a-z]*d", family))
