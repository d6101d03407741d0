"""Cluster pieces only the SageMaker path uses: its plan from the job's instance groups, and NCCL's environment."""
