"""The `sagemaker:` section and the manifest rules that `sm-launch submit` relies on, at load time."""

import pytest

from smlaunch.config import load_config
from smlaunch.errors import ConfigError


def test_shipped_hetero_config_has_a_submittable_sagemaker_section(configs):
    sm = load_config(configs / "hetero.yaml").sagemaker
    assert sm.entry == "container" and sm.command == "run" and sm.install_package
    assert sm.wait_s is None and sm.prefix == "smlaunch"
    assert load_config(configs / "tiny.yaml").sagemaker is None  # optional: only submit needs it


def test_spot_defaults_max_wait_to_twice_the_run(configs):
    sm = load_config(configs / "hetero.yaml", ["sagemaker.spot=true"]).sagemaker
    assert sm.wait_s == 2 * sm.max_run_s
    assert load_config(configs / "hetero.yaml", ["sagemaker.spot=true", "sagemaker.max_wait_s=7200"]).sagemaker.wait_s == 7200


@pytest.mark.parametrize("overrides, expected", [
    (["sagemaker.bucket=My_Bucket"], r"sagemaker\.bucket: String should match pattern"),
    (["sagemaker.role_arn=admin"], r"sagemaker\.role_arn: String should match pattern"),
    (["sagemaker.prefix=/lead"], r"sagemaker\.prefix: String should match pattern"),
    (["sagemaker.entry=docker"], r"sagemaker\.entry: Input should be 'container' or 'toolkit'"),
    (["sagemaker.command=train"], r"sagemaker\.command: Input should be 'run', 'check' or 'plan'"),
    (["sagemaker.max_run_s=3000000"], r"sagemaker\.max_run_s: Input should be less than or equal to 2419200"),
    (["sagemaker.max_wait_s=90000"], r"sagemaker: max_wait_s \(MaxWaitTimeInSeconds\) is for spot jobs only"),
    (["sagemaker.spot=true", "sagemaker.max_wait_s=10"], r"max_wait_s \(10\) must be >= max_run_s \(7200\)"),
    (["sagemaker.environment={SMLAUNCH_COMMAND: run}"], r"sagemaker\.environment: SMLAUNCH_COMMAND is set by sm-launch submit"),
    (["sagemaker.environment={1BAD: x}"], r"'1BAD' is not a valid environment variable name"),
    (["sagemaker.tags={'aws:owner': me}"], r"sagemaker\.tags: tag key 'aws:owner'"),
    (["sagemaker.colour=red"], r"sagemaker\.colour: unknown key; valid keys: image_uri, role_arn, bucket, prefix"),
    (["channels.train.source=s3://b/x.jsonl"], r"channels\.train: attribute_names: source s3://b/x\.jsonl is an augmented"),
    (["channels.train.source=s3://b/x.manifest", "channels.train.input_mode=FastFile"],
     r"channels\.train: input_mode: FastFile reads an S3 prefix only"),
])
def test_bad_sagemaker_and_manifest_fields_fail_at_load_naming_the_field(configs, overrides, expected):
    with pytest.raises(ConfigError, match=expected) as err:
        load_config(configs / "hetero.yaml", overrides)
    assert "\n" not in str(err.value)


def test_a_manifest_with_its_attribute_names_in_pipe_mode_loads(configs):
    cfg = load_config(configs / "hetero.yaml", [
        "channels.train.source=s3://b/train.manifest", "channels.train.input_mode=Pipe",
        "channels.train.record_format=recordio", "channels.train.attribute_names=[source-ref, class]",
        "model.num_classes=10"])
    assert cfg.channels["train"].is_manifest and not cfg.channels["validation"].is_manifest
