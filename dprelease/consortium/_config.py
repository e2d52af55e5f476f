"""The consortium's configuration: who the sites are, and the public parameters every party must
agree on before a share is drawn.

    consortium:
      name: hospitals            # names the consortium in every file (and the ledger scope)
      sites: [north, south, east]
      rho: 1/20                  # ρ of each release (zCDP): every site's noise share rests on it
      tolerate: 1                # t: sites that may collude with the key holder, or be missing
      max_sites_per_unit: 1      # k: in how many sites one person may be; Δ is multiplied by k
      neighbours: add_remove     # optional; else the spec's, else add/remove
      scope: hospitals           # optional: the aggregator's ledger scope (default: the name)

Why ρ is here and not in the aggregator's ledger alone: each site draws its noise share from it
before the aggregator sees anything, so it is a public parameter of the consortium, fixed in the
file every party holds; the aggregator charges exactly it (and refuses if its scope cannot pay).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from dprelease.change import ProtectedChange
from dprelease.consortium._errors import ConsortiumError
from dprelease.files import read_sections
from dprelease.loss import exact_positive

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_KEYS = {"name", "sites", "rho", "tolerate", "max_sites_per_unit", "neighbours", "scope"}


@dataclass(frozen=True)
class Consortium:
    """A consortium's public parameters (see the module docstring)."""

    name: str
    sites: tuple[str, ...]
    rho: Fraction
    tolerate: int = 0
    max_sites_per_unit: int = 1
    neighbours: ProtectedChange | None = None
    scope: str | None = None

    @property
    def honest(self) -> int:
        """m − t: the fewest sites whose noise shares the guarantee rests on."""
        return len(self.sites) - self.tolerate

    @property
    def ledger_scope(self) -> str:
        return self.scope or self.name

    def public_facts(self) -> dict[str, Any]:
        """What every file of the consortium repeats, so a file from another one is refused."""
        return {
            "consortium": self.name,
            "sites": list(self.sites),
            "rho": str(self.rho),
            "tolerate": self.tolerate,
            "max_sites_per_unit": self.max_sites_per_unit,
        }


def _name(value: object, path: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ConsortiumError(
            path, "must be a name of letters, digits, '_', '.' or '-' (at most 64, no spaces)"
        )
    return value


def _count(value: object, path: str, lowest: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise ConsortiumError(path, f"must be an integer ≥ {lowest}")
    return value


def parse_consortium(document: object) -> Consortium:
    """A Consortium from the YAML's `consortium:` mapping; ConsortiumError at its YAML path."""
    if not isinstance(document, dict):
        raise ConsortiumError("consortium", "must be a mapping (name, sites, rho, ...)")
    unknown = sorted(set(document) - _KEYS)
    if unknown:
        raise ConsortiumError(
            f"consortium.{unknown[0]}", f"unknown field; the fields are {sorted(_KEYS)}"
        )
    for field in ("name", "sites", "rho"):
        if field not in document:
            raise ConsortiumError(f"consortium.{field}", "is required")
    sites = document["sites"]
    if not isinstance(sites, list) or len(sites) < 2:
        raise ConsortiumError("consortium.sites", "must list at least two site names")
    names = tuple(_name(s, f"consortium.sites[{i}]") for i, s in enumerate(sites))
    if len(set(names)) != len(names):
        raise ConsortiumError("consortium.sites", "names a site twice")
    try:
        rho = exact_positive(str(document["rho"]).strip())
    except ValueError as exc:
        raise ConsortiumError("consortium.rho", f"ρ {exc} (e.g. 0.05 or 1/20)") from None
    tolerate = _count(document.get("tolerate", 0), "consortium.tolerate", 0)
    if tolerate >= len(names):
        raise ConsortiumError(
            "consortium.tolerate",
            f"must be below the number of sites ({len(names)}): the guarantee rests on the noise "
            "of at least one site outside any coalition",
        )
    neighbours = document.get("neighbours")
    if neighbours is not None:
        try:
            neighbours = ProtectedChange(neighbours)
        except ValueError:
            choices = [c.value for c in ProtectedChange]
            raise ConsortiumError("consortium.neighbours", f"must be one of {choices}") from None
    scope = document.get("scope")
    return Consortium(
        name=_name(document["name"], "consortium.name"),
        sites=names,
        rho=rho,
        tolerate=tolerate,
        max_sites_per_unit=_count(
            document.get("max_sites_per_unit", 1), "consortium.max_sites_per_unit", 1
        ),
        neighbours=neighbours,
        scope=None if scope is None else _name(scope, "consortium.scope"),
    )


def load_consortium(path: str | Path) -> Consortium:
    """The consortium file at `path` (its `consortium:` section)."""
    sections = read_sections(Path(path), ["consortium"], ConsortiumError, "consortium file")
    return parse_consortium(sections["consortium"])
