"""The production deployment (`docs/deploy.md`, `deploy/`): the instance's dagster.yaml loads with
Dagster's own config schema; the container recipe is consistent with itself and with what the
code reads (there is no docker engine here to build it); and a release runs through that very
instance on PostgreSQL, with the ledger on PostgreSQL too, re-run from the stored copy."""

from __future__ import annotations

import importlib
import os
import re
import shutil
import tomllib
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from helpers import (
    MONTHLY,
    PIPELINE_SPECS,
    PRIVACY,
    ROOT,
    SCOPE,
    VISITS_CAP,
    materialize,
    write_tables,
)
from pgtest import PG_ENV

from dprelease.ledger import LEDGER_URL_ENV, Ledger
from pipelines import resources as deployment
from pipelines.definitions import build_definitions

DEPLOY = ROOT / "deploy"
#: Every DPRELEASE_* variable the code location reads, by the constants that name them.
READ_BY_THE_CODE = {
    deployment.DEPLOYMENT_ENV,
    deployment.SPECS_ENV,
    deployment.CONFIDENTIAL_ENV,
    deployment.PUBLIC_ENV,
    deployment.PRIVACY_ENV,
    LEDGER_URL_ENV,
}
DAGSTER_SERVICES = ("codeserver", "webserver", "daemon")


def _env_names(node: Any) -> set[str]:
    """Every `{env: NAME}` a Dagster config reads."""
    if isinstance(node, dict):
        if set(node) == {"env"}:
            return {str(node["env"])}
        return set().union(*(_env_names(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(_env_names(value) for value in node))
    return set()


def _dagster_pg_env(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    for name in _env_names(yaml.safe_load((DEPLOY / "dagster.yaml").read_text())):
        monkeypatch.setenv(name, values.get(name, "5432" if name.endswith("PORT") else "x"))


def test_the_instance_loads_with_dagsters_own_config_schema(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The whole file against the instance schema, then each configurable part's config against
    its class's schema, as `DagsterInstance` does when it starts (environment variables set)."""
    from dagster._config import process_config
    from dagster._core.instance.config import dagster_instance_config
    from dagster._serdes.config_class import ConfigurableClassData
    from dagster_postgres import DagsterPostgresStorage

    _dagster_pg_env(monkeypatch)
    config, _ = dagster_instance_config(str(DEPLOY), "dagster.yaml")
    coordinator = config["run_coordinator"]
    named = ConfigurableClassData(coordinator["module"], coordinator["class"], "{}")
    module = importlib.import_module(named.module_name)  # as the instance imports it
    parts = [
        (DagsterPostgresStorage, config["storage"]["postgres"]),
        (getattr(module, named.class_name), coordinator["config"]),
    ]
    for klass, value in parts:
        processed = process_config(klass.config_type(), value)
        assert processed.success, (klass, processed.errors)
    assert config["run_monitoring"]["enabled"] is True
    assert config["run_retries"]["enabled"] is False


def _dockerfile() -> tuple[dict[str, str], list[str], list[tuple[list[str], str]]]:
    """ENV settings, the WORKDIRs, and each COPY's (sources, destination) of deploy/Dockerfile."""
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    env: dict[str, str] = {}
    workdirs, copies = [], []
    for line in text.splitlines():
        word, _, rest = line.strip().partition(" ")
        if word == "ENV":
            env |= dict(re.findall(r"(\w+)=(\S+)", rest))
        elif word == "WORKDIR":
            workdirs.append(rest.strip())
        elif word == "COPY":
            *sources, destination = rest.split()
            copies.append((sources, destination))
    return env, workdirs, copies


def test_the_container_recipe_is_consistent_with_itself_and_the_code() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"postgres", *DAGSTER_SERVICES}
    env, workdirs, copies = _dockerfile()
    for name in DAGSTER_SERVICES:
        service = services[name]
        build = service["build"]
        context = (DEPLOY / build["context"]).resolve()
        assert context == ROOT and (context / build["dockerfile"]) == DEPLOY / "Dockerfile"
        assert set(_env_names(yaml.safe_load((DEPLOY / "dagster.yaml").read_text()))) <= set(
            service["environment"]
        ), f"{name} lacks what dagster.yaml reads"
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
    for sources, _ in copies:  # every file the image copies is in the build context
        assert all((ROOT / source).exists() for source in sources), sources
    home = env["DAGSTER_HOME"]
    assert (["deploy/dagster.yaml", "deploy/workspace.yaml"], f"{home}/") in copies
    assert workdirs[-1] == home  # the services' `-w workspace.yaml` is the copied one
    for name in ("codeserver", "webserver"):  # compute logs: written by one, read by the other
        assert f"dagster:{home}/storage" in services[name]["volumes"]
    # what the code reads, and only that; production's settings all on the code server
    settings = {
        name: value
        for service in services.values()
        for name, value in (service.get("environment") or {}).items()
        if name.startswith("DPRELEASE_") and service is not services["postgres"]
    }
    assert {n for n in env if n.startswith("DPRELEASE_")} | set(settings) <= READ_BY_THE_CODE
    codeserver = services["codeserver"]["environment"]
    assert set(codeserver) >= READ_BY_THE_CODE
    assert env["DPRELEASE_DEPLOYMENT"] == codeserver["DPRELEASE_DEPLOYMENT"] == "production"
    for name in ("webserver", "daemon"):  # they load the code location from the code server
        assert not any(n.startswith("DPRELEASE_") for n in services[name]["environment"])
    mounts = {
        re.sub(r"\$\{[^}]*\}", "", volume).split(":")[1]
        for volume in services["codeserver"]["volumes"]
    }
    for name in (deployment.SPECS_ENV, deployment.CONFIDENTIAL_ENV, deployment.PUBLIC_ENV):
        assert codeserver[name].startswith("/") and codeserver[name] in mounts
    assert codeserver[deployment.PRIVACY_ENV] in mounts
    # one code location name and port everywhere
    workspace = yaml.safe_load((DEPLOY / "workspace.yaml").read_text())["load_from"][0]
    command = services["codeserver"]["command"]
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    location = pyproject["tool"]["dg"]["project"]["code_location_name"]
    assert workspace["grpc_server"]["location_name"] == location
    assert command[command.index("--location-name") + 1] == location
    assert command[command.index("-p") + 1] == str(workspace["grpc_server"]["port"])
    assert workspace["grpc_server"]["host"] == "codeserver"
    assert command[command.index("-m") + 1] == "pipelines.definitions"
    assert "postgres" in pyproject["project"]["optional-dependencies"]
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert 'pip install --no-cache-dir ".[dagster,postgres,publication]"' in dockerfile
    # the ledger's database and role are the ones the init script creates
    init = (DEPLOY / "initdb" / "10-ledger.sh").read_text()
    ledger = re.fullmatch(
        r"postgresql\+psycopg://(\w+):\$\{[^}]+\}@postgres:5432/(\w+)", codeserver[LEDGER_URL_ENV]
    )
    assert ledger is not None
    assert f"CREATE ROLE {ledger[1]} LOGIN" in init
    assert f"CREATE DATABASE {ledger[2]} OWNER {ledger[1]}" in init
    assert "./initdb:/docker-entrypoint-initdb.d:ro" in services["postgres"]["volumes"]


@contextmanager
def _schemas(base: str, count: int) -> Iterator[list[str]]:
    """`count` new, empty PostgreSQL schemas on the test server, dropped afterwards."""
    from sqlalchemy import create_engine, text

    names = [f"t_{uuid.uuid4().hex[:12]}" for _ in range(count)]
    admin = create_engine(base)
    with admin.begin() as conn:
        for name in names:
            conn.execute(text(f"CREATE SCHEMA {name}"))
    try:
        yield names
    finally:
        with admin.begin() as conn:
            for name in names:
                conn.execute(text(f"DROP SCHEMA {name} CASCADE"))
        admin.dispose()


@pytest.mark.postgres
def test_a_release_through_the_production_instance_and_ledger_on_postgresql(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """deploy/dagster.yaml as the instance, PostgreSQL for Dagster's runs, events and schedules
    and for the ledger, and the code location loaded in production from its environment: the
    first release (create_scope) is charged and published, a new instance on the same database
    sees its run, and the re-run returns the stored copy, charging nothing."""
    base = os.environ.get(PG_ENV)
    if not base:
        pytest.skip(f"{PG_ENV} is not set (`source .ci/postgres.sh` starts a server)")
    from sqlalchemy.engine import make_url

    server = make_url(base)
    site = tmp_path / "site"
    write_tables(site / "confidential")
    shutil.copytree(PIPELINE_SPECS, site / "specs")
    shutil.copy(PRIVACY, site / "privacy.yaml")
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(DEPLOY / "dagster.yaml", home / "dagster.yaml")
    with _schemas(base, 2) as (dagster_schema, ledger_schema):
        ledger_url = server.update_query_dict({"options": f"-csearch_path={ledger_schema}"})
        production = {
            "DPRELEASE_DEPLOYMENT": "production",
            "DPRELEASE_SPECS_DIR": str(site / "specs"),
            "DPRELEASE_CONFIDENTIAL_DIR": str(site / "confidential"),
            "DPRELEASE_PUBLIC_DIR": str(site / "public"),
            "DPRELEASE_PRIVACY_CONFIG": str(site / "privacy.yaml"),
            "DPRELEASE_LEDGER_URL": ledger_url.render_as_string(hide_password=False),
            "PGOPTIONS": f"-csearch_path={dagster_schema}",  # libpq: Dagster's own schema
        }
        for name, value in production.items():
            monkeypatch.setenv(name, value)
        _dagster_pg_env(
            monkeypatch,
            DAGSTER_PG_HOST=str(server.host),
            DAGSTER_PG_PORT=str(server.port or 5432),
            DAGSTER_PG_USER=str(server.username),
            DAGSTER_PG_PASSWORD=str(server.password),
            DAGSTER_PG_DB=str(server.database),
        )
        defs = build_definitions()  # production: everything from the environment
        with dg.DagsterInstance.from_config(str(home)) as instance:
            storages = (instance.run_storage, instance.event_log_storage, instance.schedule_storage)
            assert [type(s).__name__ for s in storages] == [
                "PostgresRunStorage",
                "PostgresEventLogStorage",
                "PostgresScheduleStorage",
            ]
            assert instance.run_monitoring_enabled and not instance.run_retries_enabled
            first = materialize(defs, instance, [MONTHLY], "2024-02", {"create_scope": True})
            assert first.success
        with dg.DagsterInstance.from_config(str(home)) as instance:  # another process's view
            run = instance.get_run_by_id(first.run_id)
            assert run is not None and run.is_success
            assert run.tags["dagster/max_retries"] == "0"
            again = materialize(defs, instance, [MONTHLY], "2024-02")
            assert again.success
            metadata = again.asset_materializations_for_node(MONTHLY)[0].metadata
            assert metadata["charged"].value is False
            assert str(metadata["ledger"].value).startswith("already released on ")
            records = instance.fetch_materializations(dg.AssetKey(MONTHLY), limit=10).records
            assert len(records) == 2
        with Ledger(production["DPRELEASE_LEDGER_URL"]) as book:
            assert book.display_url.startswith("postgresql+psycopg://")
            status = book.status(SCOPE)[0]
        assert (status.spent, status.releases) == (VISITS_CAP / 12, 1)
        published = site / "public" / MONTHLY / "2024-02"
        assert sorted(p.name for p in published.iterdir()) == [
            "manifest.json",
            "release.csv",
            "release.parquet",
        ]


def test_the_deploy_page_shows_the_dagster_yaml_that_is_tested() -> None:
    """docs/deploy.md quotes deploy/dagster.yaml whole: the page cannot drift from the file."""
    page = (ROOT / "docs" / "deploy.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", page, flags=re.DOTALL)
    assert (DEPLOY / "dagster.yaml").read_text() in blocks
