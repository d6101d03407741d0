"""The launch plan: a pure function of the config and the machine it runs on.

`build_plan` decides which host is the Ray head, what each host is labelled and offers to Ray,
how many train workers there are and which hosts receive and read each channel. It starts nothing
and touches no file, so `sm-launch plan` can print it in milliseconds and tests can check every
decision without a cluster. Doing it lives in `cluster.local` and `launcher.run`.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from smlaunch.config.schema import LaunchConfig
from smlaunch.errors import ConfigError
from smlaunch.text import plural

SUBCLUSTER = "ray-subcluster"
"""Ray Data sizes its budget per value of this exact label key (see ../shared/notes/ray.md §3)."""
HOST_LABEL = "sm-host"
GROUP_LABEL = "sm-group"


@dataclass(frozen=True)
class LocalEnvironment:
    """What the plan needs to know about this machine, read once by `detect_local_environment`."""

    cpus: int
    gpus: int
    started: str
    """Timestamp naming a run directory when the config names none."""
    memory_bytes: int = 0
    """This machine's memory (0: unknown), shared by the simulated hosts' object stores."""


@dataclass(frozen=True)
class HostPlan:
    name: str
    group: str
    instance_type: str
    role: str  # "head" or "worker"
    subcluster: str  # "train" or "data"
    num_cpus: int
    num_gpus: int
    opt_ml: str | None
    """This host's `/opt/ml` tree (a directory under the run dir when simulated); None on a
    SageMaker job for another host, whose tree is its own `SAGEMAKER_BASE_DIR`, known only there."""
    labels: dict[str, str] = field(default_factory=dict)
    object_store_bytes: int | None = None
    """Ray object store of this host; None: Ray's default (30 % of the host's memory)."""
    vcpus: int = 0
    """vCPUs of the instance type (`num_cpus` is what the host offers Ray: scaled when simulated)."""


LOCAL_OBJECT_STORE_MIN = 256 * 2**20
LOCAL_OBJECT_STORE_MAX = 4 * 2**30


def local_object_store_bytes(cfg: LaunchConfig, env: LocalEnvironment, n_hosts: int) -> int:
    """A simulated host's object store: `cluster.object_store_mb`, else its share of Ray's 30 %
    of this machine, within 256 MiB..4 GiB. A fixed 256 MiB starved 224 px chains: Ray Data
    budgets half the data hosts' store, and 32 decoded 224 px images are a 4.8 MB block, so a
    12-CPU data host ran a few tasks at a time (42 % busy on an H100 machine)."""
    if cfg.cluster.object_store_mb:
        return cfg.cluster.object_store_mb * 2**20
    share = int(0.3 * env.memory_bytes / max(n_hosts, 1))
    return min(max(share, LOCAL_OBJECT_STORE_MIN), LOCAL_OBJECT_STORE_MAX)


@dataclass(frozen=True)
class ChannelPlan:
    name: str
    input_mode: str
    record_format: str
    source: str
    hosts: tuple[str, ...]
    """Hosts that receive the channel under `/opt/ml/input/data/<name>`."""
    distribution: str = "FullyReplicated"
    max_corrupted_records: int = 0
    attribute_names: tuple[str, ...] | None = None
    """An augmented manifest's AttributeNames (image, label[, id]), regrouped from the stream."""
    block_rows: int = 256
    """Rows per block read: the chain's batch size, so one preprocessing task handles one batch and
    the first batch reaches the trainer after one batch's work, not a whole file's."""


def channel_plan(name: str, ch, hosts: tuple[str, ...], block_rows: int = 256) -> ChannelPlan:
    """A channel of the config, received by `hosts`."""
    return ChannelPlan(name=name, input_mode=ch.input_mode, record_format=ch.record_format, source=ch.source,
                       hosts=hosts, distribution=ch.s3_distribution, max_corrupted_records=ch.max_corrupted_records,
                       attribute_names=tuple(ch.attribute_names) if ch.attribute_names else None,
                       block_rows=block_rows)


@dataclass(frozen=True)
class LaunchPlan:
    job: str
    run_dir: str
    hosts: tuple[HostPlan, ...]
    head: str
    train_workers: int
    use_gpu: bool
    train_selector: dict[str, str]
    data_selector: dict[str, str] | None
    channels: tuple[ChannelPlan, ...]
    notes: tuple[str, ...]
    mode: str = "local"
    """"local" (every host simulated by this process) or "sagemaker" (this process is one host)."""
    current_host: str | None = None
    head_address: str = "local"
    join_timeout_s: float = 300.0

    def host(self, name: str) -> HostPlan:
        return next(h for h in self.hosts if h.name == name)

    @property
    def preprocess_selector(self) -> dict[str, str]:
        """Where the chain runs: the data hosts, or the train hosts in a job without CPU hosts.
        Never left unset: Ray Data sizes a Dataset's budget from the `ray-subcluster` bucket its
        selector names, and a Dataset with no selector got an object-store budget of 0 B on an
        H100 host alone (one chain task at a time of four; 44 images/s)."""
        return self.data_selector or self.train_selector

    @property
    def head_host(self) -> HostPlan:
        return self.host(self.head)

    def to_dict(self) -> dict:
        return asdict(self)


def natural_key(name: str) -> list:
    """Sort key that puts algo-2 before algo-10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def build_plan(cfg: LaunchConfig, env: LocalEnvironment) -> LaunchPlan:
    """Turn the config into a plan for a simulated cluster on this machine."""
    groups = cfg.cluster.instance_groups
    train_group = cfg.cluster.train_group or next((g.name for g in groups if g.spec.gpus > 0), None)
    if train_group is None:
        raise ConfigError("cluster: no instance group has GPUs; add a GPU instance type "
                          "(e.g. ml.g5.xlarge) or name the training group in cluster.train_group")
    run_dir = Path(cfg.run.dir) / (cfg.run.name or f"{cfg.job}-{env.started}")
    notes: list[str] = []

    total_vcpus = sum(g.spec.vcpus * g.instance_count for g in groups)
    scale = env.cpus / total_vcpus
    gpus_left = env.gpus
    hosts: list[HostPlan] = []
    store = local_object_store_bytes(cfg, env, sum(g.instance_count for g in groups))
    index = 1
    for group in groups:
        spec = group.spec
        subcluster = "train" if group.name == train_group else "data"
        for _ in range(group.instance_count):
            name = f"algo-{index}"
            index += 1
            gpus = min(spec.gpus, gpus_left) if subcluster == "train" else 0
            gpus_left -= gpus
            hosts.append(HostPlan(
                name=name, group=group.name, instance_type=group.instance_type, role="worker",
                subcluster=subcluster, num_cpus=max(1, round(spec.vcpus * scale)), num_gpus=gpus,
                opt_ml=str(run_dir / "hosts" / name / "opt" / "ml"),
                labels={SUBCLUSTER: subcluster, HOST_LABEL: name, GROUP_LABEL: group.name},
                object_store_bytes=store, vcpus=spec.vcpus))
    notes.append(f"CPUs scaled by {scale:.3f}: {env.cpus} on this machine for {total_vcpus} vCPUs in the config")

    train_hosts = sorted((h for h in hosts if h.subcluster == "train"), key=lambda h: natural_key(h.name))
    head = train_hosts[0].name
    hosts = [HostPlan(**{**asdict(h), "role": "head"}) if h.name == head else h for h in hosts]
    gpus = sum(h.num_gpus for h in train_hosts)
    specs = {g.name: g.spec for g in groups}
    wanted = sum(specs[h.group].gpus for h in train_hosts)
    if gpus < wanted:
        notes.append(f"{plural(wanted, 'GPU')} in {train_group} but {env.gpus} on this machine: "
                     f"{'one CPU train worker' if gpus == 0 else plural(gpus, 'GPU train worker')}")

    data_hosts = [h.name for h in hosts if h.subcluster == "data"]
    if not data_hosts:
        notes.append("no CPU-only group: preprocessing shares the train hosts' CPUs")
    channels = []
    for name, ch in cfg.channels.items():
        receiving = ch.instance_groups or ([g.name for g in groups if g.name != train_group] or [train_group])
        channels.append(channel_plan(name, ch, tuple(h.name for h in hosts if h.group in receiving),
                                     cfg.pipeline.batch_size))
    return LaunchPlan(
        job=cfg.job, run_dir=str(run_dir), hosts=tuple(hosts), head=head,
        train_workers=max(gpus, 1), use_gpu=gpus > 0,
        train_selector={SUBCLUSTER: "train"},
        data_selector={SUBCLUSTER: "data"} if data_hosts else None,
        channels=tuple(channels), notes=tuple(notes), join_timeout_s=cfg.cluster.join_timeout_s)
