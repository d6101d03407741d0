"""`submit --data-hosts auto|N`, `--from-report` and `sagemaker.data_hosts` (issue 42): the data
group's InstanceCount in the request `--dry-run` prints, `plan`'s line, and the one-line refusal
without a report. Dry runs only: nothing is uploaded or sent, so no server is needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from smlaunch.config import load_config
from smlaunch.launcher.cli import main
from smlaunch.launcher.sagemaker.request_check import validate_request
from support.constructed_runs import constructed_report, write_run

ROOT = Path(__file__).resolve().parents[3]
HETERO = str(ROOT / "configs" / "hetero.yaml")
SLOW_CHAIN = {"compute_s": 0.02, "wait_s": 1.58, "chain_s_per_row": 0.1}
"""1600 images/s GPU-bound, one chain slot 10/s: the advisor wants 8 x ml.c5.4xlarge (16 slots each)."""


@pytest.fixture
def runs(configs, tmp_path) -> Path:
    """run.dir with one brief run of hetero.yaml, its report measured as SLOW_CHAIN."""
    runs = tmp_path / "runs"
    report, _ = constructed_report(configs, tmp_path / "measured", **SLOW_CHAIN)
    brief = load_config(HETERO, [f"run.dir={runs}", "trainer.steps=30"])
    write_run(runs, "hetero-digits-brief", brief, report, mtime=1_000)
    return runs


def dry_run(capsys, runs: Path, *extra: str) -> tuple[int, dict | None, str]:
    code = main(["submit", HETERO, "--dry-run", "--job-name", "sized-1", "--set", f"run.dir={runs}", *extra])
    out, err = capsys.readouterr()
    return code, json.loads(out) if code == 0 else out, err


def counts(request: dict) -> dict[str, int]:
    return {g["InstanceGroupName"]: g["InstanceCount"] for g in request["ResourceConfig"]["InstanceGroups"]}


def test_dry_run_request_has_the_advised_count_and_the_line_says_why(capsys, runs):
    code, request, err = dry_run(capsys, runs, "--data-hosts", "auto")
    assert code == 0, err
    assert counts(request) == {"train_group": 1, "data_group": 8}
    request["Environment"]["SMLAUNCH_RAY_TOKEN"] = "x" * 43
    assert validate_request(request) == []
    report = runs / "hetero-digits-brief" / "hosts/algo-1/opt/ml/output/data/report.json"
    (line,) = err.splitlines()  # stdout stays the request's JSON alone
    assert line.startswith(
        f"submit: data hosts: 8 x ml.c5.4xlarge for data_group (its instance_count: 1) from the advisor of {report} ("
    )
    assert "predicted 1280 images/s, data wait 20 %, bound by the pipeline" in line


def test_the_config_asks_with_sagemaker_data_hosts_and_the_flag_overrides_it(capsys, runs):
    code, request, err = dry_run(
        capsys, runs, "--set", "sagemaker.data_hosts=auto", "--set", "autoscale={max_data_hosts: 4}"
    )
    assert code == 0, err
    assert counts(request)["data_group"] == 4 and "autoscale.max_data_hosts makes it 4" in err
    code, request, err = dry_run(capsys, runs, "--set", "sagemaker.data_hosts=auto", "--data-hosts", "2")
    assert code == 0, err
    assert counts(request)["data_group"] == 2 and "as --data-hosts or sagemaker.data_hosts says" in err
    code, request, err = dry_run(capsys, runs)  # nothing asks: the config's count, no line
    assert code == 0 and counts(request)["data_group"] == 1 and err == ""


def test_from_report_names_one_explicitly(capsys, runs, configs, tmp_path):
    fast, _ = constructed_report(configs, tmp_path / "other", compute_s=0.02, wait_s=0.14, chain_s_per_row=0.01)
    named = tmp_path / "job-output" / "report.json"
    named.parent.mkdir()
    named.write_text(json.dumps(fast))
    code, request, err = dry_run(capsys, runs, "--from-report", str(named.parent))
    assert code == 0, err
    assert counts(request)["data_group"] == 1 and f"from the advisor of {named} (" in err
    assert "named by --from-report" in err


def test_no_report_is_one_line_and_a_non_zero_exit(capsys, tmp_path):
    code, out, err = dry_run(capsys, tmp_path / "empty", "--data-hosts", "auto")
    assert code == 1 and out == ""  # no request printed: the old count is never used silently
    (line,) = err.splitlines()
    assert line.startswith(
        "sm-launch: error: data hosts auto: no report of this config (job hetero-digits, model "
        f"resnet10t, train_group ml.g5.xlarge, data_group ml.c5.4xlarge) in the runs under "
        f"{tmp_path / 'empty'}/ "
    )
    assert f"run the config briefly first (sm-launch {HETERO} --set trainer.steps=300)" in line


def test_a_bad_count_is_refused_by_argparse_and_the_config(capsys, runs):
    with pytest.raises(SystemExit) as caught:
        main(["submit", HETERO, "--dry-run", "--data-hosts", "0"])
    assert caught.value.code == 2 and "expected auto or a host count >= 1" in capsys.readouterr().err
    code, out, err = dry_run(capsys, runs, "--set", "sagemaker.data_hosts=none")
    assert code == 2 and "sagemaker.data_hosts: 'none': expected auto or a host count >= 1" in err


def test_plan_says_which_report_and_why(capsys, runs):
    assert main(["plan", HETERO, "--set", f"run.dir={runs}", "--set", "sagemaker.data_hosts=auto"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("data hosts:")]
    report = runs / "hetero-digits-brief" / "hosts/algo-1/opt/ml/output/data/report.json"
    assert len(lines) == 1 and lines[0].startswith(
        f"data hosts: 8 x ml.c5.4xlarge for data_group (its instance_count: 1) from the advisor of {report} ("
    )
    assert main(["plan", "--json", HETERO, "--set", f"run.dir={runs}", "--set", "sagemaker.data_hosts=auto"]) == 0
    sizing = json.loads(capsys.readouterr().out)["data_hosts"]
    assert (sizing["count"], sizing["group"], sizing["report"]) == (8, "data_group", str(report))
    # Without a report the plan still succeeds (the config runs), and says submit will refuse.
    assert main(["plan", HETERO, "--set", f"run.dir={runs}-none", "--set", "sagemaker.data_hosts=auto"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("data hosts:")]
    assert len(lines) == 1 and lines[0].startswith(
        "data hosts: auto, but submit will refuse it: no report of this config (job hetero-digits"
    )
    assert main(["plan", HETERO, "--set", f"run.dir={runs}"]) == 0  # not asked: no line
    assert "data hosts:" not in capsys.readouterr().out
