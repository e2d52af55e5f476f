"""Dagster resources, chosen by deployment name: where confidential tables live, where public files
go, the ledger, and the privacy profiles.

`DPRELEASE_DEPLOYMENT` names the deployment (the `project_fully_featured` pattern):

* `demo` (default): embedded defaults under `.dprelease/`, the bundled synthetic tables generated
  on first use and the bundled spec files, each setting overridable by its environment variable;
* `production`: `DPRELEASE_SPECS_DIR`, `DPRELEASE_CONFIDENTIAL_DIR`, `DPRELEASE_PUBLIC_DIR`,
  `DPRELEASE_PRIVACY_CONFIG` and `DPRELEASE_LEDGER_URL` are required, and every path among them
  absolute (the code location does not load otherwise, saying which in one line): the webserver
  and the daemon each run the code location in their own working directory, so a relative path
  would name two places. Demo data is never generated, and the ledger and a release's budget
  scope must already exist unless the run asks to create them (`create_scope`): a missing or
  mistyped URL must never become a fresh budget.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import dagster as dg
from pydantic import Field

from dprelease.budget import (
    BudgetChoice,
    PrivacyProfiles,
    cap_from_profile,
    choose_budget,
    load_privacy_profiles,
)
from dprelease.errors import ConfigError, LedgerNotFound
from dprelease.ledger import LEDGER_URL_ENV, Ledger, resolve_ledger_url
from dprelease.publish import PRIVACY_CONFIG_ENV, SPECS_DIR_ENV
from pipelines.demo_data import write_demo_data
from pipelines.release_specs import SPECS_DIR

PACKAGE_DIR = Path(__file__).resolve().parent
DEPLOYMENT_ENV = "DPRELEASE_DEPLOYMENT"
CONFIDENTIAL_ENV = "DPRELEASE_CONFIDENTIAL_DIR"
PUBLIC_ENV = "DPRELEASE_PUBLIC_DIR"
PRIVACY_ENV = PRIVACY_CONFIG_ENV
SPECS_ENV = SPECS_DIR_ENV
DEMO_CONFIDENTIAL_DIR = ".dprelease/confidential"
DEMO_PUBLIC_DIR = "out/public"


class ConfidentialTableMissing(FileNotFoundError):
    """The confidential store has no such table: a refusal (README), said in one line."""


class ConfidentialStore(dg.ConfigurableResource):
    """A directory of parquet files, one per confidential table; read only by release assets."""

    directory: str
    generate_demo_data: bool = Field(
        default=False, description="write the bundled demo tables when a table is missing"
    )

    def table_path(self, table: str) -> Path:
        """The table's file; the bundled demo tables are generated on first use if allowed."""
        path = Path(self.directory).absolute() / f"{table}.parquet"
        if not path.exists() and self.generate_demo_data:
            write_demo_data(Path(self.directory))
        if not path.exists():
            raise ConfidentialTableMissing(
                f"confidential table {table!r} not found at {path}; put it there, or set "
                f"{CONFIDENTIAL_ENV} to the directory that holds it"
            )
        return path


class PublicStore(dg.ConfigurableResource):
    """The output directory: only noisy tables, manifests and budget plots are written here."""

    directory: str

    def release_dir(self, release: str, period: str | None) -> Path:
        return Path(self.directory) / release / (period or "all")

    def budget_dir(self, scope: str | None = None) -> Path:
        """The budget report's directory, or one scope's plots within it."""
        return Path(self.directory, "privacy_budget", *([scope] if scope else []))


class LedgerResource(dg.ConfigurableResource):
    """The privacy-budget ledger: a SQLite file by default, PostgreSQL via DPRELEASE_LEDGER_URL.

    The URL is read from the environment when the ledger is opened, not stored in the resource's
    configuration, so a database password never shows in the Dagster UI.
    """

    url: str | None = Field(
        default=None,
        description="ledger URL or SQLite path; default: $DPRELEASE_LEDGER_URL, "
        "else (demo only) .dprelease/ledger.sqlite",
    )
    require_existing: bool = Field(
        default=False,
        description="open only a ledger that exists, unless a run asks to create its scope "
        "(production)",
    )

    def open(self, *, create: bool = False) -> Ledger:
        """The ledger. With `require_existing`, a ledger that does not exist is refused
        (LedgerNotFound, nothing created) unless `create`: a missing or mistyped URL must
        never become a fresh budget."""
        if self.require_existing and not (self.url or os.environ.get(LEDGER_URL_ENV)):
            raise _missing(LEDGER_URL_ENV, "the ledger URL")
        return Ledger(
            self.url, mode="create" if create or not self.require_existing else "existing"
        )

    def open_existing(self, *, create: bool = False) -> Ledger | None:
        """The ledger if it exists; None if `open(create=create)` would create it. A run checks
        the whole release against None (every scope new) before the ledger file is written, so a
        refused run leaves no new ledger behind. Refuses as `open` does where it may not create."""
        if self.require_existing and not (self.url or os.environ.get(LEDGER_URL_ENV)):
            raise _missing(LEDGER_URL_ENV, "the ledger URL")
        try:
            return Ledger(self.url, mode="existing")
        except LedgerNotFound:
            if self.require_existing and not create:
                raise
            return None


@dataclass(frozen=True)
class ScopeProfile:
    """A scope's profile: the choice to explain, and the largest cap it allows (ε rounded down
    to an exact rational)."""

    choice: BudgetChoice
    profile_cap: Fraction


class PrivacyPolicy(dg.ConfigurableResource):
    """The privacy YAML: a default odds risk profile and, under `scopes:`, per-scope profiles."""

    config_path: str

    def profiles(self) -> PrivacyProfiles:
        """The whole file, validated (a bad section of any scope fails every run, uncharged)."""
        return load_privacy_profiles(self.config_path)

    def scope_profiles(self, scopes: list[str]) -> dict[str, ScopeProfile]:
        """Each scope's profile, explained (the choice and the cap it allows), from one reading
        of the file."""
        profiles = self.profiles()
        chosen = {scope: choose_budget(profiles.for_scope(scope)) for scope in scopes}
        return {scope: ScopeProfile(c, cap_from_profile(c)) for scope, c in chosen.items()}


def _missing(variable: str, what: str) -> ConfigError:
    return ConfigError(
        variable, f"{what} must be set when {DEPLOYMENT_ENV}=production (it is not set)"
    )


def _required(variable: str, what: str) -> str:
    value = os.environ.get(variable)
    if not value:
        raise _missing(variable, what)
    return value


def _absolute(variable: str, what: str) -> str:
    """A required path that must be absolute: the webserver, the daemon and the code server each
    resolve a relative one against their own working directory, so it could name two places."""
    value = _required(variable, what)
    if not Path(value).expanduser().is_absolute():
        raise ConfigError(
            variable,
            f"{what} must be an absolute path when {DEPLOYMENT_ENV}=production (it is "
            f"{value!r}): each Dagster process would resolve it against its own working directory",
        )
    return str(Path(value).expanduser())


def _absolute_ledger() -> None:
    """The ledger URL is required; a SQLite file must be named by an absolute path, or every
    process would keep its own ledger (and its own budget)."""
    url = _required(LEDGER_URL_ENV, "the ledger URL")
    relative_sqlite = url.startswith("sqlite:///") and not url.startswith("sqlite:////")
    if relative_sqlite or ("://" not in url and not Path(url).expanduser().is_absolute()):
        raise ConfigError(
            LEDGER_URL_ENV,
            f"a SQLite ledger must be named by an absolute path when {DEPLOYMENT_ENV}=production "
            f"(it is {url!r}; e.g. {resolve_ledger_url(url)}): each Dagster process would "
            "resolve it against its own working directory and keep a ledger of its own",
        )


def demo_resources() -> dict[str, dg.ConfigurableResource]:
    """Embedded defaults, each overridable; demo tables only in the default demo directory."""
    confidential = os.environ.get(CONFIDENTIAL_ENV)
    return {
        "confidential": ConfidentialStore(
            directory=confidential or DEMO_CONFIDENTIAL_DIR, generate_demo_data=not confidential
        ),
        "public": PublicStore(directory=os.environ.get(PUBLIC_ENV) or DEMO_PUBLIC_DIR),
        "ledger": LedgerResource(),
        "policy": PrivacyPolicy(
            config_path=os.environ.get(PRIVACY_ENV) or str(PACKAGE_DIR / "privacy.yaml")
        ),
    }


def production_resources() -> dict[str, dg.ConfigurableResource]:
    """Everything that decides what is released, where, and against which budget, is required;
    every path absolute."""
    _absolute_ledger()  # fail at load; re-read when opened
    return {
        "confidential": ConfidentialStore(
            directory=_absolute(CONFIDENTIAL_ENV, "the confidential store directory")
        ),
        "public": PublicStore(directory=_absolute(PUBLIC_ENV, "the public directory")),
        "ledger": LedgerResource(require_existing=True),
        "policy": PrivacyPolicy(config_path=_absolute(PRIVACY_ENV, "the privacy profile YAML")),
    }


RESOURCES_BY_DEPLOYMENT = {"demo": demo_resources, "production": production_resources}


def deployment_name() -> str:
    """The deployment DPRELEASE_DEPLOYMENT names (default `demo`)."""
    name = os.environ.get(DEPLOYMENT_ENV) or "demo"
    if name not in RESOURCES_BY_DEPLOYMENT:
        raise ConfigError(
            DEPLOYMENT_ENV,
            f"unknown deployment {name!r}; use one of {sorted(RESOURCES_BY_DEPLOYMENT)}",
        )
    return name


def deployment_resources() -> dict[str, dg.ConfigurableResource]:
    """The resources of the deployment named by DPRELEASE_DEPLOYMENT (default `demo`)."""
    return RESOURCES_BY_DEPLOYMENT[deployment_name()]()


def deployment_specs_dir() -> Path:
    """Where the deployment's spec files are: DPRELEASE_SPECS_DIR (required, absolute, in
    production: the specs decide what is released), else the demo's bundled `pipelines/specs/`."""
    if deployment_name() == "production":
        return Path(_absolute(SPECS_ENV, "the spec files' directory"))
    return Path(os.environ.get(SPECS_ENV) or SPECS_DIR)
