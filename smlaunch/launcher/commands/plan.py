"""`sm-launch plan CONFIG`: check the config as `run` would, print the resolved config and the plan.

Starts nothing and writes nothing: the plan is a pure function of the config and this machine
(or, on a SageMaker host, the job's files). `summary` is the short form `run` prints first.
"""

from __future__ import annotations

import logging

from smlaunch.launcher.commands.job import add_config_arguments, load_job
from smlaunch.console import RESULT
from smlaunch.text import plural

log = logging.getLogger("smlaunch")


def add_arguments(parser) -> None:
    add_config_arguments(parser)


def main(args, failure) -> int:
    job = load_job(args, failure, write_failure_locally=False)
    for line in plan_lines(job.cfg, job.plan):
        log.log(RESULT, line)
    return 0


def plan_lines(cfg, plan) -> list[str]:
    import yaml

    lines = ["# resolved config", *yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False).splitlines(),
             "", "# plan"]
    if plan.mode == "sagemaker":
        me = plan.host(plan.current_host)
        lines.append(f"SageMaker job: this host is {me.name} ({me.role}, {me.group})")
        lines.append(f"head: {plan.head} ({plan.head_host.group}, {plan.head_host.instance_type}) "
                     f"at {plan.head_address}")
    else:
        lines.append(f"head: {plan.head} ({plan.head_host.group}, {plan.head_host.instance_type})")
    lines.append(f"train workers: {plan.train_workers} ({'GPU' if plan.use_gpu else 'CPU'}), "
                 f"selector {plan.train_selector}")
    lines.append(f"preprocessing selector: {plan.preprocess_selector}"
                 + ("" if plan.data_selector else " (no CPU-only group: the train hosts' CPUs)"))
    lines.append("hosts:")
    for h in plan.hosts:
        labels = ",".join(f"{k}={v}" for k, v in h.labels.items())
        lines.append(f"  {h.name:8} {h.role:6} group={h.group} type={h.instance_type} cpus={h.num_cpus or '?'} "
                     f"gpus={h.num_gpus} object_store={_mib(h.object_store_bytes)} labels={labels}")
    lines.append("channels:")
    for c in plan.channels:
        extras = [c.distribution] + ([f"attributes {','.join(c.attribute_names)}"] if c.attribute_names else []) + (
            [f"skip up to {c.max_corrupted_records} corrupt"] if c.max_corrupted_records else [])
        where = f"/opt/ml/input/data/{c.name}" + ("_<epoch>" if c.input_mode == "Pipe" else "")
        lines.append(f"  {c.name}: {c.input_mode} {c.record_format} ({', '.join(extras)}) from {c.source} -> "
                     f"{where} on {', '.join(c.hosts)}")
    lines.append(f"run directory: {plan.run_dir}" + (" (on the head)" if plan.mode == "sagemaker" else ""))
    lines += [f"note: {note}" for note in plan.notes]
    return lines


def summary(cfg, plan) -> list[str]:
    """The plan in a few lines, as a run starts: what trains where, on what data."""
    t = cfg.trainer
    length = plural(t.steps, "step") if t.steps else plural(t.epochs, "epoch")
    workers = plural(plan.train_workers, "train worker")
    device = "GPU" if plan.use_gpu else "CPU"
    lines = [f"job {cfg.job}: {length} of {cfg.model.name}, batch {t.batch_size} x {workers} ({device})"]
    hosts = "; ".join(f"{h.name} {h.subcluster}{' (head)' if h.role == 'head' else ''} {h.group} "
                      f"{h.instance_type}, {plural(h.num_cpus, 'CPU')}" + (f", {plural(h.num_gpus, 'GPU')}"
                                                                        if h.num_gpus else "")
                      for h in plan.hosts)
    lines.append(f"hosts: {hosts}")
    lines.append("channels: " + "; ".join(f"{c.name} {c.input_mode} {c.record_format} from {c.source} -> "
                                          f"{', '.join(c.hosts)}" for c in plan.channels))
    lines += [f"note: {note}" for note in plan.notes if not note.startswith("CPUs scaled")]
    return lines


def _mib(size: int | None) -> str:
    return f"{size // 2**20}MiB" if size else "ray-default"
