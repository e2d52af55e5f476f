"""The operator channel: diagnostics that depend on the data, for whoever runs a release.

They go to the `dprelease.operator` logger only (the CLI prints its warnings on stderr, Dagster
forwards them to the run log), never into files, the manifest, published metadata, exit codes
or the charge decision: PRIVACY.md explains why this channel is inside the secure boundary.
A release is made whatever they say: an empty period is a correct release of noise around 0.
"""

from __future__ import annotations

import logging

from dprelease.engines import InputSummary

LOGGER_NAME = "dprelease.operator"
logger = logging.getLogger(LOGGER_NAME)


def warn(message: str) -> None:
    """One warning for the operator (never published)."""
    logger.warning(message)


def input_warnings(summary: InputSummary, release: str, period: str | None) -> list[str]:
    """What looks wrong with an input that was released anyway: no rows, no rows in the
    period, or no row of the period with a privacy unit or a usable key."""
    noise = "the released values are noise around 0"
    if summary.rows == 0:
        return [f"release {release!r}: the input has no rows; {noise}. Check the input"]
    where = "" if period is None else f" of period {period}"
    if summary.period_rows == 0:
        return [
            f"release {release!r}: no input row is in period {period}; {noise}. Check the "
            "period and the period column"
        ]
    found = []
    if summary.unit_rows == 0:
        found.append(
            f"release {release!r}: every row{where} has a null privacy unit; such rows are "
            f"dropped, so {noise}. Check the privacy unit column"
        )
    for column, rows in summary.keyed_rows.items():
        if rows == 0:
            found.append(
                f"release {release!r}: no row{where} has a usable key in column {column!r} (all "
                f"null, or not of the domain's key type); such rows are dropped, so {noise}"
            )
    return found
