"""Key selection through the Dagster code location: a spec whose clinics are selected from the
data publishes in one step with its three checks green; the asset's metadata states τ, the δ
spent and how many keys were released (a DP output), and nothing about keys not selected."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import polars as pl
from helpers import materialize, resources

from dprelease.ledger import Ledger
from pipelines.definitions import build_definitions

SPEC = """\
release:
  name: visits_by_selected_clinic
  source: visits
  privacy_unit: patient_id
  max_rows_per_unit: 4
  group_by:
    - column: clinic
      domain: {select: true}
  statistics:
    - {name: visits, kind: count}
publish:
  scope: clinics_selected
  share: 1/2
"""

PRIVACY = """\
privacy:
  neighbours: add_remove
  profile: {kind: piecewise_linear, points: [[0, 20000], [1, 3000], [10, 20000]]}
  adversaries: [{name: naive, q: 0.5, q0: 0.5}]
  rounding: 0.05
  selection_delta: 1.0e-9
"""


def test_a_selecting_spec_publishes_with_tau_delta_and_released_keys_in_its_metadata(
    root: Path,
) -> None:
    specs = root / "specs"
    specs.mkdir()
    (specs / "selected.yaml").write_text(SPEC)
    (root / "privacy.yaml").write_text(PRIVACY)
    defs = build_definitions(specs, resources=resources(root, privacy=root / "privacy.yaml"))
    asset = "visits_by_selected_clinic"
    result = materialize(defs, dg.DagsterInstance.ephemeral(), [asset])
    assert result.success
    assert all(e.passed for e in result.get_asset_check_evaluations())
    (materialization,) = result.asset_materializations_for_node(asset)
    metadata = {k: v.value for k, v in materialization.metadata.items()}
    published = pl.read_csv(root / "public" / asset / "all" / "release.csv")
    assert metadata["selected_keys[clinic] (DP output)"] == published.height > 0
    assert metadata["selection_tau[clinic]"] > 1
    assert metadata["selection_delta[clinic]"] == 5e-10  # half the scope's δ: share 1/2
    assert not any("candidate" in key for key in metadata)
    with Ledger(str(root / "ledger.sqlite"), mode="existing") as ledger:
        assert ledger.selection_delta("clinics_selected") is not None
