"""NCCL's settings for a SageMaker job's train workers, as the SageMaker training toolkit sets them.

DDP across GPU hosts runs over NCCL, which must use the network interface SageMaker names in
`resourceconfig.json` (`network_interface_name`, e.g. eth0), and EFA where the instance type has
it. The toolkit's own torchrun launcher (`sagemaker_training/torch_distributed.py`) sets
`NCCL_SOCKET_IFNAME`, `NCCL_PROTO=simple` (EFA can deliver out of order), `FI_PROVIDER=efa` on its
EFA instance types and `FI_EFA_USE_DEVICE_RDMA=1`, `RDMAV_FORK_SAFE=1` on those with RDMA; the
lists of types are the toolkit's (`SM_EFA_NCCL_INSTANCES`, `SM_EFA_RDMA_INSTANCES`). A variable
already set in the job's environment (`sagemaker.environment`) wins.
"""

from __future__ import annotations

from collections.abc import Mapping


def nccl_environment(instance_type: str, interface: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    from sagemaker_training import SM_EFA_NCCL_INSTANCES, SM_EFA_RDMA_INSTANCES

    values = {"NCCL_SOCKET_IFNAME": interface, "NCCL_PROTO": "simple"}
    if instance_type in SM_EFA_NCCL_INSTANCES:
        values["FI_PROVIDER"] = "efa"
    if instance_type in SM_EFA_RDMA_INSTANCES:
        values.update(FI_EFA_USE_DEVICE_RDMA="1", RDMAV_FORK_SAFE="1")
    return {k: v for k, v in values.items() if k not in (environ or {})}
