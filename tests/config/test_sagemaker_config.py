"""The `sagemaker:` section and the manifest rules that `sm-launch submit` relies on, at load time."""

import pytest

from smlaunch.config import load_config
from smlaunch.errors import ConfigError


def test_shipped_hetero_config_has_a_submittable_sagemaker_section(configs):
    sm = load_config(configs / "hetero.yaml").sagemaker
    assert sm.entry == "container" and sm.command == "run" and sm.install_package == "auto"
    assert sm.wait_s is None and sm.prefix == "smlaunch"
    assert load_config(configs / "tiny.yaml").sagemaker is None  # optional: only submit needs it


def test_spot_defaults_max_wait_to_twice_the_run(configs):
    sm = load_config(configs / "hetero.yaml", ["sagemaker.spot=true"]).sagemaker
    assert sm.wait_s == 2 * sm.max_run_s
    assert (
        load_config(configs / "hetero.yaml", ["sagemaker.spot=true", "sagemaker.max_wait_s=7200"]).sagemaker.wait_s
        == 7200
    )


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["sagemaker.bucket=My_Bucket"], r"sagemaker\.bucket: String should match pattern"),
        (["sagemaker.role_arn=admin"], r"sagemaker\.role_arn: String should match pattern"),
        (["sagemaker.prefix=/lead"], r"sagemaker\.prefix: String should match pattern"),
        (["sagemaker.entry=docker"], r"sagemaker\.entry: Input should be 'container' or 'toolkit'"),
        (["sagemaker.command=train"], r"sagemaker\.command: Input should be 'run', 'check' or 'plan'"),
        (["sagemaker.max_run_s=3000000"], r"sagemaker\.max_run_s: Input should be less than or equal to 2419200"),
        (["sagemaker.max_wait_s=90000"], r"sagemaker: max_wait_s \(MaxWaitTimeInSeconds\) is for spot jobs only"),
        (["sagemaker.spot=true", "sagemaker.max_wait_s=10"], r"max_wait_s \(10\) must be >= max_run_s \(7200\)"),
        (
            ["sagemaker.environment={SMLAUNCH_COMMAND: run}"],
            r"sagemaker\.environment: SMLAUNCH_COMMAND is set by sm-launch submit",
        ),
        (["sagemaker.environment={1BAD: x}"], r"'1BAD' is not a valid environment variable name"),
        (["sagemaker.tags={'aws:owner': me}"], r"sagemaker\.tags: tag key 'aws:owner'"),
        (["sagemaker.colour=red"], r"sagemaker\.colour: unknown key; valid keys: image_uri, role_arn, bucket, prefix"),
        (["channels.train.source=s3://b/x.jsonl"], r"channels\.train: source s3://b/x\.jsonl looks like a manifest"),
        (
            ["channels.train.source=s3://b/x.jsonl", "channels.train.s3_data_type=AugmentedManifestFile"],
            r"channels\.train: attribute_names: source s3://b/x\.jsonl is an augmented",
        ),
        (
            [
                "channels.train.source=s3://b/x.manifest",
                "channels.train.s3_data_type=ManifestFile",
                "channels.train.input_mode=FastFile",
            ],
            r"channels\.train: input_mode: FastFile takes an S3 prefix only",
        ),
        (["sagemaker.vpc={subnets: [subnet-1a]}"], r"sagemaker\.vpc\.security_group_ids: required field is missing"),
        (
            ["sagemaker.vpc={subnets: [vpc-1a], security_group_ids: [sg-1]}"],
            r"sagemaker\.vpc\.subnets\.0: String should match pattern '\^subnet-",
        ),
        (
            ["sagemaker.vpc={subnets: [subnet-1a], security_group_ids: [default]}"],
            r"sagemaker\.vpc\.security_group_ids\.0: String should match pattern '\^sg-",
        ),
        (
            ["sagemaker.vpc={subnets: [], security_group_ids: [sg-1]}"],
            r"sagemaker\.vpc\.subnets: List should have at least 1 item",
        ),
        (
            [f"sagemaker.vpc={{subnets: [subnet-1a], security_group_ids: [{', '.join(f'sg-{i}' for i in range(6))}]}}"],
            r"sagemaker\.vpc\.security_group_ids: List should have at most 5 items",
        ),
        (
            ["sagemaker.vpc={subnets: [subnet-1a, subnet-1a], security_group_ids: [sg-1]}"],
            r"sagemaker\.vpc\.subnets: subnet-1a listed more than once",
        ),
        (
            ["sagemaker.vpc={subnets: [subnet-1a], security_group_ids: [sg-1], vpc_id: vpc-1}"],
            r"sagemaker\.vpc\.vpc_id: unknown key; valid keys: subnets, security_group_ids",
        ),
    ],
)
def test_bad_sagemaker_and_manifest_fields_fail_at_load_naming_the_field(configs, overrides, expected):
    with pytest.raises(ConfigError, match=expected) as err:
        load_config(configs / "hetero.yaml", overrides)
    assert "\n" not in str(err.value)


def test_a_manifest_with_its_attribute_names_in_pipe_mode_loads(configs):
    cfg = load_config(
        configs / "hetero.yaml",
        [
            "channels.train.source=s3://b/train.manifest",
            "channels.train.input_mode=Pipe",
            "channels.train.record_format=recordio",
            "channels.train.attribute_names=[source-ref, class]",
            "model.num_classes=10",
        ],
    )
    assert cfg.channels["train"].is_manifest and not cfg.channels["validation"].is_manifest


def test_a_vpc_loads_with_botocores_limits(configs):
    subnets = ", ".join(f"subnet-{i:08x}" for i in range(16))
    groups = ", ".join(f"sg-0{c}" for c in "abcde")
    vpc = load_config(
        configs / "hetero.yaml", [f"sagemaker.vpc={{subnets: [{subnets}], security_group_ids: [{groups}]}}"]
    ).sagemaker.vpc
    assert len(vpc.subnets) == 16 and vpc.security_group_ids[-1] == "sg-0e"
    assert load_config(configs / "hetero.yaml").sagemaker.vpc is None
