"""smlaunch: heterogeneous PyTorch training on SageMaker-style clusters.

Nothing is imported here on purpose: `sm-launch --help` must not pay for torch or ray. The Python
API (`smlaunch.run`, `smlaunch.plan`; `smlaunch.api`) is loaded when first used.
"""

__version__ = "0.1.0"

_API = {
    "run": "smlaunch.api",
    "plan": "smlaunch.api",
    "UserError": "smlaunch.errors",
    "ConfigError": "smlaunch.errors",
    "DataError": "smlaunch.errors",
}


def __getattr__(name: str):
    """`smlaunch.run`, `smlaunch.plan` and the errors they raise, imported when first used (PEP 562)."""
    if name in _API:
        import importlib

        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'smlaunch' has no attribute {name!r}")
