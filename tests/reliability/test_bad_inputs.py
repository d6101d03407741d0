"""Bad inputs, each through a real `sm-launch` process: one `sm-launch: error:` line naming what and
where (channel, file, byte offset, config field), a non-zero exit, the failure file where a job
has one, bounded memory, and no traceback.

A row of `CASES` is: the input it builds, the exit status, and a regex the one error line must
match. Three kinds of process run them:

* `inspect` reads a data file or FIFO with the channel readers, under a 1 GiB address-space
  limit: a length field of 2^60 or 2^30 must not be believed. It is a debugging command, not a
  job, so it writes no failure file.
* `run` on a fake SageMaker host (`SAGEMAKER_BASE_DIR`): config and job-file errors, with the
  failure file in that host's `output/failure`, as SageMaker reads it.
* `run` of a local job whose channel data is bad before any cluster starts: the failure file is
  the head's (algo-1) in the run directory.

Cases that need a running pipeline (an undecodable image, an empty FIFO) are in
test_bad_inputs_in_jobs.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from smlaunch.pipelines.formats import recordio, tfrecord

ROOT = Path(__file__).resolve().parents[2]
INSPECT_LIMIT_BYTES = 1 << 30
"""Address space of an `inspect` process: far below a believed 2^30 or 2^60 length."""
MAX_RSS_MB = {"inspect": 200, "sagemaker": 400, "local": 1500}
"""Peak resident memory per kind of process (a local run imports torch to check the model)."""
GROUPS = [
    {"instance_group_name": "gpu", "instance_type": "ml.g5.xlarge", "hosts": ["algo-1"]},
    {"instance_group_name": "cpu", "instance_type": "ml.c5.xlarge", "hosts": ["algo-2", "algo-3"]},
]


@dataclass
class Case:
    id: str
    kind: str  # inspect, sagemaker, local
    build: Callable  # (tmp: Path) -> (extra argv, env overrides[, background writer]) ; see below
    code: int
    line: str  # regex for the one error line, after "sm-launch: error: "


# ---- data files, read by `inspect` -------------------------------------------------------------

GOOD = tfrecord.encode_record(b"hello")  # 21 bytes
RIO = recordio.encode_record(b"abcdef")  # 16 bytes


def tfr(tmp: Path, data: bytes, fmt: str = "tfrecord"):
    path = tmp / f"part-0.{fmt}"
    path.write_bytes(data)
    return ["inspect", str(path), "--format", fmt], {}


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


def huge_tfrecord_header(length: int) -> bytes:
    raw = struct.pack("<Q", length)
    return raw + struct.pack("<I", tfrecord.masked_crc(raw))


def fifo(tmp: Path, feed: bytes | None, fmt: str = "tfrecord", wait: float = 30):
    """A real FIFO and, unless `feed` is None, a writer thread that opens it and writes `feed`."""
    path = tmp / "train_0"
    os.mkfifo(path)

    def write():
        with open(path, "wb") as f:
            for i in range(0, len(feed), 1 << 20):
                f.write(feed[i : i + 1 << 20])

    writer = None if feed is None else threading.Thread(target=write, daemon=True)
    return ["inspect", str(path), "--format", fmt, "--fifo-wait", str(wait)], {}, writer


multipart = recordio.encode_record(b"head" + struct.pack("<I", recordio.MAGIC) + b"tail")  # first, last: 12 bytes each

CASES = [
    Case(
        "tfrecord-bad-length-crc",
        "inspect",
        lambda t: tfr(t, GOOD + flip(GOOD, 8) + GOOD),
        1,
        r"\S+/part-0\.tfrecord: bad length CRC in record at byte 21",
    ),
    Case(
        "tfrecord-bad-data-crc",
        "inspect",
        lambda t: tfr(t, GOOD + flip(GOOD, 13) + GOOD),
        1,
        r"\S+/part-0\.tfrecord: bad data CRC in record at byte 21",
    ),
    Case(
        "tfrecord-truncated",
        "inspect",
        lambda t: tfr(t, GOOD * 3 + GOOD[:-3]),
        1,
        r"\S+/part-0\.tfrecord: record at byte 63 claims 5 bytes, more than the 2 left",
    ),
    Case(
        "tfrecord-length-2^60",
        "inspect",
        lambda t: tfr(t, GOOD + huge_tfrecord_header(1 << 60) + b"x" * 64),
        1,
        r"\S+/part-0\.tfrecord: record at byte 21 claims 1152921504606846976 bytes, more than the 60 left",
    ),
    Case(
        "tfrecord-length-2^60-on-a-fifo",
        "inspect",
        lambda t: fifo(t, GOOD + huge_tfrecord_header(1 << 60) + b"x" * 64),
        1,
        r"\S+/train_0: record at byte 21 claims 1152921504606846976 bytes, more than the 2147483648 left",
    ),
    Case(
        "tfrecord-length-2^30-on-a-fifo-that-sends-8-MiB",
        "inspect",
        lambda t: fifo(t, GOOD + huge_tfrecord_header(1 << 30) + b"x" * (8 << 20)),
        1,
        r"\S+/train_0: truncated record at byte 21",
    ),
    Case(
        "recordio-bad-magic",
        "inspect",
        lambda t: tfr(t, RIO + flip(RIO, 0) + RIO, "recordio"),
        1,
        r"\S+/part-0\.recordio: byte 16 does not start with the RecordIO magic 0xCED7230A \(found 0xCED7230B\)",
    ),
    Case(
        "recordio-multipart-missing-its-end",
        "inspect",
        lambda t: tfr(t, RIO + multipart[:12], "recordio"),
        1,
        r"\S+/part-0\.recordio: multipart record at byte 16 has no last part",
    ),
    Case(
        "recordio-multipart-followed-by-a-new-record",
        "inspect",
        lambda t: tfr(t, multipart[:12] + RIO, "recordio"),
        1,
        r"\S+/part-0\.recordio: part at byte 12 starts a record before the one at byte 0 ended",
    ),
    Case(
        "recordio-truncated-pad",
        "inspect",
        lambda t: tfr(t, RIO + RIO[:-1], "recordio"),
        1,
        r"\S+/part-0\.recordio: record at byte 16 claims 6 bytes \(8 with padding\), more than the 7 left",
    ),
    Case(
        "fifo-no-writer",
        "inspect",
        lambda t: fifo(t, None, wait=1),
        1,
        r"\S+/train_0: no writer opened the FIFO within 1 s",
    ),
    Case(
        "data-file-missing",
        "inspect",
        lambda t: (["inspect", str(t / "nowhere.tfrecord"), "--format", "tfrecord"], {}),
        1,
        r"\S+/nowhere\.tfrecord: No such file or directory",
    ),
]


# ---- config and job files, on a fake SageMaker host -----------------------------------------------


def sagemaker_host(tmp: Path, config_text: str | bytes | None = None, overrides=(), mutate=None):
    """`run CONFIG` on algo-2 (a CPU host) of a fake two-group job; `mutate(config_dir)` spoils a job file."""
    from smlaunch.cluster.host_tree import write_host_tree

    tree = write_host_tree(tmp / "opt" / "ml", "algo-2", GROUPS, {"train": "File", "validation": "File"})
    if mutate is not None:
        mutate(tree / "input" / "config")
    config = tmp / "job.yaml"
    if config_text is None:
        cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
        cfg["cluster"]["instance_groups"] = [
            {"name": "gpu", "instance_type": "ml.g5.xlarge"},
            {"name": "cpu", "instance_type": "ml.c5.xlarge", "instance_count": 2},
        ]
        config_text = yaml.safe_dump(cfg)
    if config_text != "missing":
        config.write_bytes(config_text if isinstance(config_text, bytes) else config_text.encode())
    args = ["run", str(config)]
    for item in overrides:
        args += ["--set", item]
    return args, {"SAGEMAKER_BASE_DIR": str(tree)}


def resource_config(change):
    def mutate(config_dir: Path):
        path = config_dir / "resourceconfig.json"
        value = json.loads(path.read_text())
        change(value)
        path.write_text(json.dumps(value))

    return mutate


def write(name: str, text: str):
    return lambda config_dir: (config_dir / name).write_text(text)


JOB = r"\S+/job\.yaml"
CONFIG_DIR = r"\S+/opt/ml/input/config"

CASES += [
    Case(
        "config-unknown-key",
        "sagemaker",
        lambda t: sagemaker_host(t, overrides=["trainer.colour=red"]),
        2,
        JOB + r": trainer\.colour: unknown key; valid keys: batch_size, steps, .*",
    ),
    Case(  # a tuner's range on a key the config does not have: refused at plan, as in the file
        "hyperparameter-unknown-key",
        "sagemaker",
        lambda t: sagemaker_host(t, mutate=write("hyperparameters.json", '{"trainer.colour": "\\"red\\""}')),
        2,
        JOB
        + r" with hyperparameters\.json's trainer\.colour: trainer\.colour: unknown key; valid keys: batch_size, .*",
    ),
    Case(
        "hyperparameter-wrong-type",
        "sagemaker",
        lambda t: sagemaker_host(t, mutate=write("hyperparameters.json", '{"trainer.steps": "many"}')),
        2,
        JOB + r" with hyperparameters\.json's trainer\.steps: trainer\.steps: Input should be a valid integer.*",
    ),
    Case(
        "config-wrong-type",
        "sagemaker",
        lambda t: sagemaker_host(t, overrides=["trainer.batch_size=big"]),
        2,
        JOB + r": trainer\.batch_size: Input should be a valid integer.* \(got 'big'\)",
    ),
    Case(
        "config-negative-batch-size",
        "sagemaker",
        lambda t: sagemaker_host(t, overrides=["pipeline.batch_size=-8"]),
        2,
        JOB + r": pipeline\.batch_size: Input should be greater than 0 \(got -8\)",
    ),
    Case(
        "config-file-missing",
        "sagemaker",
        lambda t: sagemaker_host(t, "missing"),
        2,
        r"config file \S+/job\.yaml does not exist",
    ),
    Case(
        "config-yaml-syntax-error",
        "sagemaker",
        lambda t: sagemaker_host(t, "job: tiny\ntrainer: [steps: 1\n"),
        2,
        r"config file \S+/job\.yaml line 3: not valid YAML \(.*\)",
    ),
    Case(
        "config-not-utf8",
        "sagemaker",
        lambda t: sagemaker_host(t, b"job: tiny\n# caf\xe9\n"),
        2,
        r"config file \S+/job\.yaml: not UTF-8 at byte 15",
    ),
    Case(
        "config-not-a-mapping",
        "sagemaker",
        lambda t: sagemaker_host(t, "- job\n"),
        2,
        r"config file \S+/job\.yaml: expected a mapping at the top level",
    ),
    Case(
        "set-unknown-path",
        "sagemaker",
        lambda t: sagemaker_host(t, overrides=["trainer.nope.deeper=1"]),
        2,
        JOB + r": trainer\.nope: unknown key; valid keys: .*",
    ),
    Case(
        "set-into-a-value",
        "sagemaker",
        lambda t: sagemaker_host(t, overrides=["trainer.steps.x=1"]),
        2,
        r"--set 'trainer\.steps\.x=1': trainer\.steps is a value, not a section",
    ),
    Case(
        "set-index-out-of-range",
        "sagemaker",
        lambda t: sagemaker_host(t, overrides=["pipeline.ops.9.op=resize"]),
        2,
        r"--set 'pipeline\.ops\.9\.op=resize': pipeline\.ops is a list of 4; use an index 0\.\.3",
    ),
    Case(
        "channel-name-invalid",
        "sagemaker",
        lambda t: sagemaker_host(t, overrides=["channels.tr@in.source=x"]),
        2,
        JOB + r": channels: channel name 'tr@in' must match .*",
    ),
    Case(
        "resourceconfig-without-a-gpu-group",
        "sagemaker",
        lambda t: sagemaker_host(
            t, mutate=resource_config(lambda r: r["instance_groups"][0].update(instance_type="ml.c5.2xlarge"))
        ),
        2,
        r"cluster: no instance group of this job has GPUs \(gpu=ml\.c5\.2xlarge, cpu=ml\.c5\.xlarge\); "
        r"name the training group in cluster\.train_group",
    ),
    Case(
        "resourceconfig-unknown-current-host",
        "sagemaker",
        lambda t: sagemaker_host(t, mutate=resource_config(lambda r: r.update(current_host="algo-9"))),
        2,
        r"resourceconfig\.json: current_host 'algo-9' is in no instance group",
    ),
    Case(
        "resourceconfig-malformed-json",
        "sagemaker",
        lambda t: sagemaker_host(t, mutate=write("resourceconfig.json", '{"current_host": "algo-2",')),
        2,
        CONFIG_DIR + r"/resourceconfig\.json: not valid JSON \(Expecting property name .* at line 1 column 27\)",
    ),
    Case(
        "resourceconfig-hosts-not-a-list",
        "sagemaker",
        lambda t: sagemaker_host(t, mutate=resource_config(lambda r: r.update(hosts="algo-1,algo-2"))),
        2,
        CONFIG_DIR + r"/resourceconfig\.json: hosts: expected a JSON array, got \"algo-1,algo-2\"",
    ),
    Case(
        "resourceconfig-group-without-hosts",
        "sagemaker",
        lambda t: sagemaker_host(t, mutate=resource_config(lambda r: r["instance_groups"][1].pop("hosts"))),
        2,
        CONFIG_DIR + r"/resourceconfig\.json: instance_groups\[1\] lacks 'hosts'",
    ),
    Case(
        "resourceconfig-not-utf8",
        "sagemaker",
        lambda t: sagemaker_host(
            t, mutate=lambda d: (d / "resourceconfig.json").write_bytes(b'{"current_host": "\xff"}')
        ),
        2,
        CONFIG_DIR + r"/resourceconfig\.json: not UTF-8 at byte 18",
    ),
    Case(
        "hyperparameters-not-json",
        "sagemaker",
        lambda t: sagemaker_host(t, mutate=write("hyperparameters.json", "lr=0.1\n")),
        2,
        CONFIG_DIR + r"/hyperparameters\.json: not valid JSON \(Expecting value at line 1 column 1\)",
    ),
    Case(
        "inputdataconfig-channel-not-an-object",
        "sagemaker",
        lambda t: sagemaker_host(t, mutate=write("inputdataconfig.json", '{"train": "File", "validation": {}}')),
        2,
        CONFIG_DIR + r"/inputdataconfig\.json: channel 'train': expected a JSON object, got \"File\"",
    ),
    Case(
        "inputdataconfig-without-the-channel",
        "sagemaker",
        lambda t: sagemaker_host(t, mutate=write("inputdataconfig.json", '{"validation": {}}')),
        2,
        r"channels\.train: routed to group cpu, but this host \(algo-2\) did not receive it; "
        r"inputdataconfig\.json lists \['validation'\]",
    ),
    Case(
        "channel-delivered-in-another-mode",
        "sagemaker",
        lambda t: sagemaker_host(
            t, mutate=write("inputdataconfig.json", '{"train": {"TrainingInputMode": "Pipe"}, "validation": {}}')
        ),
        2,
        r"channels\.train\.input_mode: the config says File but the job delivers it in Pipe mode",
    ),
]


# ---- channel data of a local run, bad before any cluster starts ----------------------------------


def local_run(tmp: Path, *overrides: str):
    args = [
        "run",
        str(ROOT / "configs" / "tiny.yaml"),
        "--set",
        f"run.dir={tmp}",
        "--set",
        "run.name=r",
        "--set",
        "model.num_classes=10",
    ]
    for item in overrides:
        args += ["--set", item]
    return args, {}


def empty_dir(tmp: Path) -> Path:
    (tmp / "empty").mkdir()
    return tmp / "empty"


def manifest(tmp: Path, body: bytes, *overrides: str):
    (tmp / "img.jpg").write_bytes(b"jpeg")
    (tmp / "train.manifest").write_bytes(body)
    return local_run(
        tmp,
        f"channels.train.source={tmp}/train.manifest",
        "channels.train.input_mode=Pipe",
        "channels.train.record_format=recordio",
        "channels.train.attribute_names=[source-ref, class]",
        *overrides,
    )


LINE = b'{"source-ref": "img.jpg", "class": 1}\n'
CASES += [
    Case(
        "channel-with-no-files",
        "local",
        lambda t: local_run(t, f"channels.train.source={empty_dir(t)}"),
        2,
        r"channels\.train\.source: \S+/empty holds no files \(hidden ones are skipped, as a channel's reader does\)",
    ),
    Case(
        "pipe-channel-with-no-files",
        "local",
        lambda t: local_run(t, f"channels.train.source={empty_dir(t)}", "channels.train.input_mode=Pipe"),
        2,
        r"channels\.train\.source: \S+/empty holds no files \(hidden ones are skipped, as a channel's reader does\)",
    ),
    Case(
        "channel-source-missing",
        "local",
        lambda t: local_run(t, f"channels.validation.source={t}/nowhere"),
        2,
        r"channels\.validation\.source: \S+/nowhere is not a directory \(it does not exist\)",
    ),
    Case(
        "manifest-not-utf8",
        "local",
        lambda t: manifest(t, LINE + b'{"source-ref": "caf\xe9.jpg", "class": 2}\n'),
        1,
        r"manifest \S+/train\.manifest: not UTF-8 at byte 57",
    ),
    Case(
        "manifest-line-missing-an-attribute",
        "local",
        lambda t: manifest(t, LINE + b'{"source-ref": "img.jpg"}\n'),
        1,
        r"manifest \S+/train\.manifest line 2: no attribute class \(AttributeNames: source-ref, class\)",
    ),
    Case(
        "manifest-line-not-json",
        "local",
        lambda t: manifest(t, LINE + b"source-ref=img.jpg\n"),
        1,
        r"manifest \S+/train\.manifest line 2: not JSON \(Expecting value at column 1\)",
    ),
]


MEASURE = """
import resource, subprocess, sys
limit, rss_file, cmd = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
if limit:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
code = subprocess.call(cmd)
with open(rss_file, "w") as f:
    f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(code)
"""
"""Runs the command as a child of this small process and writes the child's peak RSS (KiB). A
process forked straight from pytest would start its peak at pytest's own (hundreds of MiB once
torch and Ray are loaded): Linux carries the high-water mark across exec."""


def run_sm_launch(args: list[str], env_extra: dict, cwd: Path, timeout_s: float, limit_memory: bool):
    """The exit status, stdout, stderr and peak RSS (MiB) of one `sm-launch` process."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **env_extra}
    for key in ("SAGEMAKER_BASE_DIR", "SM_RESOURCE_CONFIG", "SM_INPUT_DATA_CONFIG", "SM_HPS"):
        if key not in env_extra:
            env.pop(key, None)
    out, err, rss = cwd / "stdout.txt", cwd / "stderr.txt", cwd / "peak_rss_kib.txt"
    command = [
        sys.executable,
        "-c",
        MEASURE,
        str(INSPECT_LIMIT_BYTES if limit_memory else 0),
        str(rss),
        sys.executable,
        "-m",
        "smlaunch.launcher.cli",
        *args,
    ]
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen(command, stdout=o, stderr=e, env=env, cwd=cwd, start_new_session=True)
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"sm-launch {' '.join(args)} did not exit within {timeout_s} s")
    return code, out.read_text(), err.read_text(), int(rss.read_text()) / 1024


def failure_file(kind: str, tmp: Path, env: dict) -> Path | None:
    if kind == "sagemaker":
        return Path(env["SAGEMAKER_BASE_DIR"]) / "output" / "failure"
    if kind == "local":
        return tmp / "r" / "hosts" / "algo-1" / "opt" / "ml" / "output" / "failure"
    return None


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_gives_one_line_a_failure_file_and_bounded_memory(case: Case, tmp_path):
    built = case.build(tmp_path)
    args, env = built[0], built[1]
    writer = built[2] if len(built) > 2 else None
    if writer is not None:
        writer.start()
    code, out, err, peak_mb = run_sm_launch(args, env, tmp_path, timeout_s=120, limit_memory=case.kind == "inspect")
    if writer is not None:
        writer.join(10)
    assert code == case.code, f"exit {code}\nstdout: {out[-1500:]}\nstderr: {err[-3000:]}"
    assert "Traceback" not in err and "internal error" not in err, err[-3000:]
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{err[-3000:]}"
    assert re.fullmatch(r"sm-launch: error: " + case.line, lines[0]), lines[0]
    failure = failure_file(case.kind, tmp_path, env)
    if failure is not None:
        assert failure.read_text() == lines[0].removeprefix("sm-launch: error: ") + "\n"
    assert peak_mb < MAX_RSS_MB[case.kind], f"peak RSS {peak_mb:.0f} MiB"


def test_a_pipe_fifo_that_never_appears_names_channel_fifo_and_epoch(tmp_path):
    """The Pipe reader's own deadline (SageMaker creates `<channel>_<epoch>` late or never)."""
    from smlaunch.errors import DataError
    from smlaunch.pipelines.sources.fifo import PipeEpochs

    started = time.monotonic()
    with pytest.raises(DataError) as raised:
        with PipeEpochs(tmp_path, "train", first_epoch=3, timeout_s=0.5).next():
            pass
    assert time.monotonic() - started < 5
    assert str(raised.value) == (
        f"channel 'train': Pipe-mode FIFO {tmp_path}/train_3 for epoch 3 did not appear within 0 s"
    )


def test_a_pipe_fifo_whose_writer_never_connects_names_it(tmp_path):
    from smlaunch.errors import DataError
    from smlaunch.pipelines.sources.fifo import PipeEpochs

    os.mkfifo(tmp_path / "train_0")
    with pytest.raises(
        DataError,
        match=rf"^channel 'train': no writer connected to {tmp_path}/train_0 \(epoch 0\) "
        r"within 1 s$",
    ):
        with PipeEpochs(tmp_path, "train", timeout_s=1).next():
            pass


PLACE = re.compile(r"\\S\+/|\\\.json|config file|[a-z_]+\\\.[a-z_]+")
"""In an expected line's regex: a file or FIFO (a path), a SageMaker job file (`.json`), the
config file, or a config field (`trainer.batch_size`): where the input went wrong."""


def test_each_case_names_its_place_and_each_kind_of_process_meets_bad_input():
    """The table's promise, checked on the table: every expected line names where the input went
    wrong, no two cases share an id or the same build (a copy tests nothing new), and each kind of
    process (the debugging reader, a SageMaker host, a local job) is given bad input."""
    unnamed = [c.id for c in CASES if not PLACE.search(c.line)]
    assert unnamed == []
    assert len({c.id for c in CASES}) == len(CASES)
    assert len({c.line for c in CASES}) == len(CASES) - 1  # one message is asserted for File and for Pipe
    assert {c.kind for c in CASES} == {"inspect", "sagemaker", "local"}
    assert {c.code for c in CASES if c.kind == "sagemaker"} == {2}  # config and job-file errors: usage (2)
