"""Every refusal of a release of randomized answers names what the user of the local spec file
wrote, through `dprelease release`: the wave's fields at `wave.…` (the answers' column is
`wave.question`), the release's at `release.…`, never the central statistic the file stands for
(`release.statistics[0].column`) nor a central release's advice (set max_rows_per_unit) that
the next run would refuse again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from helpers import invoke_cli, one_line_error
from test_local_release import WAVE, reports, spec, write_spec

import dprelease as dp


@pytest.fixture(scope="module")
def book(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger in which the wave is recorded (its ε charged), as before any release."""
    path = tmp_path_factory.mktemp("ledger") / "ledger.sqlite"
    dp.local.record_wave(spec(), ledger=dp.Ledger(str(path)), cap=2)
    return path


def release(tmp_path: Path, book: Path, data: dict[str, Any], frame: pl.DataFrame) -> str:
    """`dprelease release` of `data` (a local spec file) on `frame`: its one-line refusal, with
    nothing written."""
    path = write_spec(tmp_path, data)
    frame.write_parquet(tmp_path / "answers.parquet")
    refused = invoke_cli(
        "release", "--spec", str(path), "--data", str(tmp_path / "answers.parquet"),
        "--out", str(tmp_path / "pub"), "--ledger", str(book),
    )  # fmt: skip
    line = one_line_error(refused)
    assert not (tmp_path / "pub").exists()
    return line


def without_scope() -> dict[str, Any]:
    data = spec()
    del data["wave"]["scope"]
    return data


@pytest.mark.parametrize(
    ("data", "path", "words"),
    [
        # a central release's unit and bounds: 'set max_rows_per_unit' / 'name the unit column'
        (spec(privacy_unit="pid"), "release.privacy_unit", "has no privacy unit"),
        (spec(max_rows_per_unit=2), "release.max_rows_per_unit", "has no privacy unit"),
        # silently ignored, or 'column not found' at the central path
        (
            spec(survey_weight={"column": "w", "upper": 3}),
            "release.survey_weight",
            "counted once per report",
        ),
        (spec(margins=[[]], level_weights=[1, 2]), "release.level_weights", "spends no ε"),
        # `publish.scope`, a section the file need not have
        (without_scope(), "wave.scope", "budget scope of the people asked"),
        # `release.statistics[0]`: the default g = round(e^ε) + 1 past 2^31 − 1
        (spec({"epsilon": 30, "mechanism": "olh"}), "wave.g", "give g"),
    ],
)
def test_a_bad_local_spec_is_refused_at_the_path_its_user_wrote(
    tmp_path: Path, book: Path, data: dict[str, Any], path: str, words: str
) -> None:
    line = release(tmp_path, book, data, reports())
    assert line.startswith(f"error: {path}: ") and words in line, line


@pytest.mark.parametrize(
    ("frame", "path", "column", "words"),
    [
        (reports().drop("drug_use"), "wave.question", "drug_use", "not found"),
        (
            reports().with_columns(pl.lit(1.5).alias("drug_use")),
            "wave.question",
            "drug_use",
            "holds randomized reports",
        ),
        (reports().drop("wave_hash"), "release.hash_column", "wave_hash", "not found"),
        (
            reports().with_columns(pl.lit(3).alias("wave_hash")),
            "release.hash_column",
            "wave_hash",
            "wave_hash (text)",
        ),
    ],
)
def test_reports_that_do_not_fit_are_refused_at_the_path_its_user_wrote(
    tmp_path: Path, book: Path, frame: pl.DataFrame, path: str, column: str, words: str
) -> None:
    """The input's schema against the local spec file: the answers' column is the wave's
    `question`, the wave_hash column the release's `hash_column` (before: the central
    statistic's `release.statistics[0].column` and `.hash_column`, which the file has not)."""
    line = release(tmp_path, book, spec(), frame)
    assert line.startswith(f"error: {path}: column {column!r}: ") and words in line, line
    assert "statistics[" not in line


def test_a_central_spec_file_with_the_statistic_itself_keeps_its_own_paths(
    tmp_path: Path, book: Path
) -> None:
    """A central spec file may hold the randomized statistic itself (docs/local.md, section 6):
    its user wrote `release.statistics[0].column`, and that is what a refusal names."""
    import yaml

    stated = {key: WAVE[key] for key in ("domain", "epsilon")}
    central = {
        "release": {
            "name": "drug_use_by_region",
            "source": "answers",
            "group_by": spec()["release"]["group_by"],
            "statistics": [
                {
                    "name": "drug_use",
                    "kind": "randomized",
                    "column": "drug_use",
                    "wave": WAVE["id"],
                    "public_columns": ["region"],
                    **stated,
                }
            ],
        },
        "publish": {"scope": WAVE["scope"], "share": 1},
    }
    (tmp_path / "central.yaml").write_text(yaml.safe_dump(central))
    reports().drop("drug_use").write_parquet(tmp_path / "answers.parquet")
    refused = invoke_cli(
        "release", "--spec", str(tmp_path / "central.yaml"),
        "--data", str(tmp_path / "answers.parquet"), "--out", str(tmp_path / "pub"),
        "--ledger", str(book),
    )  # fmt: skip
    line = one_line_error(refused)
    assert line.startswith("error: release.statistics[0].column: column 'drug_use'"), line
