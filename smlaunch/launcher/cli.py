"""`sm-launch`: run a job (`sm-launch CONFIG`), print its plan (`sm-launch plan CONFIG`) or submit it
to SageMaker (`sm-launch submit CONFIG [--dry-run]`).

Only argparse, yaml and pydantic are imported before a command is chosen, so `--help` answers at
once; torch and ray load when a job runs. Bad input ends in one `sm-launch: error:` line and exit
status 2 (config) or 1 (anything else), with the reason also written to the head host's
`output/failure` file as SageMaker expects.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

COMMANDS = ("run", "plan", "check", "submit", "inspect", "agent", "report")
RECORD_FORMATS = ("tfrecord", "recordio", "text", "whole")  # = pipelines.formats.FORMATS, without importing it
HELP = {"run": "run the job (the default command)",
        "plan": "print the resolved config and the launch plan; starts nothing",
        "check": "bring the cluster up on every host, run one task per host, tear it down",
        "submit": "create the SageMaker training job (uploads the code, local channels); --dry-run prints it"}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sm-launch",
        description="Train a PyTorch model on a heterogeneous cluster: Ray Data preprocessing on the "
                    "CPU hosts, Ray Train on the GPU hosts. On a SageMaker host (one with "
                    "/opt/ml/input/config/resourceconfig.json) every host of the job runs the same "
                    "command and takes its part; elsewhere the config's instance groups are simulated "
                    "as separate Ray nodes on this machine.",
        epilog="examples:\n  sm-launch configs/hetero.yaml\n  sm-launch plan configs/hetero.yaml "
               "--set trainer.steps=50\n  sm-launch submit configs/hetero.yaml --dry-run",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="{" + ",".join(COMMANDS) + "}")
    for name, text in HELP.items():
        cmd = sub.add_parser(name, help=text, description=text)
        cmd.add_argument("config", help="YAML job config, e.g. configs/hetero.yaml")
        cmd.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                         help="override a config field by dotted path (repeatable), e.g. trainer.steps=50")
        if name == "submit":
            cmd.add_argument("--dry-run", action="store_true",
                             help="print the CreateTrainingJob request as JSON; upload and create nothing")
            cmd.add_argument("--job-name", help="training job name (default: <job>-<UTC timestamp>)")
    text = "count the records of a data file and show their sizes; stops at the first corrupt byte"
    cmd = sub.add_parser("inspect", help=text, description=text)
    cmd.add_argument("path", help="a record file (or a FIFO)")
    cmd.add_argument("--format", required=True, choices=RECORD_FORMATS)
    cmd.add_argument("--fifo-wait", type=float, default=60.0, metavar="S",
                     help="PATH is a FIFO: seconds to wait for a writer (default %(default)s)")
    text = "play SageMaker's Pipe-mode agent for one channel: a FIFO <channel>_<epoch> per epoch"
    cmd = sub.add_parser("agent", help=text, description=text + ", fed from a folder or s3://bucket/prefix "
                         "(set AWS_ENDPOINT_URL for a local S3 server); any Pipe-mode program can read them")
    cmd.add_argument("--channel", required=True)
    cmd.add_argument("--source", required=True, help="a folder, or s3://bucket/prefix")
    cmd.add_argument("--data-dir", default="/opt/ml/input/data", help="where the FIFOs go (default %(default)s)")
    cmd.add_argument("--epochs", type=int, default=1)
    cmd.add_argument("--seed", type=int, help="shuffle the objects per epoch with this seed (ShuffleConfig)")
    cmd.add_argument("--record-wrapper", choices=("None", "RecordIO"), default="None")
    cmd.add_argument("--shard", metavar="I/N", help="ShardedByS3Key: this host's share, host I of N (0-based)")
    cmd.add_argument("--attribute-names", metavar="A,B", help="--source is an augmented manifest (JSON Lines): "
                     "stream one RecordIO record per named attribute per line, `-ref` ones as the object's bytes")
    cmd.add_argument("--reader-wait", type=float, default=120.0, metavar="S",
                     help="seconds to wait for a reader to open each FIFO (default %(default)s)")
    text = "draw a run's report again (Markdown, PNG plots, TensorBoard) and recompute the verdict and advisor"
    cmd = sub.add_parser("report", help=text, description=text)
    cmd.add_argument("run_dir", help="a run directory, an output/data folder, or a report.json")
    cmd.add_argument("--price", action="append", default=[], metavar="TYPE=USD",
                     help="USD per instance-hour for an ml.* type, over the run's prices (repeatable)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in COMMANDS and not argv[0].startswith("-"):
        argv.insert(0, "run")
    args = _parser().parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # CloudWatch and pipes see each line as it happens
    if args.command is None:
        _parser().print_help()
        return 2
    from smlaunch.cluster.sagemaker_env import base_dir, is_sagemaker_host
    from smlaunch.errors import ConfigError, UserError, describe_error
    from smlaunch.launcher.stopping import StopRequest

    if args.command == "inspect":
        return _inspect(args.path, args.format, args.fifo_wait)
    if args.command == "agent":
        return _agent(args)
    if args.command == "report":
        return _report(args)
    if args.command == "submit":
        return _submit(args)
    on_sagemaker = is_sagemaker_host()
    failure_dir = str(base_dir()) if on_sagemaker else None
    stop = StopRequest().install()
    try:
        from smlaunch.cluster.environment import detect_local_environment
        from smlaunch.config import load_config

        cfg = load_config(args.config, args.overrides)
        if on_sagemaker:
            return _on_sagemaker(args.command, cfg, stop)
        from smlaunch.cluster.plan import build_plan

        plan = build_plan(cfg, detect_local_environment())
        failure_dir = plan.head_host.opt_ml
        if args.command == "plan":
            _print_plan(cfg, plan)
            return 0
        return _local(args.command, cfg, plan, stop)
    except KeyboardInterrupt:
        _fail(failure_dir, "interrupted", keep_existing=on_sagemaker)
        return 130
    except ConfigError as exc:
        _fail(failure_dir, str(exc), keep_existing=on_sagemaker)
        return 2
    except UserError as exc:
        _fail(failure_dir, str(exc), keep_existing=on_sagemaker)
        return 1
    except Exception as exc:  # Ray wraps errors raised in tasks and workers
        reason = describe_error(exc)
        if reason.startswith("internal error"):
            traceback.print_exc()
        _fail(failure_dir, reason, keep_existing=on_sagemaker)
        return 1


def _submit(args) -> int:
    """Runs on the user's machine, never on a host: errors go to stderr only (no failure file)."""
    from smlaunch.config import load_config
    from smlaunch.errors import ConfigError, UserError
    from smlaunch.launcher.submit import submit

    try:
        submit(load_config(args.config, args.overrides), dry_run=args.dry_run, job_name=args.job_name)
        return 0
    except ConfigError as exc:
        _fail(None, str(exc))
        return 2
    except UserError as exc:
        _fail(None, str(exc))
        return 1
    except KeyboardInterrupt:
        return 130


def _inspect(path: str, format: str, fifo_wait_s: float) -> int:
    from smlaunch.errors import UserError
    from smlaunch.launcher.inspect_cmd import inspect_path

    try:
        inspect_path(path, format, fifo_wait_s=fifo_wait_s)
        return 0
    except OSError as exc:
        reason = f"{path}: {exc.strerror or exc}"
    except UserError as exc:
        reason = str(exc)
    print(f"sm-launch: error: {reason}", file=sys.stderr)
    return 1


def _report(args) -> int:
    from smlaunch.errors import UserError
    from smlaunch.launcher.report import summary_lines
    from smlaunch.launcher.report_cmd import rerender

    try:
        path, report = rerender(args.run_dir, args.price)
    except UserError as exc:
        print(f"sm-launch: error: {exc}", file=sys.stderr)
        return 1
    for line in summary_lines(report):
        print(line)
    print(f"report: {path} (summary.md, throughput.png, data_wait.png, utilisation.png, tensorboard/ beside it)")
    return 0


def _agent(args) -> int:
    from smlaunch.errors import UserError
    from smlaunch.pipelines.agent import PipeAgent
    from smlaunch.pipelines.objects import local_objects, objects_for_host, s3_objects

    try:
        if args.attribute_names:
            from smlaunch.pipelines.manifest import manifest_objects
            from smlaunch.pipelines.objects import ObjectSource

            objects = manifest_objects(ObjectSource(args.source), args.attribute_names.split(","))
        else:
            objects = s3_objects(args.source) if args.source.startswith("s3://") else local_objects(args.source)
        if args.shard:
            index, _, count = args.shard.partition("/")
            if not (index.isdigit() and count.isdigit() and int(index) < int(count)):
                raise UserError(f"--shard {args.shard}: expected I/N with 0 <= I < N, e.g. 0/2")
            objects = objects_for_host(objects, "ShardedByS3Key", int(index), int(count))
        print(f"agent: {len(objects)} objects for channel '{args.channel}', {args.epochs} epoch(s) into "
              f"{args.data_dir}/{args.channel}_<epoch>", flush=True)
        agent = PipeAgent(args.data_dir, args.channel, objects, args.epochs, seed=args.seed,
                          record_wrapper=args.record_wrapper, reader_wait_s=args.reader_wait)
        agent.run()
        print(f"agent: done, {agent.bytes_written} bytes written", flush=True)
        return 0
    except UserError as exc:
        print(f"sm-launch: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _local(command: str, cfg, plan, stop) -> int:
    from smlaunch.launcher.report import summary_lines
    from smlaunch.launcher.run import run_local

    if command == "check":
        from smlaunch.cluster.local import LocalCluster
        from smlaunch.launcher.sagemaker_run import check_hosts

        with LocalCluster(plan):
            answers = check_hosts(plan)["hosts"]
        print(f"all {len(answers)} simulated hosts ran a task: {', '.join(answers)}")
        return 0
    report = run_local(cfg, plan, stop=stop)
    for line in summary_lines(report):
        print(line)
    print(f"report: {report['path']}")
    return 143 if report["summary"].get("stopped_at_step") is not None else 0


def _on_sagemaker(command: str, cfg, stop) -> int:
    from smlaunch.cluster.environment import detect_local_environment
    from smlaunch.cluster.sagemaker_env import read_sagemaker_environment
    from smlaunch.cluster.sagemaker_plan import build_sagemaker_plan
    from smlaunch.launcher.report import summary_lines
    from smlaunch.launcher.sagemaker_run import run_host

    sm = read_sagemaker_environment()
    plan = build_sagemaker_plan(cfg, sm, detect_local_environment())
    if command == "plan":
        _print_plan(cfg, plan)
        return 0
    outcome = run_host(cfg, plan, sm, stop, check_only=command == "check")
    if outcome.exit_code == 1:
        _fail(sm.base_dir, outcome.message, keep_existing=True)
        return 1
    print(f"sm-launch: {plan.current_host}: {outcome.message}", flush=True)
    if outcome.report and "summary" in outcome.report:
        for line in summary_lines(outcome.report):
            print(line)
        print(f"report: {outcome.report['path']}")
    return outcome.exit_code


def _fail(failure_dir: str | None, reason: str, keep_existing: bool = False) -> None:
    """One line on stderr and, on the head (local) or this host (SageMaker), `output/failure`.

    SageMaker shows the first 1024 characters as the job's FailureReason; an existing file is
    kept on SageMaker, as the training toolkit does, so the first failure wins.
    """
    line = " ".join(reason.split())
    print(f"sm-launch: error: {line}", file=sys.stderr, flush=True)
    if failure_dir is not None:
        failure = Path(failure_dir) / "output" / "failure"
        failure.parent.mkdir(parents=True, exist_ok=True)
        if not (keep_existing and failure.exists()):
            failure.write_text(line[:1024] + "\n")


def _print_plan(cfg, plan) -> None:
    import yaml

    print("# resolved config")
    print(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), end="")
    print("\n# plan")
    if plan.mode == "sagemaker":
        me = plan.host(plan.current_host)
        print(f"SageMaker job: this host is {me.name} ({me.role}, {me.group})")
        print(f"head: {plan.head} ({plan.head_host.group}, {plan.head_host.instance_type}) at {plan.head_address}")
    else:
        print(f"head: {plan.head} ({plan.head_host.group}, {plan.head_host.instance_type})")
    print(f"train workers: {plan.train_workers} ({'GPU' if plan.use_gpu else 'CPU'}), "
          f"selector {plan.train_selector}")
    print(f"preprocessing selector: {plan.preprocess_selector}"
          + ("" if plan.data_selector else " (no CPU-only group: the train hosts' CPUs)"))
    print("hosts:")
    for h in plan.hosts:
        labels = ",".join(f"{k}={v}" for k, v in h.labels.items())
        print(f"  {h.name:8} {h.role:6} group={h.group} type={h.instance_type} cpus={h.num_cpus or '?'} "
              f"gpus={h.num_gpus} object_store={_mib(h.object_store_bytes)} labels={labels}")
    print("channels:")
    for c in plan.channels:
        extras = [c.distribution] + ([f"attributes {','.join(c.attribute_names)}"] if c.attribute_names else []) + (
            [f"skip up to {c.max_corrupted_records} corrupt"] if c.max_corrupted_records else [])
        where = f"/opt/ml/input/data/{c.name}" + ("_<epoch>" if c.input_mode == "Pipe" else "")
        print(f"  {c.name}: {c.input_mode} {c.record_format} ({', '.join(extras)}) from {c.source} -> "
              f"{where} on {', '.join(c.hosts)}")
    print(f"run directory: {plan.run_dir}" + (" (on the head)" if plan.mode == "sagemaker" else ""))
    for note in plan.notes:
        print(f"note: {note}")


def _mib(size: int | None) -> str:
    return f"{size // 2**20}MiB" if size else "ray-default"


if __name__ == "__main__":
    sys.exit(main())
