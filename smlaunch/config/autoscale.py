"""The `autoscale:` section: elastic data hosts (issue 42).

On a Ray cluster whose autoscaler can add and remove nodes (KubeRay's, or `ray start
--autoscaling-config` here), the launcher asks for data hosts by label while it trains and gives
them back when the pipeline has capacity to spare (`cluster.autoscale.policy`). The base class
repeats `schema.StrictModel` because `schema` imports this module.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from smlaunch.config.base import StrictModel


class AutoscaleConfig(StrictModel):
    """How many data hosts the job may hold, and the data wait it aims for (`docs/elastic.md`)."""

    min_data_hosts: int = Field(default=1, ge=0)
    """Never fewer (the hosts a running cluster has when the job starts also stay: they read the
    channels). 0: none once the epoch reads a sealed cache of the chain's prefix (`pipeline.cache`
    on: the plan refuses 0 without it), the random rest then running on the train hosts' spare
    CPUs; back to one host, or those the job started with, if the cache is lost (`docs/elastic.md`)."""
    max_data_hosts: int = Field(ge=1)
    """Never more, whatever the wait: the cap on what the job can cost."""
    target_data_wait_pct: float = Field(default=5.0, gt=0, lt=100)
    """Add a host while the ranks wait for data longer than this share of their step time, where the
    advisor's model predicts +7 % or more and a lower cost per image (train hosts counted); in the first
    windows of the run and of each epoch only where the chain's own clock confirms the shortage. Give
    one back under half of it when one host fewer would still make 1.3x what the trainer takes, or under
    it when the chain's own clock says one fewer makes 2x."""
    cooldown_s: float = Field(default=60.0, ge=0)
    """After a change, how long before the next: a new host needs its Ray node, its workers and the
    chain's first blocks before the wait shows what it gave."""
    window_steps: int = Field(default=20, ge=2)
    """The latest steps a decision reads (their mean data wait and rate)."""
    group: str | None = None
    """The instance group that scales (its labels, CPUs and price); default: the one CPU-only group,
    never the train group."""

    @model_validator(mode="after")
    def _bounds(self):
        if self.min_data_hosts > self.max_data_hosts:
            raise ValueError(
                f"autoscale.min_data_hosts ({self.min_data_hosts}) is above autoscale.max_data_hosts "
                f"({self.max_data_hosts})"
            )
        return self
