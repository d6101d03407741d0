"""A run directory on S3 (`trainers.s3_store`) against a real S3-protocol server (moto on 127.0.0.1):
which checkpoint a new run resumes from, and what a damaged one does."""

import json

import pytest

from smlaunch.errors import UserError
from smlaunch.pipelines.sources.local_s3 import LocalS3
from smlaunch.trainers import s3_store
from smlaunch.trainers.checkpoints import latest_complete, load_state, write_state
from support.s3 import aws_environment


@pytest.fixture
def s3(tmp_path, monkeypatch):
    (tmp_path / "seed").mkdir()
    (tmp_path / "seed" / "x").write_text("x")
    with LocalS3({"s3://runs/seed/": tmp_path / "seed"}) as server:
        aws_environment(monkeypatch, server.endpoint_url, s3_only=True)
        yield server


def checkpoint(tmp_path, step: int) -> str:
    folder = tmp_path / f"ckpt-{step}"
    folder.mkdir()
    write_state(str(folder), {"step": step, "epoch": 1, "weights": list(range(step))})
    return str(folder)


def test_the_newest_whole_checkpoint_of_any_run_is_resumed_and_a_cut_short_one_is_passed_over(s3, tmp_path):
    root = "s3://runs/jobs/a/checkpoints"
    s3_store.upload_dir(checkpoint(tmp_path, 8), f"{root}/run-1/step-00000008")
    s3_store.upload_dir(checkpoint(tmp_path, 16), f"{root}/run-2/step-00000016")
    assert latest_complete(root) == f"{root}/run-2/step-00000016"
    assert load_state(f"{root}/run-2/step-00000016")["weights"] == list(range(16))
    # a newer one whose state.pt never arrived (the host went mid-upload): skipped, the older one wins
    cut = checkpoint(tmp_path, 24)
    s3.client().upload_file(f"{cut}/meta.json", "runs", "jobs/a/checkpoints/run-2/step-00000024/meta.json")
    assert latest_complete(root) == f"{root}/run-2/step-00000016"
    assert latest_complete("s3://runs/jobs/none/checkpoints") is None


def test_a_checkpoint_whose_bytes_do_not_match_its_hash_fails_in_one_line(s3, tmp_path):
    uri = "s3://runs/jobs/b/checkpoints/run-1/step-00000008"
    folder = checkpoint(tmp_path, 8)
    meta = json.loads((tmp_path / "ckpt-8" / "meta.json").read_text())
    (tmp_path / "ckpt-8" / "meta.json").write_text(json.dumps({**meta, "sha256": "0" * 64}))
    s3_store.upload_dir(folder, uri)
    assert latest_complete("s3://runs/jobs/b/checkpoints") == uri  # sizes agree: the driver cannot tell
    with pytest.raises(
        UserError,
        match=r"^checkpoint s3://runs/jobs/b/checkpoints/run-1/step-00000008: state.pt "
        r"does not match its meta.json \(size or SHA-256\)",
    ):
        load_state(uri)


def test_a_bucket_that_is_missing_fails_before_any_work_and_ray_gets_a_filesystem_without_credentials(s3):
    s3_store.check_writable("s3://runs/jobs")
    with pytest.raises(UserError, match=r"^run.dir: cannot write to s3://nope/jobs \(NoSuchBucket\)"):
        s3_store.check_writable("s3://nope/jobs")
    path, filesystem = s3_store.ray_storage("s3://runs/jobs/a/checkpoints")
    assert path == "runs/jobs/a/checkpoints" and type(filesystem).__name__ == "S3FileSystem"
    options = filesystem.__reduce__()[1][0]  # what travels to the nodes when Ray pickles it
    assert (options["access_key"], options["secret_key"], options["endpoint_override"]) == (
        None,
        None,
        s3.endpoint_url.removeprefix("http://"),
    )
    assert s3_store.ray_storage("/tmp/x") == ("/tmp/x", None)


def test_a_key_with_dot_dot_is_refused_before_anything_lands_outside_the_folder(s3, tmp_path):
    """Whoever can write the bucket can name a key `run-1/step-8/../../../x`: S3 keeps it as text,
    and a download that joined it to a path would write outside its folder."""
    uri = "s3://runs/jobs/c/checkpoints/run-1/step-00000008"
    s3_store.upload_dir(checkpoint(tmp_path, 8), uri)
    s3.client().put_object(Bucket="runs", Key="jobs/c/checkpoints/run-1/step-00000008/../../../../escaped", Body=b"x")
    local = tmp_path / "deep" / "down" / "here"
    local.mkdir(parents=True)
    with pytest.raises(UserError) as refused:
        s3_store.download_dir(uri, local)
    assert str(refused.value) == (
        f"s3://runs/jobs/c/checkpoints/run-1/step-00000008/../../../../escaped: its key leads outside {uri}/ "
        "(a `..` or absolute part); not downloading it: delete that object"
    )
    assert not any(tmp_path.rglob("escaped"))
    # a run folder named `..` is never taken for a run
    s3_store.upload_dir(checkpoint(tmp_path, 9), "s3://runs/jobs/d/checkpoints/../step-00000009")
    assert latest_complete("s3://runs/jobs/d/checkpoints") is None
