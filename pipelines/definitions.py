"""Dagster definitions (`workspace.yaml` and `dg` load this module)."""

import dagster as dg

defs = dg.Definitions(assets=[])
