"""Experiment tracking: the job's MLflow run (`tracker`), the store behind it (`store`), and sending a
run folder's journal afterwards (`replay`)."""
