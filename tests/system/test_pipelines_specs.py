"""The pipeline's spec files (`pipelines/release_specs.py`): a bad spec is named by file and
field."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import (
    PIPELINE_SPECS,
    resources,
)

from dprelease.errors import SpecError
from pipelines.definitions import build_definitions


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("share: 1/12", "share: 0"), r"publish\.share: .*\(0, 1\]"),
        (("share: 1/12", "share: lots"), r"publish\.share: .*fraction"),
        (("  first_period: 2024-01\n", ""), r"publish\.first_period: .*first period"),
        (("publish:", "published:"), r"a pipeline spec needs .* `release:` and `publish:`"),
        (("upper: 2000", "upper: -1"), r"release\.statistics\[1\]: lower .* must be < upper"),
        (("name: visits_by_clinic", "name: visits"), r"release\.name: .* source table 'visits'"),
    ],
)
def test_bad_pipeline_specs_name_file_and_field(
    tmp_path: Path, edit: tuple[str, str], message: str
) -> None:
    specs = tmp_path / "specs"
    shutil.copytree(PIPELINE_SPECS, specs)
    monthly = specs / "visits_monthly.yaml"
    assert edit[0] in monthly.read_text()
    monthly.write_text(monthly.read_text().replace(*edit))
    with pytest.raises(SpecError, match=rf"visits_monthly\.yaml: {message}"):
        build_definitions(specs, resources=resources(tmp_path))

