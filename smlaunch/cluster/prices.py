"""On-demand prices of SageMaker training instances, for the advisor's cost per epoch.

Defaults are approximate US East (N. Virginia) on-demand list prices for SageMaker training, in
USD per instance-hour, as shown on the SageMaker pricing page (aws.amazon.com/sagemaker/pricing)
around the date below. Prices differ by region, change over time, and spot or Savings Plans cut
them: set `monitor.prices` in the config to use your own. The advisor prints the date and says
when a type has no price.
"""

from __future__ import annotations

PRICES_DATED = "2025-01, us-east-1, on-demand, approximate"

DEFAULT_PRICES: dict[str, float] = {
    "ml.c5.xlarge": 0.204,
    "ml.c5.2xlarge": 0.408,
    "ml.c5.4xlarge": 0.816,
    "ml.c5.9xlarge": 1.836,
    "ml.c5.18xlarge": 3.672,
    "ml.c6i.xlarge": 0.204,
    "ml.c6i.2xlarge": 0.408,
    "ml.c6i.4xlarge": 0.816,
    "ml.c6i.8xlarge": 1.632,
    "ml.m5.xlarge": 0.23,
    "ml.m5.2xlarge": 0.461,
    "ml.m5.4xlarge": 0.922,
    "ml.m5.12xlarge": 2.765,
    "ml.m6i.xlarge": 0.23,
    "ml.m6i.2xlarge": 0.461,
    "ml.m6i.4xlarge": 0.922,
    "ml.t3.large": 0.1,
    "ml.t3.xlarge": 0.2,
    "ml.t3.2xlarge": 0.399,
    "ml.g4dn.xlarge": 0.736,
    "ml.g4dn.2xlarge": 0.94,
    "ml.g4dn.4xlarge": 1.505,
    "ml.g4dn.12xlarge": 4.89,
    "ml.g5.xlarge": 1.408,
    "ml.g5.2xlarge": 1.515,
    "ml.g5.4xlarge": 2.03,
    "ml.g5.12xlarge": 7.09,
    "ml.g5.48xlarge": 20.36,
    "ml.g6.xlarge": 1.131,
    "ml.g6.2xlarge": 1.222,
    "ml.p3.2xlarge": 3.825,
    "ml.p3.8xlarge": 14.688,
    "ml.p3.16xlarge": 28.152,
    "ml.p4d.24xlarge": 37.688,
    "ml.p5.48xlarge": 113.07,
}

CPU_CANDIDATES = (
    "ml.c5.xlarge",
    "ml.c5.2xlarge",
    "ml.c5.4xlarge",
    "ml.c5.9xlarge",
    "ml.m5.xlarge",
    "ml.m5.2xlarge",
    "ml.m5.4xlarge",
)
"""CPU types the advisor compares when the config names none: compute- and general-purpose sizes."""


def price_table(overrides: dict[str, float] | None = None) -> dict[str, float]:
    """The default table with the config's prices on top."""
    return {**DEFAULT_PRICES, **(overrides or {})}
