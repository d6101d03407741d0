"""The framework module of SageMaker's PyTorch images, as far as a stop meets it.

Those images set `SAGEMAKER_TRAINING_MODULE=sagemaker_pytorch_container.training:main`, and the
toolkit's `train` calls it. It runs the entry point through the toolkit's own `entry_point.run`
with `capture_error=True` (aws/sagemaker-pytorch-training-toolkit,
`src/sagemaker_pytorch_container/training.py`), so the toolkit's asyncio runner pipes both the
entry's stdout and stderr to itself and prints them. When `train` dies on a stop, both pipes lose
their reader. This module makes that same call (the DNS wait and NCCL variables of the real one
are left out: here a hosts file resolves every host, and nothing uses NCCL).
"""

from sagemaker_training import entry_point, environment, runner


def main() -> None:
    env = environment.Environment()
    entry_point.run(
        uri=env.module_dir,
        user_entry_point=env.user_entry_point,
        args=env.to_cmd_args(),
        env_vars=env.to_env_vars(),
        capture_error=True,
        runner_type=runner.ProcessRunnerType,
    )
