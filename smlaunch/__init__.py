"""smlaunch: heterogeneous PyTorch training on SageMaker-style clusters.

Nothing is imported here on purpose: `sm-launch --help` must not pay for torch or ray.
"""

__version__ = "0.1.0"
