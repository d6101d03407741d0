"""`sm-launch kuberay CONFIG [--image IMAGE]`: print the job as a ConfigMap and a KubeRay RayJob.

Starts nothing and needs no cluster: pipe it to `kubectl apply -f -`. The config is checked as
`plan` checks it first, so a config that would fail to run fails here, in one line.
"""

from __future__ import annotations

import logging

from smlaunch.console import RESULT
from smlaunch.launcher.commands.job import add_config_arguments

log = logging.getLogger("smlaunch")


def add_arguments(parser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--image", help="the image every pod runs (Ray and smlaunch installed); default: kuberay.image")


def main(args, failure) -> int:
    import sys
    from importlib.metadata import version

    from smlaunch.config import load_config
    from smlaunch.launcher.attached.kuberay import code_notes, manifest, manifest_yaml, storage_notes
    from smlaunch.launcher.job.preflight import preflight

    cfg = load_config(args.config, args.overrides)
    preflight(cfg, sources=False)
    documents = manifest(cfg, args.image, version("ray"))
    for note in storage_notes(cfg):  # stderr: stdout is piped to kubectl apply
        print(f"sm-launch: warning: {note}", file=sys.stderr)
    for note in code_notes(cfg):
        print(f"sm-launch: note: {note}", file=sys.stderr)
    for document in documents:
        if document["kind"] == "Secret":
            names = ", ".join(document["stringData"])
            print(
                f"sm-launch: note: the Secret {document['metadata']['name']} holds the values of {names} "
                "(kuberay.environment): pipe the manifest to kubectl apply -f - rather than keep it in a file",
                file=sys.stderr,
            )
    log.log(RESULT, manifest_yaml(documents).rstrip())
    return 0
