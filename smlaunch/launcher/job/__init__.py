"""The job every path runs: the local run's body, stop handling, the head's progress and live events, the trainer's spec, the checks before a run."""
