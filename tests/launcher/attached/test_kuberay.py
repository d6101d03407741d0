"""`sm-launch kuberay`: the printed RayJob passes KubeRay's own CRD schema, strictly.

The schema is the RayJob CRD's `openAPIV3Schema` from the KubeRay repository (kuberay_crds/).
Kubernetes prunes unknown fields silently unless the apply is strict (kubectl's default field
validation since 1.27 rejects them), so the test makes every object in the schema closed, as a
strict apply would: a misspelt field fails here instead of vanishing in the cluster. CEL rules
(`x-kubernetes-validations`) are the API server's and are not checked here.
"""

import gzip
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from smlaunch.config import load_config
from smlaunch.launcher.cli import main

ROOT = Path(__file__).resolve().parents[3]
HETERO = str(ROOT / "configs" / "hetero.yaml")
SCHEMA = Path(__file__).parent / "kuberay_crds" / "rayjob-v1-schema.json.gz"


def closed(schema):
    """The schema with every object that lists its properties closed to others."""
    if isinstance(schema, dict):
        schema = {k: closed(v) for k, v in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [closed(v) for v in schema]
    return schema


@pytest.fixture(scope="module")
def validator():
    with gzip.open(SCHEMA, "rt") as f:
        return jsonschema.Draft7Validator(closed(json.load(f)))


def kuberay(capsys, *args: str) -> tuple[int, list[dict], str]:
    code = main(["kuberay", *args])
    out, err = capsys.readouterr()
    return code, list(yaml.safe_load_all(out)) if code == 0 else [], err


def problems(validator, job: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(job)]


def test_the_main_config_becomes_a_rayjob_that_passes_the_crd_schema(validator, capsys, tmp_path):
    code, (config_map, job), err = kuberay(capsys, HETERO, "--image", "ghcr.io/acme/smlaunch:1.0")
    assert code == 0, err
    assert problems(validator, job) == []
    assert (job["apiVersion"], job["kind"], job["metadata"]["name"]) == ("ray.io/v1", "RayJob", "hetero-digits")
    spec = job["spec"]
    assert spec["entrypoint"] == "sm-launch run /home/ray/smlaunch/config.yaml"
    assert spec["shutdownAfterJobFinishes"] is True and spec["activeDeadlineSeconds"] == 7200
    cluster = spec["rayClusterSpec"]
    assert cluster["authOptions"] == {"mode": "token"}
    head = cluster["headGroupSpec"]
    assert head["rayStartParams"] == {"num-cpus": "0", "num-gpus": "0"}  # no work lands on the head
    assert head["template"]["spec"]["volumes"] == [
        {"name": "smlaunch-config", "configMap": {"name": "hetero-digits-config"}}
    ]
    groups = {g["groupName"]: g for g in cluster["workerGroupSpecs"]}
    assert sorted(groups) == ["data-group", "train-group"]
    train, data = groups["train-group"], groups["data-group"]
    assert train["labels"] == {"ray-subcluster": "train", "sm-group": "train_group"}
    assert data["labels"] == {"ray-subcluster": "data", "sm-group": "data_group"}
    assert (train["replicas"], train["minReplicas"], train["maxReplicas"]) == (1, 1, 1)
    train_pod, data_pod = train["template"]["spec"], data["template"]["spec"]
    # ml.g5.xlarge: 4 vCPUs, 1 GPU, 16 GiB; ml.c5.4xlarge: 16 vCPUs, 32 GiB (one vCPU and 15 % left to the node)
    assert train_pod["containers"][0]["resources"]["requests"] == {
        "cpu": "3",
        "memory": "13926Mi",
        "nvidia.com/gpu": "1",
    }
    assert train["rayStartParams"] == {"num-cpus": "3", "num-gpus": "1"}
    assert data_pod["containers"][0]["resources"]["requests"] == {"cpu": "15", "memory": "27852Mi"}
    # each raylet keeps the idle workers of its chain and read tasks, as on SageMaker and locally
    env = {e["name"]: e["value"] for e in data_pod["containers"][0]["env"]}
    assert env["RAY_num_workers_soft_limit"] == "32" and env["RAY_USAGE_STATS_ENABLED"] == "0"
    assert "nvidia.com/gpu" not in data_pod["containers"][0]["resources"]["limits"]
    assert train_pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "g5.xlarge"}
    assert data_pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "c5.4xlarge"}
    assert [c["image"] for g in (head, train, data) for c in g["template"]["spec"]["containers"]] == [
        "ghcr.io/acme/smlaunch:1.0"
    ] * 3

    # the ConfigMap carries the config itself: it loads back to the same tree
    assert config_map["kind"] == "ConfigMap" and config_map["metadata"]["name"] == "hetero-digits-config"
    shipped = tmp_path / "config.yaml"
    shipped.write_text(config_map["data"]["config.yaml"])
    assert load_config(str(shipped), []) == load_config(HETERO, [])


def test_a_misspelt_field_fails_the_closed_schema(validator, capsys):
    """The check can fail: a field KubeRay does not know, and a wrong type, are both caught."""
    _, (_, job), _ = kuberay(capsys, HETERO, "--image", "x")
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replica"] = 2
    job["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] = 0
    found = problems(validator, job)
    assert any("'replica' was unexpected" in p for p in found), found
    assert any("rayStartParams/num-cpus: 0 is not of type 'string'" in p for p in found), found


def test_the_head_can_be_a_host_of_the_train_group_and_settings_reach_the_manifest(validator, capsys):
    code, (config_map, job), err = kuberay(
        capsys,
        HETERO,
        "--set",
        "cluster.instance_groups.0.instance_type=ml.p4d.24xlarge",
        "--set",
        "cluster.instance_groups.0.instance_count=3",
        "--set",
        "cluster.instance_groups.1.instance_count=4",
        "--set",
        "trainer.batch_size=32",  # digits' 1437 rows over 24 ranks: 59 each, short of hetero.yaml's 64
        "--set",
        "kuberay={image: reg/smlaunch:2, head_group: train_group, namespace: vision, node_selector: none, "
        "service_account: s3-reader, max_run_s: 600}",
    )
    assert code == 0, err
    assert problems(validator, job) == []
    assert job["metadata"]["namespace"] == config_map["metadata"]["namespace"] == "vision"
    cluster = job["spec"]["rayClusterSpec"]
    head = cluster["headGroupSpec"]
    assert head["labels"] == {"ray-subcluster": "train", "sm-group": "train_group"}
    assert head["rayStartParams"] == {"num-cpus": "95", "num-gpus": "8"}  # p4d.24xlarge: 96 vCPUs, 8 GPUs
    groups = {g["groupName"]: g["replicas"] for g in cluster["workerGroupSpecs"]}
    assert groups == {"train-group": 2, "data-group": 4}  # 3 train hosts: the head and two workers
    for pod in [head["template"]["spec"]] + [g["template"]["spec"] for g in cluster["workerGroupSpecs"]]:
        assert "nodeSelector" not in pod and pod["serviceAccountName"] == "s3-reader"
    assert job["spec"]["activeDeadlineSeconds"] == 600


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ([], "kuberay.image: no image; give --image IMAGE or kuberay.image"),
        (["kuberay={image: x, head_group: gpus}"], "kuberay.head_group: no instance group 'gpus'"),
        (["kuberay={image: x, namespace: Vision_Team}"], "kuberay.namespace: String should match pattern"),
        (
            ["kuberay={image: x, replicas: 2}"],
            "kuberay.replicas: unknown key; valid keys: image, namespace, head_group",
        ),
    ],
)
def test_a_bad_kuberay_section_is_refused_in_one_line(capsys, overrides, expected):
    code, _, err = kuberay(capsys, HETERO, *[x for o in overrides for x in ("--set", o)])
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], err


def test_outputs_on_a_shared_volume_claim_every_pod_mounts_and_a_warning_without_one(validator, capsys):
    code, docs, err = kuberay(
        capsys,
        HETERO,
        "--image",
        "i:1",
        "--set",
        "kuberay.shared_volume_claim=team-efs",
        "--set",
        "run.dir=/mnt/shared/runs",
    )
    assert code == 0 and err == ""
    job = docs[1]
    assert problems(validator, job) == []
    cluster = job["spec"]["rayClusterSpec"]
    pods = [cluster["headGroupSpec"]["template"]] + [g["template"] for g in cluster["workerGroupSpecs"]]
    for pod in pods:  # rank 0's pod writes the model, the head the report: all of them see the volume
        assert {"name": "shared", "persistentVolumeClaim": {"claimName": "team-efs"}} in pod["spec"]["volumes"]
        assert {"name": "shared", "mountPath": "/mnt/shared"} in pod["spec"]["containers"][0]["volumeMounts"]
    # a run.dir off the volume would be lost with the pods: refused in one line
    code, _, err = kuberay(capsys, HETERO, "--image", "i:1", "--set", "kuberay.shared_volume_claim=team-efs")
    assert code == 2 and err.strip().splitlines() == [
        "sm-launch: error: run.dir: runs is not under kuberay.shared_mount (/mnt/shared); the pods keep nothing "
        "else: set run.dir=/mnt/shared/runs (or an s3:// URI)"
    ]
    # without a volume the manifest still prints (stdout stays YAML for kubectl), with a warning on stderr
    code, docs, err = kuberay(capsys, HETERO, "--image", "i:1")
    assert (
        code == 0 and len(docs) == 2 and err.startswith("sm-launch: warning: run.dir: runs is on the pods' own disks")
    )
    # an s3:// run.dir needs no volume: the outputs are uploaded (configs/hetero.yaml's channels are S3 too)
    code, docs, err = kuberay(capsys, HETERO, "--image", "i:1", "--set", "run.dir=s3://team-runs/jobs")
    assert code == 0 and len(docs) == 2 and err == ""


AUTOSCALE = ["--image", "i:1", "--set", "run.dir=s3://team-runs/jobs"]


def test_autoscale_makes_the_data_group_elastic_under_kuberays_autoscaler_and_nothing_else(validator, capsys):
    """With `autoscale:` the manifest is the fixed one plus KubeRay's autoscaler (Ray's v2) and the
    scaled group's bounds: the closed schema accepts it, and undoing those fields gives back the
    fixed manifest exactly, so the train group, the head and the job's lifecycle are untouched."""
    code, (config_map, job), err = kuberay(
        capsys, HETERO, *AUTOSCALE, "--set", "autoscale={min_data_hosts: 2, max_data_hosts: 6}"
    )
    assert code == 0, err
    assert problems(validator, job) == []
    cluster = job["spec"]["rayClusterSpec"]
    assert cluster["enableInTreeAutoscaling"] is True
    assert cluster["autoscalerOptions"] == {
        "version": "v2",
        "upscalingMode": "Default",
        "idleTimeoutSeconds": 60,
        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}},
    }
    groups = {g["groupName"]: g for g in cluster["workerGroupSpecs"]}
    data, train = groups["data-group"], groups["train-group"]
    assert (data["replicas"], data["minReplicas"], data["maxReplicas"]) == (2, 2, 6)  # starts at the minimum
    assert (train["replicas"], train["minReplicas"], train["maxReplicas"]) == (1, 1, 1)
    # every pod of the group, the autoscaler's included, carries the labels the run asks for and matches
    assert data["labels"] == {"ray-subcluster": "data", "sm-group": "data_group"}
    # KubeRay sets RAY_enable_autoscaler_v2 itself for version v2, and refuses a head that sets it too
    head = cluster["headGroupSpec"]["template"]["spec"]
    assert "RAY_enable_autoscaler_v2" not in {e["name"] for e in head["containers"][0]["env"]}
    assert all("restartPolicy" not in g["template"]["spec"] for g in [cluster["headGroupSpec"], data, train])
    assert yaml.safe_load(config_map["data"]["config.yaml"])["autoscale"]["max_data_hosts"] == 6

    # `min_data_hosts: 0` (issue 80): one replica to start, for epoch 1's whole chain; none at the minimum
    code, (_, to_zero), err = kuberay(
        capsys, HETERO, *AUTOSCALE, "--set", "autoscale={min_data_hosts: 0, max_data_hosts: 6}"
    )
    assert code == 0, err
    zero = next(g for g in to_zero["spec"]["rayClusterSpec"]["workerGroupSpecs"] if g["groupName"] == "data-group")
    assert (zero["replicas"], zero["minReplicas"], zero["maxReplicas"]) == (1, 0, 6)

    _, (fixed_map, fixed), _ = kuberay(capsys, HETERO, *AUTOSCALE)
    del cluster["enableInTreeAutoscaling"], cluster["autoscalerOptions"]
    data.update(replicas=1, minReplicas=1, maxReplicas=1)  # hetero.yaml: one data host
    assert job == fixed and "autoscale" not in yaml.safe_load(fixed_map["data"]["config.yaml"])
    assert "enableInTreeAutoscaling" not in fixed["spec"]["rayClusterSpec"]


def test_the_named_group_scales_and_the_other_cpu_group_stays_fixed(validator, capsys, tmp_path):
    config = yaml.safe_load(Path(HETERO).read_text())
    config["cluster"]["instance_groups"].append(
        {"name": "prep_group", "instance_type": "ml.c5.2xlarge", "instance_count": 2}
    )
    three = tmp_path / "three.yaml"
    three.write_text(yaml.safe_dump(config))
    code, (_, job), err = kuberay(
        capsys, str(three), *AUTOSCALE, "--set", "autoscale={max_data_hosts: 5, group: prep_group}"
    )
    assert code == 0, err
    assert problems(validator, job) == []
    counts = {
        g["groupName"]: (g["replicas"], g["minReplicas"], g["maxReplicas"])
        for g in job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    }
    assert counts == {"train-group": (1, 1, 1), "data-group": (1, 1, 1), "prep-group": (1, 1, 5)}
    # two CPU groups and none named: the rule that picks the group refuses, in one line
    code, _, err = kuberay(capsys, str(three), *AUTOSCALE, "--set", "autoscale={max_data_hosts: 5}")
    assert code == 2 and err.strip().splitlines() == [
        "sm-launch: error: autoscale.group: more than one CPU-only group besides the train group train_group "
        "(data_group, prep_group); name the one to scale"
    ]


def test_a_head_of_the_scaled_group_counts_as_one_of_its_hosts(validator, capsys):
    code, (_, job), err = kuberay(
        capsys,
        HETERO,
        *AUTOSCALE,
        "--set",
        "kuberay.head_group=data_group",
        "--set",
        "autoscale={min_data_hosts: 2, max_data_hosts: 5}",
    )
    assert code == 0, err
    assert problems(validator, job) == []
    cluster = job["spec"]["rayClusterSpec"]
    assert cluster["headGroupSpec"]["labels"] == {"ray-subcluster": "data", "sm-group": "data_group"}
    data = {g["groupName"]: g for g in cluster["workerGroupSpecs"]}["data-group"]
    assert (data["replicas"], data["minReplicas"], data["maxReplicas"]) == (1, 1, 4)


@pytest.mark.parametrize(
    "autoscale, expected",
    [
        ("{max_data_hosts: 3, group: train_group}", "autoscale.group: train_group is the train group"),
        ("{max_data_hosts: 3, group: gpus}", "autoscale.group: no instance group 'gpus'"),
    ],
)
def test_a_bad_autoscale_group_is_refused_in_one_line(capsys, autoscale, expected):
    code, _, err = kuberay(capsys, HETERO, *AUTOSCALE, "--set", f"autoscale={autoscale}")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and expected in lines[0], err


def test_a_user_s_functions_must_be_in_the_image_and_the_note_names_their_files(
    validator, capsys, tmp_path, monkeypatch
):
    """The project's functions resolve here (a missing one fails in one line, as at `plan`), and
    stderr says which files the image's working directory must hold."""
    from support.byo import copy_project

    monkeypatch.chdir(copy_project(tmp_path))
    user = ["--set", "model={factory: 'regression:mlp', params: {inputs: 4}}", "--set", "task={loss: 'regression:mse'}"]
    code, documents, err = kuberay(capsys, HETERO, "--image", "img:1", *user)
    assert code == 0, err
    assert problems(validator, documents[1]) == []
    assert (
        "sm-launch: note: the job imports regression:mlp, regression:mse: the image's working directory must "
        "hold regression.py as this folder does"
    ) in err
    code, _, err = kuberay(capsys, HETERO, "--image", "img:1", *user[:2], "--set", "task={loss: 'regression:nope'}")
    assert code == 2 and "task.loss: regression has no function nope" in err
    # your own Ray Train loop (issue 55): the same rule, and the manifest passes the schema
    code, documents, err = kuberay(
        capsys,
        HETERO,
        "--image",
        "img:1",
        "--set",
        "model=null",
        "--set",
        "task=null",
        "--set",
        "trainer={loop: 'ray_loop:train_func', steps: 300}",
    )
    assert code == 0, err
    assert problems(validator, documents[1]) == []
    assert (
        "sm-launch: note: the job imports ray_loop:train_func: the image's working directory must hold "
        "ray_loop.py as this folder does"
    ) in err
