"""Resources by deployment (`pipelines/resources.py`): production requires its settings, never makes
demo data, and opens only an existing ledger and scope unless a run asks."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
from helpers import (
    MONTHLY,
    PIPELINE_SPECS,
    PRIVACY,
    SCOPE,
    VISITS_CAP,
    failure,
    materialize,
    resources,
    spent,
)

from dprelease.errors import ConfigError
from dprelease.ledger import Ledger
from pipelines.definitions import build_definitions
from pipelines.resources import ConfidentialStore, deployment_resources, deployment_specs_dir

#: Every setting production requires, in the order the code location asks for them.
PRODUCTION_SETTINGS = (
    "DPRELEASE_SPECS_DIR",
    "DPRELEASE_LEDGER_URL",
    "DPRELEASE_CONFIDENTIAL_DIR",
    "DPRELEASE_PUBLIC_DIR",
    "DPRELEASE_PRIVACY_CONFIG",
)


def test_production_requires_its_settings_and_never_makes_demo_data(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DPRELEASE_DEPLOYMENT", "production")
    for name in PRODUCTION_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match=r"^DPRELEASE_SPECS_DIR: the spec files' .*must be set"):
        deployment_specs_dir()
    monkeypatch.setenv("DPRELEASE_SPECS_DIR", str(PIPELINE_SPECS))
    assert deployment_specs_dir() == PIPELINE_SPECS
    with pytest.raises(ConfigError, match=r"^DPRELEASE_LEDGER_URL: the ledger URL must be set"):
        deployment_resources()
    monkeypatch.setenv("DPRELEASE_LEDGER_URL", str(tmp_path / "ledger.sqlite"))
    with pytest.raises(ConfigError, match=r"^DPRELEASE_CONFIDENTIAL_DIR: .*must be set"):
        deployment_resources()
    monkeypatch.setenv("DPRELEASE_CONFIDENTIAL_DIR", str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match=r"^DPRELEASE_PUBLIC_DIR: the public directory must be"):
        deployment_resources()
    monkeypatch.setenv("DPRELEASE_PUBLIC_DIR", str(tmp_path / "public"))
    with pytest.raises(ConfigError, match=r"^DPRELEASE_PRIVACY_CONFIG: .*must be set"):
        deployment_resources()
    monkeypatch.setenv("DPRELEASE_PRIVACY_CONFIG", str(PRIVACY))
    chosen = deployment_resources()
    assert isinstance(chosen["confidential"], ConfidentialStore)
    with pytest.raises(FileNotFoundError, match="confidential table 'visits' not found"):
        chosen["confidential"].table_path("visits")
    assert not (tmp_path / "empty").exists()
    monkeypatch.setenv("DPRELEASE_DEPLOYMENT", "staging")
    with pytest.raises(ConfigError, match=r"^DPRELEASE_DEPLOYMENT: unknown deployment 'staging'"):
        deployment_resources()


@pytest.mark.parametrize(
    ("variable", "relative"),
    [
        ("DPRELEASE_PUBLIC_DIR", "out/public"),
        ("DPRELEASE_CONFIDENTIAL_DIR", "confidential"),
        ("DPRELEASE_PRIVACY_CONFIG", "pipelines/privacy.yaml"),
        ("DPRELEASE_LEDGER_URL", "ledger.sqlite"),
        ("DPRELEASE_LEDGER_URL", "sqlite:///ledger.sqlite"),
        ("DPRELEASE_SPECS_DIR", "pipelines/specs"),
    ],
)
def test_production_refuses_a_relative_path_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str, relative: str
) -> None:
    """The webserver and the daemon each run the code location in their own working directory:
    a relative path would name two places (two public directories, two ledgers)."""
    settings = {
        "DPRELEASE_SPECS_DIR": str(PIPELINE_SPECS),
        "DPRELEASE_LEDGER_URL": str(tmp_path / "ledger.sqlite"),
        "DPRELEASE_CONFIDENTIAL_DIR": str(tmp_path),
        "DPRELEASE_PUBLIC_DIR": str(tmp_path / "public"),
        "DPRELEASE_PRIVACY_CONFIG": str(PRIVACY),
        variable: relative,
    }
    monkeypatch.setenv("DPRELEASE_DEPLOYMENT", "production")
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as refused:
        build_definitions()
    message = str(refused.value)
    assert message.startswith(f"{variable}: ") and "\n" not in message
    assert "absolute path when DPRELEASE_DEPLOYMENT=production" in message
    assert repr(relative) in message


def test_production_opens_only_an_existing_ledger_and_scope_unless_asked(root: Path) -> None:
    """A missing ledger or scope is refused with nothing created, until a run asks for it."""
    defs = build_definitions(resources=resources(root, require_existing=True))
    instance = dg.DagsterInstance.ephemeral()
    fresh = materialize(defs, instance, [MONTHLY], "2024-01")
    assert not fresh.success
    assert failure(fresh) == (  # one statement: no CLI flag, no "a release creates a ledger"
        f"visits_by_clinic 2024-01: no ledger at {root / 'ledger.sqlite'}; nothing was created. "
        "DPRELEASE_LEDGER_URL must name the existing ledger; only the very first release into "
        "a new ledger is launched with run config create_scope: true"
    )
    assert not (root / "ledger.sqlite").exists()
    first = materialize(defs, instance, [MONTHLY], "2024-01", {"create_scope": True})
    assert first.success  # the first release creates the ledger and its scope
    assert materialize(defs, instance, [MONTHLY], "2024-02").success
    unknown = materialize(defs, instance, ["case_control_by_genotype"])
    assert not unknown.success
    assert failure(unknown) == (
        f"case_control_by_genotype: unknown budget scope 'case_control_study' in ledger "
        f"sqlite:///{root / 'ledger.sqlite'}. If this is the scope's first release, launch "
        "again with run config create_scope: true; otherwise check DPRELEASE_LEDGER_URL"
    )
    assert [s.name for s in Ledger(str(root / "ledger.sqlite")).status()] == [SCOPE]
    assert spent(root, SCOPE) == (2 * VISITS_CAP / 12, 2)
