"""Dagster resources: where confidential tables live, where public files go, the ledger, the policy.

Each defaults to an embedded local setting and can be pointed elsewhere by an environment variable,
so `dagster dev` works on a fresh checkout and a deployment changes only its environment.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import dagster as dg
from pydantic import Field

from dprelease.config import choose_budget, load_privacy_config
from dprelease.ledger import Ledger
from dprelease.profile import BudgetChoice, cap_from_profile
from pipelines.demo_data import write_demo_data

PACKAGE_DIR = Path(__file__).resolve().parent


def _env(name: str, default: str) -> Callable[[], str]:
    """A field default read from the environment when the resource is built."""
    return lambda: os.environ.get(name) or default


class ConfidentialStore(dg.ConfigurableResource):
    """A directory of parquet files, one per confidential table; read only by release assets."""

    directory: str = Field(
        default_factory=_env("DPRELEASE_CONFIDENTIAL_DIR", ".dprelease/confidential")
    )
    generate_demo_data: bool = Field(
        default=True, description="write the bundled demo tables when a table is missing"
    )

    def table_path(self, table: str) -> Path:
        """The table's file; the bundled demo tables are generated on first use if allowed."""
        path = Path(self.directory) / f"{table}.parquet"
        if not path.exists() and self.generate_demo_data:
            write_demo_data(Path(self.directory))
        if not path.exists():
            raise FileNotFoundError(
                f"confidential table {table!r} not found at {path}; set DPRELEASE_CONFIDENTIAL_DIR"
            )
        return path


class PublicStore(dg.ConfigurableResource):
    """The output directory: only noisy tables, manifests and budget plots are written here."""

    directory: str = Field(default_factory=_env("DPRELEASE_PUBLIC_DIR", "out/public"))

    def release_dir(self, release: str, period: str | None) -> Path:
        return Path(self.directory) / release / (period or "all")

    def budget_dir(self) -> Path:
        return Path(self.directory) / "privacy_budget"


class LedgerResource(dg.ConfigurableResource):
    """The privacy-budget ledger: a SQLite file by default, PostgreSQL via DPRELEASE_LEDGER_URL.

    The URL is read from the environment when the ledger is opened, not stored in the resource's
    configuration, so a database password never shows in the Dagster UI.
    """

    url: str | None = Field(
        default=None,
        description="ledger URL or SQLite path; default: $DPRELEASE_LEDGER_URL, "
        "else .dprelease/ledger.sqlite",
    )

    def open(self) -> Ledger:
        return Ledger(self.url)


@dataclass(frozen=True)
class Budget:
    """ε chosen from the odds risk profile, and the same ε as an exact lifetime cap per scope."""

    choice: BudgetChoice
    cap: Fraction


class PrivacyPolicy(dg.ConfigurableResource):
    """The odds risk profile (a `privacy:` YAML) every scope's lifetime cap is derived from."""

    config_path: str = Field(
        default_factory=_env("DPRELEASE_PRIVACY_CONFIG", str(PACKAGE_DIR / "privacy.yaml"))
    )

    def budget(self) -> Budget:
        """Read the profile once per run: the choice to explain and the exact cap to enforce."""
        choice = choose_budget(load_privacy_config(self.config_path))
        return Budget(choice, cap_from_profile(choice))


def default_resources() -> dict[str, dg.ConfigurableResource]:
    """Embedded defaults, each overridable by an environment variable."""
    return {
        "confidential": ConfidentialStore(),
        "public": PublicStore(),
        "ledger": LedgerResource(),
        "policy": PrivacyPolicy(),
    }
