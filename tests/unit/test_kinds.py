"""The registry of statistic kinds: every kind a spec can name has one module, which links to its
spec model and its manifest entry, and nothing outside `mechanism/kinds/` asks which kind a
statistic is."""

from __future__ import annotations

import re
import subprocess
import typing

from helpers import ROOT

from dprelease.mechanism.kinds import ENTRY_MODELS, KINDS, kind_of
from dprelease.spec import Statistic, StatisticKind, parse_spec


def test_every_kind_a_spec_names_has_one_module_with_its_model_and_entry() -> None:
    models = typing.get_args(typing.get_args(Statistic)[0])
    assert sorted(name for kind in KINDS for name in kind.names) == sorted(StatisticKind)
    assert {kind.model for kind in KINDS} == set(models)
    for kind in KINDS:
        entry_kinds = typing.get_args(kind.entry.model_fields["kind"].annotation)
        assert set(entry_kinds) == set(kind.names)
    assert [kind.entry for kind in KINDS] == list(ENTRY_MODELS)


def test_the_registry_maps_a_statistic_to_its_kind() -> None:
    median = {"name": "m", "kind": "median", "column": "v", "lower": 0, "upper": 1,
              "resolution": 1}  # fmt: skip
    resolved = parse_spec({"name": "r", "source": "r", "statistics": [median]})
    assert kind_of(resolved.spec.statistics[0]).names == ("quantile", "median")


def test_no_code_outside_the_kinds_switches_on_a_statistic_class() -> None:
    found = subprocess.run(
        ["git", "grep", "-n", r"isinstance(.*Statistic", "--", "dprelease"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout
    outside = [
        line for line in found.splitlines() if not re.match(r"dprelease/mechanism/kinds/", line)
    ]
    assert outside == []
