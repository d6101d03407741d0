"""Hostile and careless inputs: a config cannot run code, credentials in the environment are
printed nowhere, and a Ray client without the cluster's token cannot join it.

The token test starts one Ray head the way a SageMaker host does (`RayNode` + `start_args`, the
token in the environment, never argv) and points bare `ray.init` clients at it. A real run with
sentinel credentials is checked in `tests/launcher/test_end_to_end.py` (its tiny job), so the
suite trains that job once.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
SENTINELS = {
    "AWS_ACCESS_KEY_ID": "AKIASENTINEL0000KEYID",
    "AWS_SECRET_ACCESS_KEY": "sentinel-secret-0d4b2e8f9a",
    "AWS_SESSION_TOKEN": "sentinel-session-6f1c9e7a3b",
    "SMLAUNCH_RAY_TOKEN": "sentinel-ray-token-" + "7" * 32,
}


def sm_launch(*args: str, env_extra: dict | None = None, timeout: float = 120, cwd=None):
    env = {**os.environ, **(env_extra or {})}
    env.pop("SAGEMAKER_BASE_DIR", None)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "smlaunch.launcher.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )


# ---- a config is data ---------------------------------------------------------------------------


def _payloads(marker: Path) -> list[str]:
    command = f"touch {marker}"
    return [
        f'!!python/object/apply:os.system ["{command}"]',
        f'!!python/object/apply:subprocess.call [["sh", "-c", "{command}"]]',
        f'!!python/object/new:subprocess.Popen [["sh", "-c", "{command}"]]',
        "!!python/name:os.system",
        "!!python/module:os",
    ]


@pytest.mark.parametrize("index", range(5))
def test_yaml_tags_in_a_config_file_do_not_run(tmp_path, index):
    marker = tmp_path / "pwned"
    payload = _payloads(marker)[index]
    config = tmp_path / "job.yaml"
    config.write_text(TINY.read_text().replace("job: tiny", f"job: {payload}"))
    result = sm_launch("plan", str(config))
    assert result.returncode == 2
    assert result.stderr.startswith(
        f"sm-launch: error: config file {config} line 2: not valid YAML (could not "
        "determine a constructor for the tag 'tag:yaml.org,2002:python/"
    )
    assert result.stderr.count("\n") == 1
    assert not marker.exists()


@pytest.mark.parametrize("index", range(5))
def test_yaml_tags_in_set_values_do_not_run(tmp_path, index):
    marker = tmp_path / "pwned"
    payload = _payloads(marker)[index]
    result = sm_launch("plan", str(TINY), "--set", f"job={payload}")
    assert result.returncode == 2
    assert result.stderr == f"sm-launch: error: --set {'job=' + payload!r}: value is not valid YAML\n"
    assert not marker.exists()


@pytest.mark.parametrize(
    "function",
    [
        "os.system",  # a dotted name, not module:function
        "__import__('os').system('touch pwned')",
        "os:system('touch pwned')",
        "os:system; touch pwned",
        "eval:x",  # a valid-looking module name that is not a module... eval is a builtin, not a module
        "$(touch pwned):f",
    ],
)
def test_a_user_op_must_be_module_colon_function(tmp_path, function):
    result = sm_launch("plan", str(TINY), "--set", f'pipeline.ops.2={{op: user, function: "{function}"}}', cwd=tmp_path)
    assert not (tmp_path / "pwned").exists()
    if function == "eval:x":  # well-formed: refused only when imported, before any cluster starts
        result = sm_launch(
            str(TINY),
            "--set",
            "pipeline.ops.2={op: user, function: 'eval:x'}",
            "--set",
            f"run.dir={tmp_path}",
            cwd=tmp_path,
        )
        assert result.returncode == 2
        assert result.stderr.splitlines()[-1] == (
            f"sm-launch: error: pipeline.ops.2.function: cannot import eval from "
            f"{tmp_path} (ModuleNotFoundError: No module named 'eval')"
        )
        return
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "pipeline.ops.2.function: String should match pattern" in result.stderr


STANDARD_LIBRARY = [
    "os:system",
    "subprocess:call",
    "builtins:eval",
    "importlib:import_module",
    "shutil:rmtree",
    "sys:exit",
    "pickle:loads",
    "os.path:join",
    "posix:system",
    "_posixsubprocess:fork_exec",
]
FIELDS = {  # each field that names a function, and the --set values that put `path` in it
    "model.factory": lambda path: [f"model={{factory: '{path}', params: {{command: 'touch pwned'}}}}"],
    "task.loss": lambda path: [f"task={{loss: '{path}'}}"],
    "task.metrics": lambda path: [f"task={{loss: 'x:y', metrics: '{path}', predict: 'x:y'}}"],
    "pipeline.ops.2.function": lambda path: [f"pipeline.ops.2={{op: map, function: '{path}'}}"],
    "optimizer.factory": lambda path: [f"optimizer={{factory: '{path}'}}"],
    "schedule.factory": lambda path: [f"schedule={{factory: '{path}'}}"],
    "trainer.callbacks": lambda path: [f"trainer.callbacks=['{path}']"],
    "trainer.loop": lambda path: [f"trainer.loop='{path}'"],
}


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("path", STANDARD_LIBRARY)
def test_a_standard_library_function_is_refused_at_load_naming_the_field(field, path):
    """`os:system` as a model factory, `builtins:eval` as a loss: a config that can name Python's own
    functions is a command line. Refused when the config loads (so at `plan`, before any import)."""
    from smlaunch.config import load_config
    from smlaunch.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        load_config(str(TINY), FIELDS[field](path))
    message = str(refused.value)
    assert "\n" not in message and f": {field}: " in message, message
    top = path.split(":")[0].split(".")[0]
    assert f"a function of Python's standard library ({top}): a config names your own code" in message, message


def test_plan_refuses_os_system_as_a_model_factory_and_runs_nothing(tmp_path):
    result = sm_launch("plan", str(TINY), "--set", FIELDS["model.factory"]("os:system")[0], cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"sm-launch: error: {TINY}: model.factory: a function of Python's standard library")
    assert not (tmp_path / "pwned").exists()
    # the rule also stands where the code is imported (a data host, a rank), whatever built the name
    from smlaunch.errors import ConfigError
    from smlaunch.user_code import resolve

    with pytest.raises(ConfigError, match=r"^model.factory: os:system is a function of Python's standard library"):
        resolve("os:system", "model.factory")


@pytest.mark.parametrize("ending", ["import sys\nsys.exit(3)", "exit()", "raise KeyboardInterrupt"])
def test_a_module_that_ends_the_process_as_it_imports_is_one_clear_line(tmp_path, ending):
    """A user's script with its `sys.exit()` at the top level: importing it would end `plan` (exit 3,
    no message) or a data host. It is a config error naming the field."""
    (tmp_path / "quits.py").write_text(f"{ending}\n\ndef model(**kw):\n    pass\n")
    result = sm_launch("plan", str(TINY), "--set", "model={factory: 'quits:model'}", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stdout + result.stderr
    kind = "KeyboardInterrupt" if "Keyboard" in ending else "SystemExit"
    assert result.stderr.startswith(f"sm-launch: error: model.factory: importing quits from {tmp_path} raised {kind}(")
    assert "must not end the process as it imports" in result.stderr


def test_yaml_aliases_do_not_blow_up(tmp_path):
    """A 'billion laughs' of aliases: safe_load shares the nodes; validation must still refuse it
    quickly, since `job` must be a string."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [
        f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, "
        f"*a{i - 1}, *a{i - 1}]"
        for i in range(1, 9)
    ]
    config = tmp_path / "job.yaml"
    config.write_text("\n".join(lines) + "\njob: *a8\n")
    started = time.monotonic()
    result = sm_launch("plan", str(config), timeout=60)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert time.monotonic() - started < 30


# ---- credentials are printed nowhere --------------------------------------------------------------


def _leaks(texts: dict[str, str]) -> list[str]:
    return [f"{name} in {where}" for where, text in texts.items() for name, value in SENTINELS.items() if value in text]


def test_plan_prints_no_credentials(tmp_path):
    result = sm_launch("plan", str(TINY), env_extra=SENTINELS)
    assert result.returncode == 0, result.stderr
    assert not _leaks({"stdout": result.stdout, "stderr": result.stderr})


def test_plan_on_a_sagemaker_host_prints_no_credentials(tmp_path):
    from smlaunch.cluster.host_tree import write_host_tree

    tree = write_host_tree(
        tmp_path / "opt/ml",
        "algo-1",
        [{"instance_group_name": "homogeneousCluster", "instance_type": "ml.g5.xlarge", "hosts": ["algo-1"]}],
        {"train": "File", "validation": "File"},
        hyperparameters={"lr": 0.1},
    )
    cfg = yaml.safe_load(TINY.read_text())
    cfg["cluster"] = {"instance_groups": [cfg["cluster"]["instance_groups"][0]]}
    cfg["channels"] = {
        "train": {"source": "builtin:digits/train", "instance_groups": ["gpu"]},
        "validation": {"source": "builtin:digits/validation", "instance_groups": ["gpu"]},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(cfg))
    result = sm_launch("plan", str(tmp_path / "job.yaml"), env_extra={**SENTINELS, "SAGEMAKER_BASE_DIR": str(tree)})
    assert result.returncode == 0, result.stderr
    assert "SageMaker job: this host is algo-1" in result.stdout
    assert not _leaks({"stdout": result.stdout, "stderr": result.stderr})


# ---- the cluster token -----------------------------------------------------------------------------

CLIENT = """
import os, sys, time
import ray
started = time.monotonic()
try:
    ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
    print("JOINED", ray.cluster_resources().get("CPU"))
    ray.shutdown()
except Exception as exc:
    print("REFUSED", type(exc).__name__, round(time.monotonic() - started, 1))
"""


@pytest.mark.ray
def test_a_ray_client_without_the_cluster_token_cannot_join(tmp_path):
    from smlaunch.cluster.node import RayNode, start_args
    from smlaunch.cluster.plan import HostPlan

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    host = HostPlan(
        name="algo-1",
        group="g",
        instance_type="ml.c5.xlarge",
        role="head",
        subcluster="train",
        num_cpus=1,
        num_gpus=0,
        opt_ml=str(tmp_path),
        labels={"sm-host": "algo-1"},
    )
    token = os.urandom(32).hex()
    temp_dir = tempfile.mkdtemp(prefix="smsec", dir="/tmp")  # Ray's socket paths must stay short
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token, RAY_USAGE_STATS_ENABLED="0")
    node = RayNode(
        start_args(
            host, head_address=None, node_ip="127.0.0.1", port=port, temp_dir=temp_dir, object_store_bytes=80 * 2**20
        ),
        tmp_path / "ray-node.log",
        env,
        temp_dir,
    ).start()
    try:
        from smlaunch.cluster.rendezvous import wait_for_port

        wait_for_port("127.0.0.1", port, 120, "Ray head", alive=lambda: node.exit_code() is None)
        address = f"127.0.0.1:{port}"

        def client(**overrides: str | None) -> tuple[str, float]:
            client_env = {k: v for k, v in env.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
            client_env.update({k: v for k, v in overrides.items() if v is not None})
            started = time.monotonic()
            out = subprocess.run(
                [sys.executable, "-c", CLIENT, address], capture_output=True, text=True, timeout=90, env=client_env
            )
            lines = [line for line in out.stdout.splitlines() if line.startswith(("JOINED", "REFUSED"))]
            assert lines, out.stdout[-2000:] + out.stderr[-2000:]
            return lines[-1], time.monotonic() - started

        refused = {
            "no token": {},
            "token mode, no token": {"RAY_AUTH_MODE": "token"},
            "another token": {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": os.urandom(32).hex()},
        }
        with ThreadPoolExecutor(len(refused)) as pool:  # each refusal can take 20 s: at once, not in turn
            answers = dict(zip(refused, pool.map(lambda o: client(**o), refused.values()), strict=False))
        for who, (answer, took) in answers.items():
            print(f"client with {who}: {answer}")
            assert answer.startswith("REFUSED"), f"a client with {who} joined: {answer}"
            assert took < 60, f"a client with {who} was refused only after {took:.0f} s"
        answer, _ = client(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)  # the control: the token works
        assert answer == "JOINED 1.0"
        assert token not in (tmp_path / "ray-node.log").read_text()
    finally:
        node.stop()


# ---- secrets in the config: shown by name, never by value (issue 79) -----------------------------

HETERO = ROOT / "configs" / "hetero.yaml"
SECRET = "hf_sentinel_9b2f0c7d1e"
SECRET_SETS = [
    "--set",
    f"sagemaker.environment={{HF_TOKEN: {SECRET}, WANDB_API_KEY: {SECRET}-wandb, db_password: {SECRET}-db, "
    "NCCL_DEBUG: WARN}",
    "--set",
    f"kuberay.environment={{HF_TOKEN: {SECRET}, NCCL_DEBUG: WARN}}",
]


def test_a_secret_in_the_config_s_environment_shows_as_stars_in_plan_json_and_dry_run(tmp_path):
    """`plan`, `plan --json` and `submit --dry-run`: each name is there, no secret value is; a
    variable whose name looks like no secret keeps its value."""
    import json

    planned = sm_launch("plan", str(HETERO), *SECRET_SETS, cwd=tmp_path)
    as_json = sm_launch("plan", str(HETERO), "--json", *SECRET_SETS, cwd=tmp_path)
    dry = sm_launch("submit", str(HETERO), "--dry-run", *SECRET_SETS, cwd=tmp_path)
    for result in (planned, as_json, dry):
        assert result.returncode == 0, result.stderr
        assert SECRET not in result.stdout + result.stderr
    assert (
        "    HF_TOKEN: '***'\n    WANDB_API_KEY: '***'\n    db_password: '***'\n    NCCL_DEBUG: WARN\n"
        in planned.stdout
    )
    shown = json.loads(as_json.stdout)["config"]
    assert (
        shown["sagemaker"]["environment"]["HF_TOKEN"] == "***" and shown["kuberay"]["environment"]["HF_TOKEN"] == "***"
    )
    environment = json.loads(dry.stdout)["Environment"]
    assert (environment["HF_TOKEN"], environment["NCCL_DEBUG"]) == ("***", "WARN")
    assert environment["SMLAUNCH_RAY_TOKEN"] == "<generated, 43 chars>"


def test_kuberay_puts_a_secret_in_a_secret_the_pods_reference_and_nowhere_else(tmp_path):
    """The manifest's one copy of the value is the Kubernetes Secret; the ConfigMap's config and
    every pod spec hold none (a pod reads it by `secretKeyRef`)."""
    result = sm_launch("kuberay", str(HETERO), "--image", "img:1", *SECRET_SETS, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    secret, config_map, job = yaml.safe_load_all(result.stdout)
    assert (secret["kind"], secret["metadata"]["name"]) == ("Secret", "hetero-digits-env")
    assert secret["stringData"] == {"HF_TOKEN": SECRET}
    assert SECRET not in yaml.safe_dump(config_map) + yaml.safe_dump(job)
    assert yaml.safe_load(config_map["data"]["config.yaml"])["kuberay"]["environment"]["HF_TOKEN"] == "***"
    cluster = job["spec"]["rayClusterSpec"]
    pods = [cluster["headGroupSpec"]] + cluster["workerGroupSpecs"]
    for group in pods:
        env = {e["name"]: e for e in group["template"]["spec"]["containers"][0]["env"]}
        assert env["HF_TOKEN"] == {
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "hetero-digits-env", "key": "HF_TOKEN"}},
        }
        assert env["NCCL_DEBUG"] == {"name": "NCCL_DEBUG", "value": "WARN"}
    assert "the Secret hetero-digits-env holds the values of HF_TOKEN" in result.stderr


def test_hyperparameters_with_secret_names_are_masked_in_the_entry_script_s_line(tmp_path, monkeypatch, capsys):
    """SageMaker passes hyperparameters as arguments; the entry script names the ones it ignores."""
    from smlaunch.launcher.sm_entry import main
    from smlaunch.redaction import masked_arguments

    assert masked_arguments(["--api_key", "k1", "--lr", "0.1", "--HF_TOKEN=t1", "--auth"]) == [
        "--api_key",
        "***",
        "--lr",
        "0.1",
        "--HF_TOKEN=***",
        "--auth",
    ]
    monkeypatch.setenv("SAGEMAKER_BASE_DIR", str(tmp_path))
    assert main(["--config", "missing.yaml", "--HF_TOKEN", SECRET, "--epochs", "3"]) == 1
    out = capsys.readouterr().out
    assert "arguments ['--HF_TOKEN', '***', '--epochs', '3']: sm-launch reads" in out and SECRET not in out


# ---- what ships from the code folder ------------------------------------------------------------


def _project_with_credentials(folder: Path) -> None:
    """A user's folder as found in the wild: code, and the credentials beside it."""
    (folder / "mine.py").write_text("def loss(model, batch):\n    return model(batch['image']).sum()\n")
    (folder / "id_map.py").write_text("IDS = {}\n")  # a module named like a key: code, and it ships
    planted = [
        ".env",
        ".env.production",
        ".aws/credentials",
        ".ssh/id_ed25519",
        "id_rsa",
        "certs/server.pem",
        "tls.key",
        ".netrc",
        "scratch/big.npy",
    ]
    for rel in planted:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(f"SENTINEL-{rel}\n")
    (folder / ".smlaunchignore").write_text("# not code\nscratch/\n")


def test_credentials_and_ignored_files_stay_out_of_the_code_that_ships_and_plan_says_so(tmp_path):
    """`plan` counts the files that ship and names what it left out and why; submit's tarball (its
    `user_code/`) holds exactly those files. Ray's working_dir for `--address` leaves out the same
    (tests/launcher/attached/test_attached.py's project, on a real cluster)."""
    import tarfile

    from smlaunch.launcher.sagemaker.sourcedir import pack_sourcedir
    from smlaunch.user_code import shipment

    _project_with_credentials(tmp_path)
    result = sm_launch("plan", str(TINY), "--set", "task={loss: 'mine:loss'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    code = next(line for line in result.stdout.splitlines() if line.startswith("code: "))
    assert code == (
        f"code: {tmp_path} (3 files, 0.00 MiB) ships with the job for mine:loss; left out: .aws/, .ssh/, .env, "
        ".env.production and 4 more (may hold credentials); scratch/ (listed in .smlaunchignore)"
    )
    shipped = shipment(str(tmp_path))
    assert [rel for rel, _, _ in shipped.files] == [".smlaunchignore", "id_map.py", "mine.py"]
    names = pack_sourcedir({"job": "x"}, tmp_path / "sourcedir.tar.gz", shipped.files)
    assert [n for n in names if n.startswith("user_code/")] == [f"user_code/{rel}" for rel, _, _ in shipped.files]
    with tarfile.open(tmp_path / "sourcedir.tar.gz") as tar:
        texts = [tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()]  # type: ignore[union-attr]
    assert len(texts) == len(names) and not [t for t in texts if b"SENTINEL-" in t]


def test_a_code_folder_of_many_small_files_is_refused_by_count_unless_ignored(tmp_path):
    """Tiny files stay under the byte limit: an ImageNet of them beside the code is refused by count,
    soon (the walk stops there), and `.smlaunchignore` naming the folder lets the code ship alone."""
    from smlaunch.errors import ConfigError
    from smlaunch.user_code import shipment

    (tmp_path / "mine.py").write_text("")
    (tmp_path / "images").mkdir()
    for i in range(60):
        (tmp_path / "images" / f"{i:05d}.jpg").write_bytes(b"")
    with pytest.raises(ConfigError) as refused:
        shipment(str(tmp_path), files_limit=50)
    assert str(refused.value).startswith(
        f"the code folder {tmp_path} holds over 50 files (images (50), mine.py (1), ...)"
    )
    (tmp_path / ".smlaunchignore").write_text("images/\n")
    shipped = shipment(str(tmp_path), files_limit=50)
    assert [rel for rel, _, _ in shipped.files] == [".smlaunchignore", "mine.py"] and shipped.ignored == ["images/"]
