"""The subcommands of `sm-launch`, one module each.

A module offers `add_arguments(parser)` (its flags; imports nothing heavy) and
`main(args, failure) -> exit status`, which runs inside `cli.main`'s error boundary: it raises
`ConfigError`/`UserError` for the user's mistakes and points `failure` at the `/opt/ml` tree whose
`output/failure` should carry the reason. `run` and `check` share a module, as do `status`, `logs` and `stop`.
"""

COMMANDS = {
    "run": ("smlaunch.launcher.commands.run", "run the job (the default command)"),
    "plan": ("smlaunch.launcher.commands.plan", "check the config and print the launch plan; starts nothing"),
    "check": (
        "smlaunch.launcher.commands.run",
        "bring the cluster up on every host, run one task per host, tear it down",
    ),
    "simulate": (
        "smlaunch.launcher.commands.simulate",
        "run the config's SageMaker path here: one sm-launch process and /opt/ml tree per host",
    ),
    "submit": (
        "smlaunch.launcher.commands.submit",
        "create the SageMaker training job (uploads the code, local channels); --dry-run prints it",
    ),
    "kuberay": (
        "smlaunch.launcher.commands.kuberay",
        "print the job as a KubeRay RayJob manifest (and its config as a ConfigMap) for kubectl apply",
    ),
    "status": ("smlaunch.launcher.commands.jobs", "a submitted job's status, hosts, times and failure reason"),
    "logs": (
        "smlaunch.launcher.commands.jobs",
        "a submitted job's CloudWatch logs, every host's merged in time order and labelled; --follow",
    ),
    "stop": (
        "smlaunch.launcher.commands.jobs",
        "stop a submitted job: every host checkpoints at the next step boundary and exits",
    ),
    "tune": (
        "smlaunch.launcher.commands.tune",
        "the job as a SageMaker hyperparameter tuning job over config keys; --dry-run prints it; --status NAME",
    ),
    "track": (
        "smlaunch.launcher.commands.track",
        "send a run's tracked params, metrics and artifacts to its MLflow run afterwards (--replay RUN_DIR)",
    ),
    "report": (
        "smlaunch.launcher.commands.report",
        "draw a run's report again (Markdown, PNG plots, TensorBoard) and recompute the verdict and advisor",
    ),
    "inspect": (
        "smlaunch.launcher.commands.inspect",
        "count the records of a data file and show their sizes; stops at the first corrupt byte",
    ),
    "agent": (
        "smlaunch.launcher.commands.agent",
        "play SageMaker's Pipe-mode agent for one channel: a FIFO <channel>_<epoch> per epoch",
    ),
}
DEFAULT = "run"
"""`sm-launch CONFIG` means `sm-launch run CONFIG`."""
