"""The one typed config tree (`schema`) and how YAML plus `--set` overrides become it (`loader`)."""

from smlaunch.config.loader import load_config
from smlaunch.config.schema import LaunchConfig

__all__ = ["LaunchConfig", "load_config"]
