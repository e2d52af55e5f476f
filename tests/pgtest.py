"""Ledger backends for tests: a SQLite file, and a real PostgreSQL from DPRELEASE_TEST_PG_URL.

Without a reachable server the PostgreSQL cases skip with the reason shown, except under CI=true,
where they fail: CI must really exercise PostgreSQL (`.ci/postgres.sh` starts one). Each test gets
its own PostgreSQL schema (via `search_path`), dropped afterwards, so tests never share state.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

PG_ENV = "DPRELEASE_TEST_PG_URL"
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@functools.cache
def _pg_problem() -> str | None:
    url = os.environ.get(PG_ENV)
    if not url:
        return f"{PG_ENV} is not set (run `source .ci/postgres.sh` to start a local server)"
    try:
        engine = create_engine(url, connect_args={"connect_timeout": 5})
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
    except Exception as exc:  # any failure means: not usable here
        return f"PostgreSQL at {make_url(url).render_as_string()} is unreachable: {exc}"
    return None


def require_pg_url() -> str:
    """The test server's URL; skips (outside CI) or fails (CI=true) when it is not usable."""
    problem = _pg_problem()
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true needs a PostgreSQL server: {problem}")
        pytest.skip(problem)
    return os.environ[PG_ENV]


@contextmanager
def fresh_pg_url() -> Iterator[str]:
    """A URL whose connections live in a new, empty schema; the schema is dropped afterwards."""
    base = require_pg_url()
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    url = make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Fixture body: an empty ledger URL for `request.param` ("sqlite" or "postgresql").

    Use as ``ledger_url = pytest.fixture(params=BACKENDS)(backend_url)`` in a test module.
    """
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    else:
        with fresh_pg_url() as url:
            yield url
