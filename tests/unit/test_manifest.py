"""The manifest is a typed, versioned model with a published JSON Schema; the publication check
is validation against it, and manifests stored by earlier versions stay valid."""

from __future__ import annotations

import json

import polars as pl
import pytest
from helpers import FIXTURES, ROOT, make_spec, prepare_release
from pydantic import ValidationError

from dprelease.statement import (
    MANIFEST_FORMAT,
    LegacyManifest,
    Manifest,
    json_schema,
    manifest_problems,
    parse_manifest,
)

#: A manifest written by dprelease c888955 (format 1), as a ledger may have stored it.
LEGACY = FIXTURES / "manifest_v1.json"


@pytest.fixture(scope="module")
def manifest() -> dict:
    """The manifest of a release drawn from the system CSPRNG (not recorded in a ledger), with
    the release_id a ledger would give it."""
    resolved = make_spec(
        max_rows_per_unit=1,
        group_by=[{"column": "g", "domain": {"values": ["a", "b"]}}],
        statistics=[
            {"name": "n", "kind": "count"},
            {"name": "s", "kind": "sum", "column": "x", "lower": 0, "upper": 9},
            {"name": "m", "kind": "mean", "column": "x", "lower": 0, "upper": 9},
        ],
    )
    df = pl.DataFrame({"pid": [1, 2], "g": ["a", "b"], "x": [1.0, 2.0]})
    drawn = prepare_release(df, resolved, 1.0).draw()
    return {**drawn.manifest.to_json_dict(), "release_id": "t/-"}


def test_the_published_schema_is_the_models() -> None:
    committed = (ROOT / "docs" / "manifest.schema.json").read_text()
    assert committed == json_schema(), (
        "docs/manifest.schema.json is stale: python -m dprelease.statement > "
        "docs/manifest.schema.json"
    )


def test_a_release_manifest_is_a_valid_versioned_model(manifest: dict) -> None:
    parsed = parse_manifest(manifest)
    assert isinstance(parsed, Manifest) and manifest["format"] == MANIFEST_FORMAT
    assert parsed.to_json_dict() == manifest  # the model round-trips the JSON exactly
    assert [type(s).__name__ for s in parsed.statistics] == ["CountEntry", "SumEntry", "MeanEntry"]
    assert manifest_problems(manifest) == []
    assert manifest["ledger"]["recorded"] is False  # says so plainly
    assert "not recorded in any ledger" in manifest["ledger"]["note"]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda m: m.pop("spec_hash"), "spec_hash: Field required"),
        (lambda m: m.update(epsilon_total_exact="2"), "statistics spend 1, the total says 2"),
        (lambda m: m["statistics"][0].pop("moe95"), "statistics.0.count.moe95: Field required"),
        (lambda m: m.update(surprise=1), "surprise: Extra inputs are not permitted"),
        (lambda m: m.update(release_id=None), "missing release_id"),
        # a manifest exists only once its noise is drawn: it must say from which source
        (lambda m: m.pop("noise_source"), "noise_source: Field required"),
        (lambda m: m.update(noise_source=None), "noise_source: Input should be"),
        (lambda m: m["noise_source"].update(private=False), "noise source is seeded"),
    ],
)
def test_an_incomplete_or_inconsistent_manifest_is_refused(
    manifest: dict, change, problem: str
) -> None:
    broken = json.loads(json.dumps(manifest))
    change(broken)
    problems = manifest_problems(broken)
    assert any(problem in text for text in problems), problems


def test_a_manifest_of_the_earlier_format_stays_valid() -> None:
    stored = json.loads(LEGACY.read_text())
    assert "format" not in stored and "ci95_halfwidth" in stored["statistics"][0]
    assert isinstance(parse_manifest(stored), LegacyManifest)
    assert manifest_problems(stored) == []
    # only format 1 could lack a noise source; it is still not publishable then
    unsourced = {**stored, "noise_source": None}
    assert manifest_problems(unsourced) == ["missing noise_source: no noise was drawn"]
    stored["statistics"][1].pop("ci95_halfwidth")
    assert manifest_problems(stored) == [
        "statistics.1.measurements.0.ci95_halfwidth: Field required"
    ]


def test_an_unknown_format_is_refused(manifest: dict) -> None:
    with pytest.raises(ValidationError):
        parse_manifest({**manifest, "format": "dprelease-manifest/99"})


def test_a_release_of_randomized_answers_states_the_central_manifest() -> None:
    """A local-DP release (`kind: randomized`) writes the manifest every release writes, with
    its margins' levels: valid against the published schema's model, post-processing that
    spends ε = 0, the wave it rests on stated in its entry; and the checks a pipeline runs
    before publishing refuse it when its entry loses what it says it was charged."""
    import dprelease as dp

    wave = {"id": "w-1", "question": "smokes", "domain": [0, 1], "epsilon": 1, "scope": "people"}
    local = {
        "wave": wave,
        "release": {
            "name": "smokers",
            "source": "answers",
            "group_by": [{"column": "g", "domain": {"values": ["a", "b"]}}],
            "margins": [[]],
            "public_columns": ["g"],
        },
    }
    sealed = dp.local.load(local).wave.hash
    data = pl.DataFrame({"g": ["a", "b", "a"], "smokes": [0, 1, None], "wave_hash": [sealed] * 3})
    stated = {**dp.release(data, local).manifest.to_json_dict(), "release_id": "smokers/-"}
    parsed = parse_manifest(stated)
    assert isinstance(parsed, Manifest) and parsed.to_json_dict() == stated
    assert manifest_problems(stated) == []
    assert stated["format"] == MANIFEST_FORMAT and stated["epsilon_total_exact"] == "0"
    assert stated["neighbours"] == "answer" and "post-processing" in stated["composition"]
    assert [level["level"] for level in stated["margins"]["levels"]] == ["g", "total"]
    [entry] = stated["statistics"]
    assert entry["kind"] == "randomized" and entry["epsilon_exact"] == "0"
    assert entry["wave"]["wave_hash"] == sealed and entry["wave"]["id"] == "w-1"
    entry.pop("charged")
    assert any("charged" in problem for problem in manifest_problems(stated))
