"""The operator channel: diagnostics that depend on the data, for whoever runs a release.

They go to the `dprelease.operator` logger only (the CLI prints its warnings on stderr, Dagster
forwards them to the run log), never into files, the manifest, published metadata, exit codes
or the charge decision: PRIVACY.md explains why this channel is inside the secure boundary.
A release is made whatever they say: an empty period is a correct release of noise around 0.
"""

from __future__ import annotations

import logging

LOGGER_NAME = "dprelease.operator"
logger = logging.getLogger(LOGGER_NAME)


def warn(message: str) -> None:
    """One warning for the operator (never published)."""
    logger.warning(message)
