"""Sizing the data group from the advisor of the last report of the same config (issue 42): the
rule, which report it takes, and its bounds. Reports are built by `build_report` from constructed
runs (`support.constructed_runs`) and written where runs leave them; nothing runs."""

from __future__ import annotations

import pytest

from smlaunch.config import load_config
from smlaunch.errors import ConfigError, UserError
from smlaunch.launcher.report.sizing import data_group, find_report, rate_fingerprint, size_data_group, sized_config
from support.constructed_runs import constructed_report, write_run

# hetero.yaml: 1 x ml.g5.xlarge trains (1 worker), data_group is ml.c5.4xlarge (16 vCPUs = 16 chain slots).
FAST_CHAIN = {"compute_s": 0.02, "wait_s": 0.14, "chain_s_per_row": 0.01}
"""1600 images/s GPU-bound, 100/s a slot: one data host (1600/s) feeds the trainer."""
SLOW_CHAIN = {"compute_s": 0.02, "wait_s": 1.58, "chain_s_per_row": 0.1}
"""1600 images/s GPU-bound, 10/s a slot (160/s a host): the advisor's range, 8 hosts, is the best it has."""
SLOW_TRAINER = {"compute_s": 0.5, "wait_s": 0.005, "chain_s_per_row": 0.001}
"""64 images/s GPU-bound: the GPU host's own CPUs keep up, the advisor wants no CPU host."""


def hetero(configs, tmp_path, *sets: str):
    return load_config(configs / "hetero.yaml", [f"run.dir={tmp_path / 'runs'}", *sets])


def report(configs, tmp_path, rates: dict) -> dict:
    return constructed_report(configs, tmp_path / "measured", **rates)[0]


def test_the_newest_report_of_the_same_config_is_chosen(configs, tmp_path):
    cfg = hetero(configs, tmp_path)
    runs = tmp_path / "runs"
    # Runs are resolved with their own overrides: a brief run's steps and its run directory do not count.
    brief = hetero(configs, tmp_path, "trainer.steps=30", "run.name=brief")
    write_run(runs, "hetero-old", brief, report(configs, tmp_path, FAST_CHAIN), mtime=1_000)
    newest = write_run(runs, "hetero-new", brief, report(configs, tmp_path, SLOW_CHAIN), mtime=2_000, layout="attached")
    write_run(
        runs,
        "other-newer",
        hetero(configs, tmp_path, "model.name=resnet18"),
        report(configs, tmp_path, SLOW_TRAINER),
        mtime=3_000,
    )
    path, found, when = find_report(cfg)
    assert path == newest and when == 2_000 and found["advisor"]["rates"]["per_slot_images_per_s"] == pytest.approx(10)
    sizing = size_data_group(cfg, "auto")
    assert (sizing.count, sizing.report, sizing.group, sizing.was) == (8, newest, "data_group", 1)
    assert sizing.why.startswith(f"from the advisor of {newest} (")
    assert "predicted 1280 images/s, data wait 20 %, bound by the pipeline" in sizing.why
    assert sizing.line().startswith(
        "data hosts: 8 x ml.c5.4xlarge for data_group (its instance_count: 1) from the advisor of "
    )


def test_a_fast_chain_needs_one_host(configs, tmp_path):
    cfg = hetero(configs, tmp_path)
    write_run(tmp_path / "runs", "fast", cfg, report(configs, tmp_path, FAST_CHAIN), mtime=1_000)
    sizing = size_data_group(cfg, "auto")
    assert sizing.count == 1 and "predicted 1600 images/s, data wait 0 %, bound by the trainer" in sizing.why


def test_reports_of_other_configs_are_ignored_and_none_left_is_one_line_saying_where_and_how(configs, tmp_path):
    cfg = hetero(configs, tmp_path)
    runs = tmp_path / "runs"
    write_run(
        runs,
        "resnet18",
        hetero(configs, tmp_path, "model.name=resnet18"),
        report(configs, tmp_path, SLOW_CHAIN),
        mtime=1_000,
    )
    write_run(
        runs,
        "bigger-batch",
        hetero(configs, tmp_path, "trainer.batch_size=128", "pipeline.ops.3.repeat=4"),
        report(configs, tmp_path, SLOW_CHAIN),
        mtime=2_000,
    )
    (runs / "no-config" / "output" / "data").mkdir(parents=True)  # a run without its resolved config: not a match
    (runs / "no-config" / "output" / "data" / "report.json").write_text("{}")
    with pytest.raises(UserError) as caught:
        size_data_group(cfg, "auto", config_name="configs/hetero.yaml")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(
        f"data hosts auto: no report of this config (job hetero-digits, model resnet10t, "
        f"train_group ml.g5.xlarge, data_group ml.c5.4xlarge) in the runs under {runs}/ "
    )
    assert "2 report(s) of other configs ignored" in message
    assert "its run's config differs in pipeline.ops, trainer.batch_size" in message  # the newest of them
    assert "run the config briefly first (sm-launch configs/hetero.yaml --set trainer.steps=300)" in message
    assert "--from-report PATH" in message


def test_an_empty_or_missing_run_dir_is_the_same_error(configs, tmp_path):
    with pytest.raises(UserError, match="no report of this config .* run the config briefly first"):
        size_data_group(hetero(configs, tmp_path), "auto")


def test_the_count_is_clamped_to_the_autoscale_bounds(configs, tmp_path):
    runs = tmp_path / "runs"
    write_run(runs, "slow-chain", hetero(configs, tmp_path), report(configs, tmp_path, SLOW_CHAIN), mtime=1_000)
    capped = hetero(configs, tmp_path, "autoscale={max_data_hosts: 4}")
    sizing = size_data_group(capped, "auto")
    assert sizing.count == 4
    assert "predicted 640 images/s, data wait 60 %" in sizing.why  # the prediction is for the 4 hosts
    assert sizing.why.endswith("; the advisor recommends 8, autoscale.max_data_hosts makes it 4")
    # A wider range than the advisor's default table (8): the advisor is asked over it, and takes the cheapest
    # within 90 % of the fastest (10 hosts, 1600/s): 9 hosts, 1440/s.
    wide = size_data_group(hetero(configs, tmp_path, "autoscale={max_data_hosts: 12}"), "auto")
    assert wide.count == 9 and "predicted 1440 images/s" in wide.why and "makes it" not in wide.why


def test_no_cpu_host_becomes_the_minimum(configs, tmp_path):
    runs = tmp_path / "runs"
    write_run(runs, "slow-trainer", hetero(configs, tmp_path), report(configs, tmp_path, SLOW_TRAINER), mtime=1_000)
    bounded = size_data_group(hetero(configs, tmp_path, "autoscale={min_data_hosts: 2, max_data_hosts: 6}"), "auto")
    assert bounded.count == 2
    assert bounded.why.endswith(
        "the advisor recommends no CPU host (the GPU hosts' own CPUs keep up), autoscale.min_data_hosts makes it 2"
    )
    zero = size_data_group(hetero(configs, tmp_path, "autoscale={min_data_hosts: 0, max_data_hosts: 6}"), "auto")
    assert zero.count == 1 and zero.why.endswith("a SageMaker group's minimum makes it 1")  # fixed groups: 0 is 1
    alone = size_data_group(hetero(configs, tmp_path), "auto")
    assert alone.count == 1 and alone.why.endswith("a SageMaker group's minimum makes it 1")


def test_a_forced_count_and_its_bounds(configs, tmp_path):
    cfg = hetero(configs, tmp_path)
    sizing = size_data_group(cfg, 3)  # no report needed
    assert (sizing.count, sizing.report) == (3, None)
    assert sizing.line() == (
        "data hosts: 3 x ml.c5.4xlarge for data_group (its instance_count: 1) as --data-hosts "
        "or sagemaker.data_hosts says"
    )
    with pytest.raises(ConfigError, match=r"--data-hosts 5: outside autoscale.min_data_hosts..max_data_hosts \(1..4\)"):
        size_data_group(hetero(configs, tmp_path, "autoscale={max_data_hosts: 4}"), 5)
    with pytest.raises(ConfigError, match="--from-report .* does not go with --data-hosts 3"):
        size_data_group(cfg, 3, from_report=str(tmp_path))
    assert size_data_group(cfg, None) is None


def test_a_named_report_is_used_as_given_and_a_different_config_is_noted(configs, tmp_path):
    other = hetero(configs, tmp_path, "model.name=resnet18")
    path = write_run(tmp_path / "elsewhere", "job-output", other, report(configs, tmp_path, FAST_CHAIN), mtime=1_000)
    sizing = size_data_group(hetero(configs, tmp_path), None, from_report=str(path.parent))
    assert sizing.count == 1 and sizing.report == path
    assert sizing.why.endswith(
        "; named by --from-report; WARNING: its run's config differs from this one in model.name"
    )
    bare = tmp_path / "downloaded" / "report.json"  # e.g. a job's output: no resolved config beside it
    bare.parent.mkdir()
    bare.write_bytes(path.read_bytes())
    assert size_data_group(hetero(configs, tmp_path), "auto", from_report=str(bare)).why.endswith(
        "named by --from-report (its run's config not found beside it, so not compared)"
    )


def test_the_data_group_is_the_scaled_one_or_the_only_cpu_group(configs, tmp_path):
    assert data_group(hetero(configs, tmp_path)).name == "data_group"
    three = [
        "cluster.instance_groups=[{name: train_group, instance_type: ml.g5.xlarge}, {name: data_group, "
        "instance_type: ml.c5.4xlarge}, {name: more_data, instance_type: ml.c5.xlarge}]"
    ]
    with pytest.raises(
        ConfigError,
        match="sagemaker.data_hosts: sizing needs one CPU-only group besides the train "
        "group train_group, and this config has data_group, more_data; name",
    ):
        data_group(hetero(configs, tmp_path, *three))
    named = hetero(configs, tmp_path, *three, "autoscale={max_data_hosts: 4, group: more_data}")
    assert data_group(named).name == "more_data"
    with pytest.raises(ConfigError, match="one CPU-only group .* has none"):
        data_group(
            hetero(
                configs,
                tmp_path,
                "cluster.instance_groups=[{name: train_group, instance_type: ml.g5.xlarge}]",
                "channels.train.instance_groups=null",
                "channels.validation.instance_groups=null",
            )
        )


def test_the_fingerprint_is_the_rate_fields_and_the_instance_types(configs, tmp_path):
    base = rate_fingerprint(hetero(configs, tmp_path).model_dump(mode="json"))
    same = hetero(
        configs,
        tmp_path,
        "trainer.steps=30",
        "run.name=x",
        "cluster.instance_groups.1.instance_count=5",
        "sagemaker.data_hosts=auto",
        "channels.train.source=builtin:synthetic/train",
    )
    assert rate_fingerprint(same.model_dump(mode="json")) == base
    for change in (
        "job=other",
        "pipeline.batch_size=32",
        "trainer.precision=fp32",
        "cluster.instance_groups.1.instance_type=ml.c5.xlarge",
    ):
        assert rate_fingerprint(hetero(configs, tmp_path, change).model_dump(mode="json")) != base, change


def test_the_sized_config_says_the_count_where_the_hosts_read_it(configs, tmp_path):
    cfg = hetero(configs, tmp_path, "sagemaker.data_hosts=auto")
    sized = sized_config(cfg, size_data_group(cfg, 3))
    assert [g.instance_count for g in sized.cluster.instance_groups] == [1, 3]
    assert sized.sagemaker.data_hosts == 3 and cfg.cluster.instance_groups[1].instance_count == 1
