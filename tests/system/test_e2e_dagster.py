"""End to end, as an operator runs it: `dg dev` (webserver + daemon) on the project's Dagster home,
launched through the same GraphQL calls the UI makes, then looked at in headless Chromium.

The server runs from the checkout exactly as the README starts it; only the spec files, the
confidential store, public directory and ledger point into a temporary directory, through their
environment variables. The specs are the demo's beside a broken one (a YAML syntax error), which
must not keep the others from loading and running; the case-control table is large (1.5 million
rows), so a release of it draws long enough for a test to kill its run worker between the
ledger's charge and commit. These tests run in file order and share one server (module fixture);
the last one stops it with SIGTERM to its PID and checks that nothing is left behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest
from dgdev import (
    CHROMIUM,
    CHROMIUM_FLAGS,
    LOCATION,
    STEP_FAILURES,
    Server,
    alive,
    default_interrupts,
    descendants,
    dev_module,
    free_port,
    no_daemon_on,
)
from helpers import PIPELINE_SPECS, ROOT, write_tables

from dprelease.ledger import Ledger
from dprelease.spec import load_pipeline_specs
from pipelines.automation import problem_key
from pipelines.demo_data import generate_case_control

pytestmark = pytest.mark.e2e
MONTHLY = "visits_by_clinic"
VISITS_MONTH = Fraction(4, 12)  # hospital_patients' profile ε 4.0, 1/12 per month
#: A spec file that is not YAML (a key indented after its mapping ended), beside the demo's.
BROKEN_SPEC = """\
release:
  name: admissions_by_ward
  source: visits
publish:
  scope: hospital_patients
 share: 1/12
"""
BROKEN_LINE = re.compile(
    r"^\S+/admissions_monthly\.yaml: YAML syntax error at line 6, column 2: [^\n]+$"
)
#: Rows of the large case-control table (a draw of it takes seconds, not milliseconds).
LARGE_STUDY = 1_500_000
#: How far the privacy budget's scopes table reaches past what shows it: the window, and every
#: element around it that clips or scrolls its content.
SCOPES_TABLE_OVERFLOW = """() => {
  const scopes = [...document.querySelectorAll('table')].find(t => [...t.querySelectorAll('th')]
    .some(th => th.textContent.trim() === 'remaining'));
  const right = scopes.getBoundingClientRect().right;
  let overflow = right - document.documentElement.clientWidth;
  for (let around = scopes.parentElement; around; around = around.parentElement) {
    if (getComputedStyle(around).overflowX !== 'visible') {
      overflow = Math.max(overflow, right - around.getBoundingClientRect().right);
    }
  }
  return overflow;
}"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    dev = dev_module()
    dev.ensure_dagster_home()  # what `python3 dev.py` does: .env names .dprelease/dagster
    no_daemon_on(dev.DAGSTER_HOME)
    root = tmp_path_factory.mktemp("e2e")
    write_tables(root / "confidential", patients=2_000)
    study = generate_case_control().sample(LARGE_STUDY, with_replacement=True, seed=3)
    study = study.with_columns(participant_id=pl.int_range(LARGE_STUDY, dtype=pl.Int64))
    study.write_parquet(root / "confidential" / "case_control.parquet")
    shutil.copytree(PIPELINE_SPECS, root / "specs")
    (root / "specs" / "admissions_monthly.yaml").write_text(BROKEN_SPEC)
    environment = {
        **{k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"},  # .env names it
        "DPRELEASE_SPECS_DIR": str(root / "specs"),
        "DPRELEASE_CONFIDENTIAL_DIR": str(root / "confidential"),
        "DPRELEASE_PUBLIC_DIR": str(root / "public"),
        "DPRELEASE_LEDGER_URL": str(root / "ledger.sqlite"),
    }
    port, log = free_port(), root / "dg-dev.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "dg"),
                "dev",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            cwd=ROOT,
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
            preexec_fn=default_interrupts,
        )
    running = Server(root, port, process, log, environment)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert process.poll() is None, log.read_text()
            try:
                loaded = running.graphql(
                    "{ workspaceOrError { ... on Workspace { locationEntries { name "
                    "locationOrLoadError { __typename } } } } }"
                )["workspaceOrError"]["locationEntries"]
                if (
                    loaded
                    and loaded[0]["locationOrLoadError"]["__typename"] == "RepositoryLocation"
                ):
                    assert loaded[0]["name"] == LOCATION
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(1)
        running.children = descendants(process.pid)
        yield running
    finally:
        running.stop()


def test_ui_launches_publish_every_month_and_charge_once(server: Server) -> None:
    single = server.launch_materialization(MONTHLY, "2024-06")
    backfill = server.launch_backfill(MONTHLY, ["2024-01", "2024-02", "2024-03"])
    budget = server.launch_materialization("privacy_budget")
    runs = server.wait_for_runs(1, runIds=[single]) + server.wait_for_runs(1, runIds=[budget])
    runs += server.wait_for_runs(3, tags=[{"key": "dagster/backfill", "value": backfill}])
    assert [r["status"] for r in runs] == ["SUCCESS"] * 5
    partitions = sorted(
        t["value"] for r in runs for t in r["tags"] if t["key"] == "dagster/partition"
    )
    assert partitions == ["2024-01", "2024-02", "2024-03", "2024-06"]  # one run per month
    for run in runs[:1] + runs[2:]:  # Materialize and backfill runs of the release: no retries
        assert {"key": "dagster/max_retries", "value": "0"} in run["tags"], run
    history = {r["runId"] for r in server.runs()}
    assert {r["runId"] for r in runs} <= history
    for month in partitions:
        directory = server.root / "public" / MONTHLY / month
        assert sorted(p.name for p in directory.iterdir()) == [
            "manifest.json",
            "release.csv",
            "release.parquet",
        ]
    with Ledger(str(server.root / "ledger.sqlite")) as book:
        status = book.status("hospital_patients")[0]
        charges = [e.period for e in book.history("hospital_patients") if e.kind == "reserved"]
    assert status.spent == 4 * VISITS_MONTH and status.releases == 4
    assert sorted(charges) == partitions  # each month charged exactly once


def test_browser_shows_the_graph_and_the_budget_with_both_plots(server: Server) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            # a fresh Dagster home greets a first visit with a newsletter dialog, a second or more
            # after the page loads (later under load): skip it whenever it covers what we click
            skip = page.get_by_role("button", name="Skip", exact=True)
            page.add_locator_handler(skip, lambda button: button.click())
            page.goto(f"{server.url}/asset-groups", wait_until="networkidle", timeout=120_000)
            graph = f"{server.url}/locations/{LOCATION}/asset-groups/releases"
            page.goto(graph, wait_until="networkidle")
            for asset in (MONTHLY, "case_control_by_region", "visits", "case_control"):
                page.get_by_text(asset, exact=True).first.wait_for(timeout=60_000)
            # The confidential tables are external data: their group never says "Never
            # materialized", whatever this Dagster home has run before (releases not run in
            # this test, such as case_control_by_region, may well say it on the other graph).
            sources = f"{server.url}/locations/{LOCATION}/asset-groups/confidential"
            page.goto(sources, wait_until="networkidle")
            for asset in ("visits", "case_control"):
                page.get_by_text(asset, exact=True).first.wait_for(timeout=60_000)
            assert page.get_by_text("Never materialized").count() == 0
            page.goto(f"{server.url}/assets/privacy_budget", wait_until="networkidle")
            page.get_by_text("hospital_patients", exact=True).first.wait_for(timeout=60_000)
            overflow = page.evaluate(SCOPES_TABLE_OVERFLOW)
            assert overflow <= 1, f"the scopes table is {overflow}px wider than its panel"
            page.get_by_text("[Show Markdown]").first.click(timeout=60_000)
            dialog = page.get_by_role("dialog")
            dialog.get_by_text("ε_min is reached at P10 = 1").first.wait_for(timeout=30_000)
            plots = dialog.locator("img[src^='data:image/png;base64,']")
            # three scopes (the case-control study, the hospital's patients and the local-DP
            # survey's respondents, charged by its wave) × (profile, ε per P10) plots
            plots.nth(5).wait_for(timeout=30_000)
            widths = plots.evaluate_all("images => images.map(image => image.naturalWidth)")
            assert len(widths) == 6 and all(width > 100 for width in widths)
        finally:
            browser.close()


def test_a_refused_month_is_one_message_on_its_run_page(server: Server) -> None:
    """A month the budget cannot cover, launched as the UI's Materialize does: the run fails
    with the refusal's one message, its facts beside it, and no Python stack under it, both in
    what the UI fetches (GraphQL) and on the run page in the browser."""
    from playwright.sync_api import sync_playwright

    with Ledger(str(server.root / "ledger.sqlite")) as book:
        book.set_cap("hospital_patients", Fraction(1), reason="e2e: no more months")
    run = server.launch_materialization(MONTHLY, "2024-07")
    assert [r["status"] for r in server.wait_for_runs(1, runIds=[run])] == ["FAILURE"]
    message = (
        "visits_by_clinic 2024-07: privacy budget exhausted for scope 'hospital_patients': "
        "spent ε = 4/3 ≈ 1.33 of cap 1, requested 1/12 ≈ 0.0833, remaining 0; nothing was "
        "charged."
    )
    events = server.graphql(STEP_FAILURES, runId=run)["logsForRun"]["events"]
    [step] = [e for e in events if e["__typename"] == "ExecutionStepFailureEvent"]
    assert step["error"]["message"].startswith(message) and step["error"]["stack"] == []
    facts = {e["label"]: e.get("text") for e in step["failureMetadata"]["metadataEntries"]}
    assert facts["refused"] == "BudgetExhausted" and facts["spent"] == "4/3 ≈ 1.33"
    [failed] = [e for e in events if e["__typename"] == "RunFailureEvent"]
    assert failed["error"] == step["error"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(f"{server.url}/runs/{run}", wait_until="networkidle", timeout=120_000)
            page.get_by_text(message).first.wait_for(timeout=60_000)
            shown = page.inner_text("body")
            assert "Stack Trace" not in shown and 'File "' not in shown
            assert "dagster._core" not in shown and "Failure:" not in shown
        finally:
            browser.close()


def test_a_broken_spec_beside_working_ones_in_the_ui(server: Server) -> None:
    """The code location loaded although admissions_monthly.yaml is not YAML (the fixture waited
    for it); the broken spec is an asset whose run — launched once by the broken_specs sensor —
    failed with the file's one line and no stack, shown failed in the releases graph beside the
    working releases; and `dg launch` of another release works from the shell."""
    from playwright.sync_api import sync_playwright

    [problem] = load_pipeline_specs([server.root / "specs"]).problems
    key = problem_key(problem)  # this server's broken file: its run, not an earlier server's
    [broken] = server.wait_for_runs(1, timeout=180, tags=[{"key": "dagster/run_key", "value": key}])
    assert broken["status"] == "FAILURE"
    events = server.graphql(STEP_FAILURES, runId=broken["runId"])["logsForRun"]["events"]
    [step] = [e for e in events if e["__typename"] == "ExecutionStepFailureEvent"]
    assert BROKEN_LINE.match(step["error"]["message"]) and step["error"]["stack"] == []
    launched = subprocess.run(
        [
            str(Path(sys.executable).parent / "dg"),
            "launch",
            "--assets",
            "case_control_by_region",
        ],
        cwd=ROOT,
        env=server.environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert launched.returncode == 0, launched.stdout + launched.stderr
    assert "Traceback" not in launched.stdout + launched.stderr
    published = server.root / "public" / "case_control_by_region" / "all"
    assert (published / "manifest.json").exists()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            graph = f"{server.url}/locations/{LOCATION}/asset-groups/releases"
            page.goto(graph, wait_until="networkidle", timeout=120_000)
            for asset in ("admissions_monthly", MONTHLY, "case_control_by_region"):
                page.get_by_text(asset, exact=True).first.wait_for(timeout=60_000)
            page.get_by_text("Failed", exact=True).first.wait_for(timeout=60_000)
            page.screenshot(path=server.root / "broken_spec_graph.png")
            page.goto(f"{server.url}/runs/{broken['runId']}", wait_until="networkidle")
            page.get_by_text("admissions_monthly.yaml: YAML syntax error").first.wait_for(
                timeout=60_000
            )
            page.screenshot(path=server.root / "broken_spec_run.png")
            assert "Stack Trace" not in page.inner_text("body")
        finally:
            browser.close()


def _run_worker(server: Server, run: str) -> int:
    """The PID of a run's worker process, as the run's log states it."""
    for message in server.messages(run):
        if found := re.search(r"Started process for run \(pid: (\d+)\)", message):
            return int(found[1])
    raise AssertionError(f"no run worker in the log of {run}: {server.messages(run)}")


def _reserved_by(server: Server, run: str, timeout: float = 120) -> bool:
    """Wait until the run has an open reservation in the ledger (charged, not yet stored)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # the ledger may not exist yet, or be locked
            with Ledger(str(server.root / "ledger.sqlite"), mode="read") as book:
                events = book.history("case_control_study")
            taken = {e.charge_id for e in events if e.kind == "reserved" and e.run_id == run}
            done = {e.charge_id for e in events if e.kind in ("committed", "voided")}
            if taken and not taken & done:
                return True
            if taken:
                return False  # stored already: too late to kill it between charge and commit
        time.sleep(0.05)
    return False


def test_a_killed_run_says_its_reservation_is_open_and_a_relaunch_resumes_it(
    server: Server,
) -> None:
    """Materialize a release of the large table, SIGKILL its run worker (and the step process
    under it) once the ledger holds its reservation: the run fails, and its page says what it
    reserved, that nothing was published, and that a relaunch resumes it free (a log event and
    a run tag from the failed-run sensor); the relaunch succeeds and the scope is charged once."""
    from playwright.sync_api import sync_playwright

    run = server.launch_materialization("case_control_by_genotype")
    assert _reserved_by(server, run), "the release was stored before the test could kill it"
    worker = _run_worker(server, run)
    for pid in [*descendants(worker), worker]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert [r["status"] for r in server.wait_for_runs(1, runIds=[run])] == ["FAILURE"]
    slot = "case_control_by_genotype/-"  # the ledger's release id of an unperiodic release
    told = f"{slot}: this run reserved ε = 0.15 of scope 'case_control_study' (ledger charge"
    deadline = time.monotonic() + 180
    while not any(m.startswith(told) for m in server.messages(run)):
        assert time.monotonic() < deadline, server.messages(run)
        time.sleep(3)
    [failed] = server.runs(runIds=[run])
    assert {"key": "dprelease/open_reservation", "value": slot} in failed["tags"]
    assert not (server.root / "public" / "case_control_by_genotype").exists()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(f"{server.url}/runs/{run}", wait_until="networkidle", timeout=120_000)
            page.get_by_text("it resumes this reservation and charges nothing more").first.wait_for(
                timeout=60_000
            )
            page.screenshot(path=server.root / "killed_run.png")
        finally:
            browser.close()
    again = server.launch_materialization("case_control_by_genotype")
    assert [r["status"] for r in server.wait_for_runs(1, runIds=[again])] == ["SUCCESS"]
    with Ledger(str(server.root / "ledger.sqlite")) as book:
        status = book.status("case_control_study")[0]
        kinds = [e.kind for e in book.history("case_control_study") if e.release_id
                 and e.release_id.startswith("case_control_by_genotype")]  # fmt: skip
    assert kinds == ["reserved", "resumed", "committed"]  # one charge, resumed by the relaunch
    assert status.spent == Fraction(3, 10) and status.releases == 2  # with the dg launch above


def test_sigterm_stops_dg_dev_and_leaves_no_temporary_home(server: Server) -> None:
    children = descendants(server.process.pid)
    assert children, "dg dev runs the webserver, daemon and code server as child processes"
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=60) == 0
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [pid for pid in children if alive(pid)]
    assert not list(ROOT.glob(".tmp_dagster_home_*"))
    assert "Loaded environment variables from .env file: DAGSTER_HOME" in server.log.read_text()
