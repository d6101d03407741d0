"""The job every path runs: its body (`run.run_job`), stop handling, the head's progress and live
events, the trainer's spec, the checks before a run."""
