"""The launch plan: a pure function of the config and the machine it runs on.

`build_plan` decides which host is the Ray head, what each host is labelled and offers to Ray,
how many train workers there are and which hosts receive and read each channel. It starts nothing
and touches no file, so `sm-launch plan` can print it in milliseconds and tests can check every
decision without a cluster. Doing it lives in `cluster.local` and `launcher.job.run`.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from smlaunch.cluster.labels import GROUP_LABEL, HOST_LABEL, SUBCLUSTER
from smlaunch.cluster.topology import (
    WorkerPlan,
    as_cpu_stand_ins,
    config_train_group,
    place_workers,
    receiving_groups,
)
from smlaunch.config.schema import LaunchConfig
from smlaunch.errors import ConfigError
from smlaunch.text import plural


@dataclass(frozen=True)
class LocalEnvironment:
    """What the plan needs to know about this machine, read once by `detect_local_environment`."""

    cpus: int
    gpus: int
    started: str
    """Timestamp naming a run directory when the config names none."""
    memory_bytes: int = 0
    """This machine's memory (0: unknown), shared by the simulated hosts' object stores."""
    pid1: object = None
    """This container's PID 1 (`cluster.process_tree.Pid1`), where /proc tells: on a SageMaker
    host it decides what a stop does (`stop_protection`)."""


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
    fields: tuple[str | None, str | None, str | None] = ("image/encoded", "image/class/label", "id")
    """Where the image, the label and the id are in a record (feature, extension or column names);
    image or label None: not in this channel's batch (a channel naming its own fields)."""
    more: tuple[tuple[str, str], ...] = ()
    """The batch's other fields, (batch name, the data's name), when the channel names them
    (`config.channel_rules.resolved_fields`)."""
    id_required: bool = False
    """The config named `fields.id`: a sample without it is an error instead of getting a derived id."""
    s3_data_type: str = "S3Prefix"
    file_system: str | None = None
    """FSxLustre or EFS when the channel is a file system mounted on every receiving host."""
    shuffle: bool = False
    """A new order every epoch (`pipelines.order`); else one order fixed by the channel's name."""
    open_units: int = 1
    """Units each read task reads at a time, interleaved (shuffled channels)."""


def channel_plan(name: str, ch, hosts: tuple[str, ...], block_rows: int = 256) -> ChannelPlan:
    """A channel of the config, received by `hosts`. A file system is seen whole by every host, as a
    FullyReplicated S3 channel is, so it is read as one (each file once, by any host)."""
    from smlaunch.config.channel_rules import resolved_fields

    fields = resolved_fields(ch.record_format, ch.fields)
    return ChannelPlan(
        name=name,
        input_mode=ch.input_mode,
        record_format=ch.record_format,
        source=ch.source,
        hosts=hosts,
        distribution=ch.s3_distribution,
        max_corrupted_records=ch.max_corrupted_records,
        attribute_names=tuple(ch.attribute_names) if ch.attribute_names else None,
        block_rows=block_rows,
        fields=(fields["image"], fields["label"], fields["id"]),
        # Fields past image, label and id come from the channel's own `fields` (str -> str): never None.
        more=tuple((k, v) for k, v in fields.items() if k not in ("image", "label", "id") and v is not None),
        id_required=bool(ch.fields and ch.fields.get("id")),
        s3_data_type=ch.s3_data_type,
        file_system=ch.file_system.type if ch.file_system else None,
        shuffle=shuffled(name, ch),
        open_units=ch.shuffle.open_units if shuffled(name, ch) else 1,
    )


def shuffled(name: str, ch) -> bool:
    """Whether channel `name` is read in a new order every epoch: `shuffle.enabled`, by default the train channel."""
    return ch.shuffle.enabled if ch.shuffle.enabled is not None else name == "train"


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
    workers: tuple[WorkerPlan, ...] = ()
    """One per train worker: its rank, host and GPU (None: a CPU worker); see `cluster.topology`."""
    global_batch: int = 0
    """Rows per optimizer step over all workers: batch_size x workers x grad_accum_steps."""
    learning_rate: float = 0.0
    """The peak rate the optimizer uses (`trainer.learning_rate`, times the workers with
    `trainer.lr_scaling: linear`)."""
    worker_env: dict[str, str] = field(default_factory=dict)
    """Variables for the train workers' processes (NCCL's, on SageMaker)."""
    host_label: str = HOST_LABEL
    """The node label naming hosts (`host_label()` in the job's processes): `ray.io/node-id` on an
    attached cluster."""
    output_dir: str | None = None
    """Where model/, checkpoints/ and output/data/ go: `run_dir` on a cluster smlaunch attached to
    (no host has an /opt/ml there); None: the head's /opt/ml tree."""
    checkpoint_every_s: float = 0.0
    """Seconds between timed checkpoints (0: none): `trainer.checkpoint_every_s`, or its default
    under an unsafe PID 1 (`stop_protection`)."""
    stop: str | None = None
    """On a SageMaker host: what a stop will do under this container's PID 1, in one line."""
    stop_is_clean: bool = True
    """Whether a stop reaches sm-launch here (False under tini, a bash entry script, ...)."""
    elastic: Any = None
    """On a running cluster with `autoscale:`: the scaled group and its bounds
    (`cluster.autoscale.rules.ElasticPlan`); its hosts here are those present at the start."""

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
    def train_spare_cpus(self) -> int:
        """The train hosts' CPUs less one per train worker (at least 1): what the chain may take
        there once no data host is left (`autoscale.min_data_hosts: 0` over a sealed cache)."""
        return max(1, sum(h.num_cpus for h in self.hosts if h.subcluster == "train") - self.train_workers)

    @property
    def preprocess_slots(self) -> int:
        """The chain's task pool: the preprocessing hosts' CPUs, with an elastic group counted at its
        largest (Ray Data's budget, which follows the nodes present, keeps it to what has joined)."""
        on = "data" if self.data_selector else "train"
        fixed = sum(
            h.num_cpus
            for h in self.hosts
            if h.subcluster == on and not (self.elastic and h.group == self.elastic.group)
        )
        grown = int(self.elastic.max_hosts * self.elastic.cpus_per_host) if self.elastic else 0
        return max(1, fixed + grown)

    @property
    def worker_selectors(self) -> list[dict[str, str]]:
        """Ray Train's per-worker label selectors: each worker on the host the plan gives it."""
        return [{**self.train_selector, self.host_label: w.host} for w in self.workers]

    @property
    def head_host(self) -> HostPlan:
        return self.host(self.head)

    def to_dict(self) -> dict:
        return asdict(self)


def natural_key(name: str) -> list:
    """Sort key that puts algo-2 before algo-10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def training_numbers(cfg: LaunchConfig, workers: tuple[WorkerPlan, ...]) -> dict:
    """`train_workers`, `use_gpu`, `global_batch` and `learning_rate` of a plan with `workers`."""
    t = cfg.trainer
    lr = t.learning_rate * (len(workers) if t.lr_scaling == "linear" else 1)
    return {
        "workers": workers,
        "train_workers": len(workers),
        "use_gpu": any(w.on_gpu for w in workers),
        "global_batch": t.batch_size * t.grad_accum_steps * len(workers),
        "learning_rate": lr,
    }


UNSAFE_STOP_CHECKPOINT_S = 300.0
"""`trainer.checkpoint_every_s` by default under a PID 1 that lets no stop reach sm-launch: a stop then
loses at most this much training (plus the 120 s SageMaker waits before its SIGKILL, spent training)."""


def stop_fields(trainer, pid1=None) -> dict:
    """A plan's `checkpoint_every_s` and `stop`, on every path (`pid1` only on a SageMaker host)."""
    every, stop = stop_protection(trainer, pid1)
    return {"checkpoint_every_s": every, "stop": stop, "stop_is_clean": pid1 is None or pid1.stop_is_clean}


def stop_protection(trainer, pid1) -> tuple[float, str | None]:
    """(`trainer.checkpoint_every_s` in effect, the line a SageMaker host prints about a stop).

    A stop checkpoints only where SIGTERM reaches sm-launch (`Pid1.stop_is_clean`). Under any other
    PID 1 the last periodic checkpoint is where the next job resumes, so one is written every
    `UNSAFE_STOP_CHECKPOINT_S` unless the config says otherwise. Off SageMaker (`pid1` None) only
    the config counts."""
    configured = trainer.checkpoint_every_s
    if pid1 is None:
        return configured or 0.0, None
    if pid1.stop_is_clean:
        return configured or 0.0, f"stop: {pid1.what_a_stop_does()}"
    if trainer.loop:  # no timed checkpoints: your loop writes the ones it reports
        return 0.0, (
            f"stop: {pid1.what_a_stop_does()}; your loop (trainer.loop) checkpoints when it reports one, so a stop "
            "loses what it trained since its last"
        )
    every = UNSAFE_STOP_CHECKPOINT_S if configured is None else configured
    cadence = (
        f"checkpointing every {every:g} s instead (trainer.checkpoint_every_s"
        f"{'' if configured is not None else ' default under this PID 1'})"
        if every
        else "trainer.checkpoint_every_s is 0, so a stop loses everything since the last checkpoint"
    )
    return every, (
        f"stop: {pid1.what_a_stop_does()}; {cadence}. For a checkpoint at the stop itself use "
        "sagemaker.entry: container, or smlaunch-init as the image's PID 1 (docs/sagemaker.md, \"Stops under "
        'the toolkit")'
    )


def build_plan(cfg: LaunchConfig, env: LocalEnvironment) -> LaunchPlan:
    """Turn the config into a plan for a simulated cluster on this machine.

    Each GPU the config plans becomes one train worker on the simulated host that would own it:
    on a real GPU when this machine has enough of them, else every worker is a CPU worker (gloo)
    standing in for its GPU, so two ml.g5.xlarge hosts train with two workers here as there."""
    groups = cfg.cluster.instance_groups
    train_group, _ = config_train_group(cfg)
    if cfg.run.dir.startswith("s3://"):
        raise ConfigError(
            f"run.dir: {cfg.run.dir}: the local simulation keeps its hosts' trees in the run directory; "
            "give a path (an s3:// run.dir is for a running Ray cluster: run --address, kuberay)"
        )
    if (cfg.trainer.checkpoint_dir or "").startswith("s3://"):
        raise ConfigError(
            f"trainer.checkpoint_dir: {cfg.trainer.checkpoint_dir}: a local run checkpoints to a path; "
            "s3:// is for a running Ray cluster (run --address, kuberay)"
        )
    run_dir = Path(cfg.run.dir) / (cfg.run.name or f"{cfg.job}-{env.started}")
    notes: list[str] = []
    total_vcpus = sum(g.spec.vcpus * g.instance_count for g in groups)
    scale = env.cpus / total_vcpus
    store = local_object_store_bytes(cfg, env, sum(g.instance_count for g in groups))
    names, index = {}, 1
    for group in groups:
        names[group.name] = [f"algo-{i}" for i in range(index, index + group.instance_count)]
        index += group.instance_count
    specs = {g.name: g.spec for g in groups}
    train_hosts = sorted(names[train_group], key=natural_key)
    workers = place_workers([(h, specs[train_group].gpus) for h in train_hosts], cfg.trainer.max_workers)
    workers, worker_notes = _local_devices(workers, env, train_group)
    notes += worker_notes
    hosts: list[HostPlan] = []
    for group in groups:
        for name in names[group.name]:
            subcluster = "train" if group.name == train_group else "data"
            mine = [w for w in workers if w.host == name]
            stand_ins = sum(not w.on_gpu for w in mine)
            hosts.append(
                HostPlan(
                    name=name,
                    group=group.name,
                    instance_type=group.instance_type,
                    role="head" if name == train_hosts[0] else "worker",
                    subcluster=subcluster,
                    num_cpus=max(1, round(group.spec.vcpus * scale), stand_ins),
                    num_gpus=sum(w.on_gpu for w in mine),
                    opt_ml=str(run_dir / "hosts" / name / "opt" / "ml"),
                    labels={SUBCLUSTER: subcluster, HOST_LABEL: name, GROUP_LABEL: group.name},
                    object_store_bytes=store,
                    vcpus=group.spec.vcpus,
                )
            )
    notes.insert(0, f"CPUs scaled by {scale:.3f}: {env.cpus} on this machine for {total_vcpus} vCPUs in the config")
    data_hosts = [h.name for h in hosts if h.subcluster == "data"]
    if not data_hosts:
        notes.append("no CPU-only group: preprocessing shares the train hosts' CPUs")
    from smlaunch.cluster.autoscale.rules import fixed_groups_note

    notes += filter(None, [fixed_groups_note(cfg, "the local simulation")])
    routes = receiving_groups(
        {name: ch.instance_groups for name, ch in cfg.channels.items()}, [g.name for g in groups], train_group
    )
    channels = tuple(
        channel_plan(name, ch, tuple(h.name for h in hosts if h.group in routes[name]), cfg.pipeline.batch_size)
        for name, ch in cfg.channels.items()
    )
    return LaunchPlan(
        job=cfg.job,
        run_dir=str(run_dir),
        hosts=tuple(hosts),
        head=train_hosts[0],
        train_selector={SUBCLUSTER: "train"},
        data_selector={SUBCLUSTER: "data"} if data_hosts else None,
        channels=channels,
        notes=tuple(notes),
        join_timeout_s=cfg.cluster.join_timeout_s,
        **training_numbers(cfg, workers),
        **stop_fields(cfg.trainer),
    )


def _local_devices(
    workers: tuple[WorkerPlan, ...], env: LocalEnvironment, train_group: str
) -> tuple[tuple[WorkerPlan, ...], list[str]]:
    """Real GPUs for the planned ones when this machine has enough, else CPU stand-ins for all: one
    DDP job cannot mix NCCL and gloo ranks."""
    planned = sum(w.gpu is not None for w in workers)
    if planned == 0:
        return workers, []
    if env.gpus >= planned:
        return workers, []
    stand_ins = (
        "a CPU train worker (gloo) stands in for it"
        if planned == 1
        else f"{planned} CPU train workers (gloo) stand in for them, each on the host that owns its GPU"
    )
    notes = [f"{plural(planned, 'GPU')} planned in {train_group} but {env.gpus} on this machine: {stand_ins}"]
    if planned > env.cpus:
        notes.append(
            f"{plural(planned, 'CPU stand-in')} share this machine's {plural(env.cpus, 'core')}: slow; "
            "trainer.max_workers caps them for a quick run"
        )
    return as_cpu_stand_ins(workers), notes
