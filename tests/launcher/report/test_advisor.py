"""The verdict and the advisor on constructed runs: a slow chain, a slow trainer."""

from __future__ import annotations

import pytest

from smlaunch.config import load_config
from support.constructed_runs import constructed_report as _run


def test_slow_chain_is_input_bound_and_more_hosts_are_predicted_faster(configs, tmp_path):
    # The trainer could take 32 images in 0.02 s (1600/s); two chain slots make 2 x 100/s.
    report, plan = _run(configs, tmp_path, compute_s=0.02, wait_s=0.14, chain_s_per_row=0.01)
    assert report["verdict"]["verdict"] == "input-bound"
    assert any("waited for data 87.5 %" in e for e in report["verdict"]["evidence"])
    advisor = report["advisor"]
    assert advisor["rates"]["gpu_bound_images_per_s"] == pytest.approx(1600)
    assert advisor["rates"]["per_slot_images_per_s"] == pytest.approx(100)
    assert advisor["pipeline_images_per_s"] == pytest.approx(200)
    assert advisor["offload_pays"]
    table = advisor["table"]
    assert [o["hosts"] for o in table] == list(range(9))
    # Measured 200/s against a modelled min(1600, 2 x 100): efficiency 1, so k hosts of one slot each
    # are predicted at k x 100/s until the trainer's 1600/s caps them.
    assert [o["images_per_s"] for o in table[1:4]] == pytest.approx([100, 200, 300])
    assert all(o["bound"] == "pipeline" for o in table[1:])
    same = advisor["recommended_same_type"]
    assert same["hosts"] == 8 and same["images_per_s"] == pytest.approx(800)
    best = advisor["recommended"]
    assert best["images_per_s"] >= 0.9 * max(o["images_per_s"] for o in table)
    assert best["cost_per_epoch"] is not None and best["cost_per_epoch"] < table[2]["cost_per_epoch"]


def test_slow_trainer_is_compute_bound_and_no_host_is_added(configs, tmp_path):
    # The trainer needs 0.5 s a step (64/s); the two slots make 2 x 1000/s.
    report, _ = _run(configs, tmp_path, compute_s=0.5, wait_s=0.005, chain_s_per_row=0.001)
    assert report["verdict"]["verdict"] == "compute-bound"
    assert "more CPU hosts will not speed" in report["verdict"]["advice"]
    advisor = report["advisor"]
    assert not advisor["offload_pays"]  # the GPU host's own CPUs (2 left of 3) already beat the trainer
    assert all(o["bound"] == "trainer" for o in advisor["table"])
    assert advisor["recommended_same_type"]["hosts"] == 1  # the cheapest that keeps the trainer fed
    # k = 0 predicts the same rate for less money: the advisor says so, never "add a host" at the same rate
    best, alone = advisor["recommended"], advisor["table"][0]
    assert best["hosts"] == 0 and best["images_per_s"] == alone["images_per_s"]
    assert all(o["cost_per_epoch"] > best["cost_per_epoch"] for o in advisor["table"][1:])
    from smlaunch.launcher.report.advisor import advice_lines

    lines = advice_lines(advisor)
    assert any(line.startswith("advisor: recommend no CPU hosts (the GPU host alone): predicted") for line in lines)
    assert not any("1 hosts" in line for line in lines)


def test_balanced_and_head_start_cases(configs, tmp_path):
    report, _ = _run(configs, tmp_path, compute_s=0.1, wait_s=0.01, chain_s_per_row=0.001)
    assert report["verdict"]["verdict"] == "balanced"
    assert "start-up" in report["verdict"]["advice"]  # 2 x 1000/s of pipeline for a 290/s trainer
    # Never waited, but the pipeline (2 x 10/s) is far slower than the trainer: the run was too short.
    report, _ = _run(configs, tmp_path, compute_s=0.1, wait_s=0.0, chain_s_per_row=0.1)
    assert report["verdict"]["verdict"] == "compute-bound"
    assert "head start" in report["verdict"]["advice"]


def test_prices_come_from_the_config_and_unpriced_types_are_named(configs, tmp_path):
    cfg = load_config(configs / "tiny.yaml", ["monitor.prices={ml.c5.xlarge: 10.0}"])
    assert cfg.monitor.prices == {"ml.c5.xlarge": 10.0}
    with pytest.raises(Exception, match="monitor.prices"):
        load_config(configs / "tiny.yaml", ["monitor.prices={ml.nope.xlarge: 1.0}"])
    report, _ = _run(configs, tmp_path, compute_s=0.02, wait_s=0.14, chain_s_per_row=0.01)
    expensive = dict(report["monitor"], prices={"ml.c5.xlarge": 10.0})
    from smlaunch.launcher.report.job_report import add_analysis

    cheap_cost = report["advisor"]["table"][1]["cost_per_hour"]
    add_analysis(report, expensive, 1437)
    assert report["advisor"]["table"][1]["cost_per_hour"] == pytest.approx(cheap_cost - 0.204 + 10.0)


def test_an_epoch_overhead_is_measured_and_paid_once_per_epoch_whatever_the_host_count(configs, tmp_path):
    # Input-bound at 200 images/s within epochs of 20 steps (640 images), plus 2 s at each epoch start.
    report, _ = _run(
        configs,
        tmp_path,
        compute_s=0.02,
        wait_s=0.14,
        chain_s_per_row=0.01,
        steps=100,
        steps_per_epoch=20,
        epoch_stall_s=2.0,
    )
    advisor = report["advisor"]
    assert advisor["rates"]["images_per_epoch"] == pytest.approx(640)
    assert advisor["rates"]["epoch_s"] == pytest.approx(20 * 0.16 + 2.0)
    assert advisor["epoch_overhead_s"] == pytest.approx(2.0)
    table = advisor["table"]
    # The model gives back what was measured for this run's two hosts: 640 / (640/200 + 2) = 123 / s ...
    assert table[2]["images_per_s"] == pytest.approx(640 / (640 / 200 + 2), rel=1e-3)
    # ... and for four hosts doubles only the part that is not overhead.
    assert table[4]["images_per_s"] == pytest.approx(640 / (640 / 400 + 2), rel=1e-3)


def test_several_train_workers_are_rated_per_worker_and_hosts_are_recommended_per_gpu_host(configs, tmp_path):
    # Two GPU hosts of two GPUs: 4 workers take 128 images per step in 0.04 s of compute (3200/s,
    # 800/s each); two 1-CPU data hosts make 2 x 100/s.
    report, plan = _run(
        configs,
        tmp_path,
        compute_s=0.04,
        wait_s=0.6,
        chain_s_per_row=0.01,
        images=128,
        sets=("cluster.instance_groups.0.instance_count=2", "cluster.instance_groups.0.gpus=2"),
    )
    assert plan.train_workers == 4
    advisor = report["advisor"]
    assert advisor["train_workers"] == 4 and advisor["gpu_hosts"] == 2
    assert advisor["rates"]["gpu_bound_images_per_s"] == pytest.approx(3200)
    assert advisor["per_worker_images_per_s"] == pytest.approx(800)
    assert [o["hosts_per_gpu_host"] for o in advisor["table"][:5]] == [0, 0.5, 1, 1.5, 2]
    # The trainer-bound answer is 8 hosts in all (k x 100/s reaches 3200/s only with 32 slots of
    # c5.xlarge; bigger types get there with fewer): said per GPU host as well.
    from smlaunch.launcher.report.advisor import advice_lines

    best, same = advisor["recommended"], advisor["recommended_same_type"]
    assert best["hosts_per_gpu_host"] == best["hosts"] / 2 and same["hosts_per_gpu_host"] == same["hosts"] / 2
    lines = advice_lines(advisor)
    assert "GPU-bound 3200.0 images/s (4 train workers x 800.0)" in lines[0]
    assert (
        f"recommend {best['hosts']} x {best['instance_type']} ({best['hosts_per_gpu_host']:g} per GPU host)" in lines[1]
    )
    assert f"{same['hosts']} hosts ({same['hosts_per_gpu_host']:g} per GPU host)" in lines[2]


def test_plan_predicts_for_its_cluster_from_a_measured_run(configs, tmp_path, capsys):
    """`plan configs/imagenet.yaml --rates-from RUN`: the measured run's rates per train worker and
    per chain slot, applied to the plan's 16 GPUs and 4 x 72 vCPUs; without a run, the line says how."""
    import json

    from smlaunch.launcher.cli import main

    report, _ = _run(configs, tmp_path, compute_s=0.02, wait_s=0.14, chain_s_per_row=0.01)  # 1600/s, 100/s a slot
    (tmp_path / "report.json").write_text(json.dumps(report))
    assert main(["plan", str(configs / "imagenet.yaml")]) == 0
    assert "advisor: no prediction without measured rates" in capsys.readouterr().out
    assert main(["plan", str(configs / "imagenet.yaml"), "--rates-from", str(tmp_path)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("advisor:")]
    assert lines[0].startswith(
        f"advisor: rates of {tmp_path / 'report.json'}: GPU-bound 1600.0 images/s per train "
        "worker (x 16 here = 25600.0), one chain slot 100.0 images/s"
    ), lines
    # 4 x 72 slots x 100/s = 28,800/s: the 16 workers' 25,600/s bound it.
    assert (
        lines[1] == "advisor: this plan, 4 x ml.c5.18xlarge: predicted 25600.0 images/s, bound by the trainer, "
        "$0.0014/epoch"
    ), lines
    assert lines[2].startswith("advisor: recommend "), lines


def test_plan_prediction_is_pipeline_bound_with_fewer_data_hosts(configs, tmp_path):
    from smlaunch.launcher.report.advisor import advise_plan

    report, _ = _run(configs, tmp_path, compute_s=0.02, wait_s=0.14, chain_s_per_row=0.01)
    hosts = [
        {"subcluster": "train", "instance_type": "ml.p4d.24xlarge", "vcpus": 96},
        {"subcluster": "data", "instance_type": "ml.c5.18xlarge", "vcpus": 72},
    ]
    advisor = advise_plan(hosts, 8, report, {"max_data_hosts": 8}, {}, "dated")
    assert advisor["planned"]["hosts"] == 1 and advisor["planned"]["bound"] == "pipeline"
    assert advisor["planned"]["images_per_s"] == pytest.approx(7200)  # 72 slots x 100/s < 8 x 1600/s
    assert advisor["table"][2]["images_per_s"] == pytest.approx(12800)  # 144 slots: the trainer's 12,800/s
