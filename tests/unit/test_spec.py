"""Release specs: valid ones load, every bad one names its YAML path."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import yaml
from helpers import BASE_SPEC, make_spec

from dprelease.errors import SpecError
from dprelease.spec import load_spec, parse_spec


def test_valid_spec_resolves_domains_and_grid() -> None:
    resolved = make_spec(
        group_by=[
            {"column": "region", "domain": {"values": ["north", "south"]}},
            {"column": "age", "domain": {"min": 1, "max": 3}},
        ]
    )
    grid = resolved.key_grid
    assert grid.columns == ["region", "age"]
    assert grid.rows() == [
        ("north", 1),
        ("north", 2),
        ("north", 3),
        ("south", 1),
        ("south", 2),
        ("south", 3),
    ]


def test_keys_file_domain(tmp_path: Path) -> None:
    pl.DataFrame({"clinic": ["a", "b", "c"]}).write_csv(tmp_path / "clinics.csv")
    resolved = parse_spec(
        {**BASE_SPEC, "group_by": [{"column": "clinic", "domain": {"file": "clinics.csv"}}]},
        base_dir=tmp_path,
    )
    assert resolved.domains[0].get_column("clinic").to_list() == ["a", "b", "c"]


def test_joint_domain_lists_valid_key_combinations(tmp_path: Path) -> None:
    pl.DataFrame({"region": ["n", "n", "s"], "clinic": ["n1", "n2", "s1"]}).write_csv(
        tmp_path / "clinics.csv"
    )
    resolved = parse_spec(
        {
            **BASE_SPEC,
            "group_by": [
                {"column": "sex", "domain": {"values": ["F", "M"]}},
                {"columns": ["region", "clinic"], "domain": {"file": "clinics.csv"}},
            ],
        },
        base_dir=tmp_path,
    )
    assert resolved.spec.key_columns == ["sex", "region", "clinic"]
    assert resolved.key_grid.rows()[:3] == [("F", "n", "n1"), ("F", "n", "n2"), ("F", "s", "s1")]
    assert resolved.key_grid.height == 6
    with pytest.raises(SpecError, match=r"group_by\[0\]: .*keys file"):
        make_spec(group_by=[{"columns": ["a", "b"], "domain": {"values": [1]}}])


@pytest.mark.parametrize(
    ("overrides", "path", "words"),
    [
        (
            {
                "statistics": [
                    {"name": "c", "kind": "sum", "column": "cost", "lower": 5, "upper": 5}
                ]
            },
            "release.statistics[0]",
            "lower",
        ),
        (
            {
                "statistics": [
                    {
                        "name": "c",
                        "kind": "sum",
                        "column": "cost",
                        "lower": 0,
                        "upper": float("inf"),
                    }
                ]
            },
            "release.statistics[0]",
            "finite",
        ),
        (
            {
                "statistics": [
                    {
                        "name": "c",
                        "kind": "sum",
                        "column": "cost",
                        "lower": float("nan"),
                        "upper": 1,
                    }
                ]
            },
            "release.statistics[0]",
            "finite",
        ),
        (
            {"statistics": [{"name": "c", "kind": "mode", "column": "cost"}]},
            "release.statistics[0].kind",
            "count",
        ),
        (
            {"statistics": [{"name": "c", "kind": "sum", "column": "cost"}]},
            "release.statistics[0]",
            "bounds",
        ),
        (
            {"group_by": [{"column": "region", "domain": {"values": []}}]},
            "release.group_by[0].domain.values",
            "empty key domain",
        ),
        (
            {"group_by": [{"column": "region", "domain": {"values": ["a", "b", "a"]}}]},
            "release.group_by[0].domain.values",
            "duplicate key 'a'",
        ),
        (
            {"group_by": [{"column": "age", "domain": {"min": 5, "max": 1}}]},
            "release.group_by[0].domain",
            "empty key domain",
        ),
        (
            {"group_by": [{"column": "age", "domain": {"vals": [1, 2]}}]},
            "release.group_by[0].domain",
            "a key domain is `values: [...]`, `min:` and `max:`, `file:`, or `select: true`",
        ),
        (
            {"group_by": [{"column": "age", "domain": {"min": 1}}]},
            "release.group_by[0].domain.max",
            "Field required",
        ),
        (
            {"group_by": [{"column": "age", "domain": {"values": [1], "file": "k.csv"}}]},
            "release.group_by[0].domain.file",
            "Extra inputs",
        ),
        ({"max_rows_per_unit": 0}, "release.max_rows_per_unit", "greater than or equal to 1"),
        ({"privacy_unit": None, "max_rows_per_unit": 4}, "release.privacy_unit", "privacy_unit"),
        ({"statistics": []}, "release.statistics", "at least 1"),
        (
            {"statistics": [{"name": "n", "kind": "count"}, {"name": "n", "kind": "count"}]},
            "release",
            "duplicate statistic names",
        ),
        (
            {
                "statistics": [
                    {"name": "n", "kind": "count", "target_moe95": 5},
                    {"name": "m", "kind": "count"},
                ]
            },
            "release",
            "target_moe95",
        ),
        (
            {"statistics": [{"name": "n", "kind": "count", "target_ci95": 5}]},
            "release.statistics[0].target_ci95",
            "now called 'target_moe95'",
        ),
        (
            {"postprocess": {"ci95_columns": False}},
            "release.postprocess.ci95_columns",
            "now called 'moe95_columns'",
        ),
        ({"colour": "blue"}, "release.colour", "Extra inputs"),
    ],
)
def test_bad_spec_names_the_field(overrides: dict, path: str, words: str) -> None:
    with pytest.raises(SpecError) as info:
        make_spec(**overrides)
    assert info.value.path == path
    assert words in str(info.value)


def test_keys_file_errors_name_the_field(tmp_path: Path) -> None:
    pl.DataFrame({"clinic": ["a", "a"]}).write_csv(tmp_path / "dupes.csv")
    spec = {**BASE_SPEC, "group_by": [{"column": "clinic", "domain": {"file": "dupes.csv"}}]}
    with pytest.raises(SpecError, match=r"group_by\[0\]\.domain\.file: .* lists a key more"):
        parse_spec(spec, base_dir=tmp_path)
    spec = {**BASE_SPEC, "group_by": [{"column": "clinic", "domain": {"file": "missing.csv"}}]}
    with pytest.raises(SpecError, match=r"group_by\[0\]\.domain\.file: .*not found"):
        parse_spec(spec, base_dir=tmp_path)


def test_load_spec_file_errors(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"^spec file '.*nope\.yaml' does not exist$"):
        load_spec(tmp_path / "nope.yaml")
    with pytest.raises(SpecError, match=r"^cannot read spec file"):
        load_spec(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("statistics: []\n")
    with pytest.raises(SpecError, match=r"^release: .*a spec file needs the top-level section"):
        load_spec(bad)
    bad.write_text("release:\n  name: x\n   source: y\n")
    with pytest.raises(SpecError, match=r"bad\.yaml: YAML syntax error at line 3, column 10"):
        load_spec(bad)
    bad.write_text(yaml.safe_dump({"release": {**BASE_SPEC, "statistics": [{"name": "n"}]}}))
    with pytest.raises(SpecError, match=r"^release\.statistics\[0\]\.kind: required$"):
        load_spec(bad)


def test_spec_hash_depends_on_spec_and_domains_not_on_epsilon() -> None:
    a = make_spec()
    b = make_spec(max_rows_per_unit=4)
    c = make_spec(group_by=[{"column": "region", "domain": {"values": ["n"]}}])
    assert a.hash == make_spec().hash
    assert len({a.hash, b.hash, c.hash}) == 3


@pytest.mark.parametrize(
    ("spec", "released_hash"),
    [
        (
            {
                "name": "visits",
                "source": "visits",
                "privacy_unit": "pid",
                "max_rows_per_unit": 2,
                "period": {"column": "day"},
                "group_by": [
                    {"column": "region", "domain": {"values": ["n", "s"]}},
                    {"column": "age", "domain": {"min": 1, "max": 3}},
                ],
                "statistics": [
                    {"name": "n", "kind": "count", "target_moe95": 5},
                    {
                        "name": "cost",
                        "kind": "sum",
                        "column": "cost",
                        "lower": 0,
                        "upper": 100,
                        "target_moe95": 50,
                        "granularity": 0.5,
                    },
                ],
                "postprocess": {"decimals": 2, "moe95_columns": False},
            },
            "efe219b6c87f6acdb234acab3f7b1e733735e0f02e5fca85188aedbc53e48a85",
        ),
        (
            {
                "name": "m",
                "source": "m",
                "neighbours": "substitute",
                "statistics": [
                    {"name": "n", "kind": "count", "weight": 2},
                    {"name": "avg", "kind": "mean", "column": "x", "lower": -1, "upper": 1},
                ],
            },
            "76bc446a8a83316731c4f0622be4433e32f867696ee46ff03ca14d423d85abfe",
        ),
    ],
)
def test_a_spec_keeps_the_hash_it_was_released_under(spec: dict, released_hash: str) -> None:
    """The hashes dprelease c888955 computed for these specs (with target_ci95/ci95_columns,
    before the discriminated union): a slot released then re-runs without SpecChanged."""
    assert parse_spec(spec).hash == released_hash


def test_an_empty_publish_section_of_a_pipeline_spec_is_a_spec_error(tmp_path: Path) -> None:
    """`publish:` with nothing under it passed the sections check (the key is there) and was
    caught only by an `assert` (an AssertionError; `python -O` strips it and the pipeline then
    fails on None). It is a SpecError naming the file and the field."""
    from dprelease.spec import load_pipeline_specs

    path = tmp_path / "monthly.yaml"
    path.write_text(yaml.safe_dump({"release": BASE_SPEC}) + "publish:\n")
    with pytest.raises(SpecError, match=r"^monthly\.yaml: publish: is empty: give the scope"):
        load_spec(path, require_publish=True)
    [problem] = load_pipeline_specs([tmp_path]).problems
    assert problem.message.startswith("monthly.yaml: publish: is empty"), problem.message


def test_a_pipeline_spec_loaded_without_publish_is_refused_by_the_catalog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog's own check (not an `assert`): were `load_spec` ever to give a pipeline spec
    without its `publish:`, the catalog refuses it with a SpecError naming the file."""
    import dprelease.spec._catalog as catalog

    monkeypatch.setattr(catalog, "load_spec", lambda path, **_: make_spec())
    with pytest.raises(SpecError, match=r"^x\.yaml: publish: a pipeline spec needs"):
        catalog.load_pipeline_spec(tmp_path / "x.yaml")
