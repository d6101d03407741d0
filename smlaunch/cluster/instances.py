"""SageMaker instance types: vCPUs and GPUs per type.

The head must sit on a GPU host and the local simulation scales CPUs by each type's vCPUs, so both
need to know what an `ml.*` type holds. Figures are AWS's published EC2 specifications for the
same families (aws.amazon.com/ec2/instance-types, read 2026-11); an unknown type is a config
error rather than a guess.
"""

from __future__ import annotations

from typing import NamedTuple


class InstanceSpec(NamedTuple):
    vcpus: int
    gpus: int


_SIZES = {"large": 2, "xlarge": 4, "2xlarge": 8, "4xlarge": 16, "8xlarge": 32, "9xlarge": 36,
          "12xlarge": 48, "16xlarge": 64, "18xlarge": 72, "24xlarge": 96, "32xlarge": 128,
          "48xlarge": 192}


def _cpu_family(family: str, sizes: list[str]) -> dict[str, InstanceSpec]:
    return {f"ml.{family}.{s}": InstanceSpec(_SIZES[s], 0) for s in sizes}


def _gpu_family(family: str, gpus_by_size: dict[str, int]) -> dict[str, InstanceSpec]:
    return {f"ml.{family}.{s}": InstanceSpec(_SIZES[s], g) for s, g in gpus_by_size.items()}


_G5_LIKE = {"xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "12xlarge": 4, "16xlarge": 1,
            "24xlarge": 4, "48xlarge": 8}

INSTANCE_TYPES: dict[str, InstanceSpec] = {
    **_cpu_family("c5", ["large", "xlarge", "2xlarge", "4xlarge", "9xlarge", "12xlarge", "18xlarge",
                         "24xlarge"]),
    **_cpu_family("c6i", ["large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge",
                          "16xlarge", "24xlarge", "32xlarge"]),
    **_cpu_family("m5", ["large", "xlarge", "2xlarge", "4xlarge", "12xlarge", "24xlarge"]),
    **_cpu_family("m6i", ["large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge",
                          "16xlarge", "24xlarge", "32xlarge"]),
    **_cpu_family("r5", ["large", "xlarge", "2xlarge", "4xlarge", "12xlarge", "24xlarge"]),
    **_cpu_family("t3", ["large", "xlarge", "2xlarge"]),
    **_gpu_family("g4dn", {"xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "12xlarge": 4,
                           "16xlarge": 1}),
    **_gpu_family("g5", _G5_LIKE),
    **_gpu_family("g6", _G5_LIKE),
    **_gpu_family("g6e", _G5_LIKE),
    **_gpu_family("p3", {"2xlarge": 1, "8xlarge": 4, "16xlarge": 8}),
    "ml.p3dn.24xlarge": InstanceSpec(96, 8),
    "ml.p4d.24xlarge": InstanceSpec(96, 8),
    "ml.p4de.24xlarge": InstanceSpec(96, 8),
    "ml.p5.48xlarge": InstanceSpec(192, 8),
    "ml.p5e.48xlarge": InstanceSpec(192, 8),
}


GPU_FAMILIES = ("ml.p", "ml.g")
"""Families with NVIDIA GPUs (p2-p6, g4dn-g6e); trn/inf accelerators are not GPUs to Ray."""


def instance_spec(instance_type: str) -> InstanceSpec:
    """The spec of `instance_type`; `KeyError` for a type not in the table."""
    return INSTANCE_TYPES[instance_type]


def expected_gpus(instance_type: str) -> int:
    """GPUs a host of this type should have: the table, else 1 for a GPU family, else 0.

    A running job may use a type newer than the table; its family still says whether it trains.
    """
    if instance_type in INSTANCE_TYPES:
        return INSTANCE_TYPES[instance_type].gpus
    return 1 if instance_type.startswith(GPU_FAMILIES) and instance_type[4:5].isdigit() else 0


def expected_vcpus(instance_type: str) -> int | None:
    spec = INSTANCE_TYPES.get(instance_type)
    return spec.vcpus if spec else None
