"""`sm-launch`: run a job (`sm-launch CONFIG`) or print its plan (`sm-launch plan CONFIG`).

Only argparse, yaml and pydantic are imported before a command is chosen, so `--help` answers at
once; torch and ray load when a job runs. Bad input ends in one `sm-launch: error:` line and exit
status 2 (config) or 1 (anything else), with the reason also written to the head host's
`output/failure` file as SageMaker expects.
"""

from __future__ import annotations

import argparse
import re
import sys
import traceback
from pathlib import Path

COMMANDS = ("run", "plan")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sm-launch",
        description="Train a PyTorch model on a heterogeneous cluster: Ray Data preprocessing on the "
                    "CPU hosts, Ray Train on the GPU hosts. Locally, the config's instance groups are "
                    "simulated as separate Ray nodes on this machine.",
        epilog="examples:\n  sm-launch configs/hetero.yaml\n  sm-launch plan configs/hetero.yaml "
               "--set trainer.steps=50",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="{run,plan}")
    for name, text in (("run", "run the job (the default command)"),
                       ("plan", "print the resolved config and the launch plan; starts nothing")):
        cmd = sub.add_parser(name, help=text, description=text)
        cmd.add_argument("config", help="YAML job config, e.g. configs/hetero.yaml")
        cmd.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                         help="override a config field by dotted path (repeatable), e.g. trainer.steps=50")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in COMMANDS and not argv[0].startswith("-"):
        argv.insert(0, "run")
    args = _parser().parse_args(argv)
    if args.command is None:
        _parser().print_help()
        return 2
    from smlaunch.errors import ConfigError, UserError

    plan = None
    try:
        from smlaunch.cluster.environment import detect_local_environment, is_sagemaker_host
        from smlaunch.cluster.plan import build_plan
        from smlaunch.config import load_config

        cfg = load_config(args.config, args.overrides)
        if is_sagemaker_host():
            raise UserError("this is a SageMaker host (/opt/ml/input/config/resourceconfig.json exists); "
                            "multi-host SageMaker launch is not available yet, only the local simulation")
        plan = build_plan(cfg, detect_local_environment())
        if args.command == "plan":
            _print_plan(cfg, plan)
            return 0
        from smlaunch.launcher.report import summary_lines
        from smlaunch.launcher.run import run_local

        report = run_local(cfg, plan)
        for line in summary_lines(report):
            print(line)
        print(f"report: {report['path']}")
        return 0
    except KeyboardInterrupt:
        _fail(plan, "interrupted")
        return 130
    except ConfigError as exc:
        _fail(plan, str(exc))
        return 2
    except UserError as exc:
        _fail(plan, str(exc))
        return 1
    except Exception as exc:  # Ray wraps errors raised in tasks and workers
        reason = user_error_in(exc)
        if reason is None:
            traceback.print_exc()
            reason = f"internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        _fail(plan, reason)
        return 1


_RAISED = re.compile(r"(smlaunch(?:\.\w+)+)\.(\w+): (.+)")


def user_error_in(exc: BaseException) -> str | None:
    """The message of a `UserError` raised in a Ray task or train worker and wrapped by Ray.

    Ray re-raises worker exceptions wrapped (RayTaskError, WorkerGroupError) and often only as
    text, so the text is searched for `smlaunch.<module>.<Class>: message` and the class is
    checked to be a `UserError` before its message is trusted.
    """
    import importlib

    from smlaunch.errors import UserError

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, UserError):
            return str(exc)
        texts = [str(exc)] + [str(e) for e in getattr(exc, "worker_failures", {}).values()]
        for match in _RAISED.finditer("\n".join(texts)):
            try:
                cls = getattr(importlib.import_module(match.group(1)), match.group(2), None)
            except ImportError:
                continue
            if isinstance(cls, type) and issubclass(cls, UserError):
                return match.group(3).strip()
        exc = exc.__cause__ or exc.__context__
    return None


def _fail(plan, reason: str) -> None:
    line = " ".join(reason.split())
    print(f"sm-launch: error: {line}", file=sys.stderr)
    if plan is not None:
        failure = Path(plan.head_host.opt_ml) / "output" / "failure"
        failure.parent.mkdir(parents=True, exist_ok=True)
        failure.write_text(line[:1024] + "\n")


def _print_plan(cfg, plan) -> None:
    import yaml

    print("# resolved config")
    print(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), end="")
    print("\n# plan")
    print(f"head: {plan.head} ({plan.head_host.group}, {plan.head_host.instance_type})")
    print(f"train workers: {plan.train_workers} ({'GPU' if plan.use_gpu else 'CPU'}), "
          f"selector {plan.train_selector}")
    print(f"preprocessing selector: {plan.data_selector or 'none (no CPU-only group)'}")
    print("hosts:")
    for h in plan.hosts:
        labels = ",".join(f"{k}={v}" for k, v in h.labels.items())
        print(f"  {h.name:8} {h.role:6} group={h.group} type={h.instance_type} cpus={h.num_cpus} "
              f"gpus={h.num_gpus} labels={labels}")
    print("channels:")
    for c in plan.channels:
        print(f"  {c.name}: {c.input_mode} {c.record_format} from {c.source} -> "
              f"/opt/ml/input/data/{c.name} on {', '.join(c.hosts)}")
    print(f"run directory: {plan.run_dir}")
    for note in plan.notes:
        print(f"note: {note}")


if __name__ == "__main__":
    sys.exit(main())
