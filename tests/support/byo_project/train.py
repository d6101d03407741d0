"""The user's own script: the job as a dict, run through smlaunch's Python API (as from a notebook)."""

import json
import sys

import smlaunch

config = json.loads(open(sys.argv[1]).read())
summary = smlaunch.run(config, overrides={"trainer.log_every": 5})
print("SUMMARY " + json.dumps(summary))
try:
    smlaunch.plan(config, overrides={"model.params": {"inputs": 4, "depth": 2}})
except smlaunch.ConfigError as exc:
    print("PLAN ERROR " + str(exc))
