import re

import pytest
import yaml

from smlaunch.config import load_config
from smlaunch.errors import ConfigError


def test_shipped_configs_load(configs):
    cfg = load_config(configs / "hetero.yaml")
    assert [g.instance_type for g in cfg.cluster.instance_groups] == ["ml.g5.xlarge", "ml.c5.4xlarge"]
    assert [op.op for op in cfg.pipeline.ops] == [
        "decode_image",
        "random_resized_crop",
        "horizontal_flip",
        "gaussian_blur",
        "to_uint8_chw",
    ]
    assert load_config(configs / "tiny.yaml").trainer.steps == 40


def test_set_overrides_nested_fields_and_list_items(configs):
    cfg = load_config(
        configs / "hetero.yaml",
        ["trainer.steps=7", "pipeline.ops.3.repeat=4", "cluster.instance_groups.1.instance_count=3"],
    )
    assert cfg.trainer.steps == 7
    assert cfg.pipeline.ops[3].repeat == 4
    assert cfg.cluster.instance_groups[1].instance_count == 3


def test_unknown_key_lists_valid_keys(configs):
    with pytest.raises(ConfigError) as err:
        load_config(configs / "hetero.yaml", ["trainer.bacth_size=3"])
    message = str(err.value)
    assert "trainer.bacth_size: unknown key" in message
    assert "valid keys: batch_size, steps, epochs" in message
    assert "\n" not in message


def test_unknown_key_inside_an_op_lists_that_ops_keys(configs):
    with pytest.raises(
        ConfigError, match=r"pipeline\.ops\.3\.radius: unknown key; valid keys: field, op, kernel_size, sigma, repeat"
    ):
        load_config(configs / "hetero.yaml", ["pipeline.ops.3.radius=2"])


def test_wrong_type_names_the_field(configs):
    with pytest.raises(ConfigError, match=r"trainer\.learning_rate: .*valid number.*'fast'"):
        load_config(configs / "hetero.yaml", ["trainer.learning_rate=fast"])


def test_negative_batch_size_is_refused(configs):
    with pytest.raises(ConfigError, match=r"trainer\.batch_size: Input should be greater than 0 \(got -8\)"):
        load_config(configs / "hetero.yaml", ["trainer.batch_size=-8"])


def test_unknown_op_lists_valid_ops(configs):
    with pytest.raises(
        ConfigError,
        match=r"pipeline\.ops\.2\.op: unknown op 'sharpen'; ops: decode_image, resize, "
        r"random_resized_crop",
    ):
        load_config(configs / "hetero.yaml", ["pipeline.ops.2.op=sharpen"])


def test_misspelled_op_and_mode_say_what_was_meant(configs):
    with pytest.raises(ConfigError) as err:
        load_config(configs / "hetero.yaml", ["pipeline.ops.3.op=gausian_blur"])
    assert "pipeline.ops.3.op: unknown op 'gausian_blur' (did you mean 'gaussian_blur'?); ops: " in str(err.value)
    assert "Input tag" not in str(err.value)  # not pydantic's tagged-union wording
    with pytest.raises(ConfigError, match=r"channels\.train\.input_mode: .* \(got 'file'\); did you mean 'File'\?"):
        load_config(configs / "hetero.yaml", ["channels.train.input_mode=file"])


@pytest.mark.parametrize(
    "source, expected",
    [
        ("hf://datasets/x", "channels.train.source: hf:// sources are not supported; use a local folder, s3://"),
        ("gs://bucket/x", "channels.train.source: gs:// sources are not supported"),
        ("s3://B_ad/x", "expected s3://bucket/prefix with a valid bucket name"),
        ("builtin:digits/tarin", "unknown builtin source 'builtin:digits/tarin'; did you mean builtin:digits/train?"),
    ],
)
def test_unsupported_sources_fail_at_load(configs, source, expected):
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load_config(configs / "hetero.yaml", [f"channels.train.source={source}", "model.num_classes=10"])


def test_config_only_rules_are_schema_rules(configs, tmp_path):
    """A crop op and, for a non-builtin train channel, model.num_classes: refused at load, so `plan` catches them."""
    raw = yaml.safe_load((configs / "hetero.yaml").read_text())
    del raw["pipeline"]["ops"][1]  # the random_resized_crop
    (tmp_path / "no-crop.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"pipeline: add a random_resized_crop or center_crop"):
        load_config(tmp_path / "no-crop.yaml")
    with pytest.raises(ConfigError, match=r"model\.num_classes: required for a tfrecord train channel"):
        load_config(configs / "hetero.yaml", ["channels.train.source=/data/train"])
    assert load_config(configs / "hetero.yaml", ["channels.train.source=/data/train", "model.num_classes=3"])


@pytest.mark.parametrize(
    "item, expected",
    [
        ("trainer.steps", "expected KEY=VALUE"),
        ("=3", "expected KEY=VALUE"),
        ("trainer..steps=3", "expected KEY=VALUE"),
        ("pipeline.ops.9.repeat=1", "is a list of 5; use an index 0..4"),
        ("trainer.steps.x=1", "trainer.steps is a value, not a section"),
    ],
)
def test_bad_set_is_refused(configs, item, expected):
    with pytest.raises(ConfigError, match=expected.replace(".", r"\.")):
        load_config(configs / "hetero.yaml", [item])


def test_steps_and_epochs_are_exclusive(configs):
    with pytest.raises(ConfigError, match="exactly one of trainer.steps or trainer.epochs"):
        load_config(configs / "hetero.yaml", ["trainer.epochs=2"])


def test_unknown_instance_type_and_group_routing(configs):
    with pytest.raises(ConfigError, match="'ml.z9.huge' is not a SageMaker training instance type"):
        load_config(configs / "hetero.yaml", ["cluster.instance_groups.0.instance_type=ml.z9.huge"])
    with pytest.raises(ConfigError, match="channels.train.instance_groups: no instance group 'gpu_grp'"):
        load_config(configs / "hetero.yaml", ["channels.train.instance_groups=[gpu_grp]"])


def test_yaml_cannot_construct_python_objects(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("job: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


def test_missing_file_and_non_mapping(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    (tmp_path / "list.yaml").write_text(yaml.safe_dump([1, 2]))
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(tmp_path / "list.yaml")


def test_every_shipped_config_loads_and_plans(configs):
    from smlaunch.cluster.plan import LocalEnvironment, build_plan
    from smlaunch.config.instance_types import known_spec

    for path in sorted(configs.glob("*.yaml")):
        cfg = load_config(path)
        plan = build_plan(cfg, LocalEnvironment(cpus=2, gpus=0, started="t"))
        gpus = sum(g.instance_count * known_spec(g.instance_type).gpus for g in cfg.cluster.instance_groups)
        assert plan.train_workers == gpus and plan.hosts, path.name  # a CPU stand-in per planned GPU


def test_imagenet_config_is_resnet50_with_the_standard_augmentation(configs):
    from smlaunch.cluster.plan import LocalEnvironment, build_plan

    cfg = load_config(configs / "imagenet.yaml")
    assert [(g.instance_type, g.instance_count) for g in cfg.cluster.instance_groups] == [
        ("ml.p4d.24xlarge", 2),
        ("ml.c5.18xlarge", 4),
    ]
    assert {c.input_mode for c in cfg.channels.values()} == {"FastFile"}
    assert all(c.source.startswith("s3://") for c in cfg.channels.values())
    ops = {op.op: op for op in cfg.pipeline.ops}
    assert list(ops) == ["decode_image", "random_resized_crop", "horizontal_flip", "to_uint8_chw", "normalize"]
    crop = ops["random_resized_crop"]
    assert (crop.size, crop.scale, crop.validation_resize) == (224, (0.08, 1.0), 256)
    assert ops["normalize"].mean == (0.485, 0.456, 0.406) and ops["normalize"].std == (0.229, 0.224, 0.225)
    assert cfg.model.name == "resnet50" and cfg.model.num_classes is None  # the 1000 class folders say
    plan = build_plan(cfg, LocalEnvironment(cpus=2, gpus=0, started="t"))
    assert plan.train_workers == 16 and plan.global_batch == 2048 and plan.learning_rate == pytest.approx(0.8)
    assert [c.hosts for c in plan.channels] == [("algo-3", "algo-4", "algo-5", "algo-6")] * 2


def test_seed_workload_is_the_classic_example(configs):
    cfg = load_config(configs / "seed-vit-blur.yaml")
    assert [g.instance_type for g in cfg.cluster.instance_groups] == ["ml.g5.xlarge", "ml.c5.4xlarge"]
    blur = next(op for op in cfg.pipeline.ops if op.op == "gaussian_blur")
    assert (blur.kernel_size, blur.repeat) == (11, 10) and cfg.model.name.startswith("vit_")
    assert cfg.channels["train"].source == "builtin:synthetic/train"
