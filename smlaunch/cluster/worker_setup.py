"""Runs in every Ray worker process of a job (`runtime_env.worker_process_setup_hook`).

Ray Train's PlacementGroupCleaner polls the State API, which needs the dashboard; with the
dashboard off (we never expose it) it warns every few seconds for the whole run. The warning
says nothing actionable, so it is dropped here and nowhere else.
"""

import logging

_NOISY = "Failed to query Ray Train Controller actor state"


class _DropStateApiNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return _NOISY not in record.getMessage()


def setup() -> None:
    from smlaunch._ray_compat import PLACEMENT_GROUP_CLEANER_LOGGER

    logging.getLogger(PLACEMENT_GROUP_CLEANER_LOGGER).addFilter(_DropStateApiNoise())
