"""Instance types: valid names from botocore's service model, specs from the table (or the config)."""

import pytest

from smlaunch.config import load_config
from smlaunch.config.instance_types import SPECS, check_training_type, training_instance_types
from smlaunch.errors import ConfigError


def test_valid_names_are_botocores_training_types_and_the_table_covers_most():
    valid = set(training_instance_types())
    assert len(valid) >= 200 and "ml.c7i.xlarge" in valid and "ml.p5.48xlarge" in valid
    assert set(SPECS) <= valid  # the table names no type SageMaker would refuse
    assert len(set(SPECS)) / len(valid) > 0.9
    for not_training in ("ml.c5.large", "ml.c5.12xlarge", "ml.c5.24xlarge", "ml.c6i.large"):
        assert not_training not in valid and not_training not in SPECS


@pytest.mark.parametrize(
    "name, vcpus, gpus, memory",
    [
        ("ml.c5.9xlarge", 36, 0, 72),
        ("ml.c4.8xlarge", 36, 0, 60),
        ("ml.m4.10xlarge", 40, 0, 160),
        ("ml.t3.medium", 2, 0, 4),
        ("ml.g5.12xlarge", 48, 4, 192),
        ("ml.g6e.xlarge", 4, 1, 32),
        ("ml.g4dn.16xlarge", 64, 1, 256),
        ("ml.p4d.24xlarge", 96, 8, 1152),
        ("ml.p5.4xlarge", 16, 1, 256),
        ("ml.c7i.large", 2, 0, 4),
        ("ml.r8i.96xlarge", 384, 0, 3072),
        ("ml.trn1.32xlarge", 128, 0, 512),
    ],
)
def test_specs_of_known_types(name, vcpus, gpus, memory):
    spec = SPECS[name]
    assert (spec.vcpus, spec.gpus, spec.memory_gib) == (vcpus, gpus, memory)


def test_a_misspelled_type_gets_the_closest_valid_ones():
    with pytest.raises(
        ValueError,
        match=r"'ml.g5.xlrge' is not a SageMaker training instance type .*did you mean "
        r"ml.g5.xlarge",
    ):
        check_training_type("ml.g5.xlrge")


def test_a_valid_type_the_table_lacks_needs_vcpus_and_gpus(configs):
    lacks = "cluster.instance_groups.0.instance_type=ml.p6-b300.48xlarge"
    with pytest.raises(
        ConfigError,
        match=r"cluster\.instance_groups\.0: ml\.p6-b300\.48xlarge is a SageMaker training "
        r"type that smlaunch's spec table lacks; give its vcpus and gpus",
    ):
        load_config(configs / "hetero.yaml", [lacks])
    cfg = load_config(
        configs / "hetero.yaml", [lacks, "cluster.instance_groups.0.vcpus=192", "cluster.instance_groups.0.gpus=8"]
    )
    assert (cfg.cluster.instance_groups[0].spec.vcpus, cfg.cluster.instance_groups[0].spec.gpus) == (192, 8)
    # on a type the table knows, the config's numbers win (the table may be behind AWS)
    cfg = load_config(configs / "hetero.yaml", ["cluster.instance_groups.1.vcpus=8"])
    assert cfg.cluster.instance_groups[1].spec.vcpus == 8


def test_prices_and_advisor_candidates_name_valid_types(configs):
    with pytest.raises(ConfigError, match=r"monitor\.prices: 'ml\.c5\.large' is not a SageMaker training"):
        load_config(configs / "hetero.yaml", ["monitor.prices={ml.c5.large: 0.1}"])
    with pytest.raises(ConfigError, match=r"'ml\.g5\.xlarge' is not a CPU-only type"):
        load_config(configs / "hetero.yaml", ["monitor.cpu_instance_types=[ml.g5.xlarge]"])
    cfg = load_config(
        configs / "hetero.yaml", ["monitor.prices={ml.c7i.xlarge: 0.18}", "monitor.cpu_instance_types=[ml.c7i.xlarge]"]
    )
    assert cfg.monitor.prices == {"ml.c7i.xlarge": 0.18}
