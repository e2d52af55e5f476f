"""`dg dev` for the end-to-end tests: started as an operator starts it, driven through the same
GraphQL calls the UI makes, looked at in headless Chromium, and stopped by its PID.

Like `pgtest.py` and `sparktest.py`, a helper module of one test tier (`tests/system/
test_e2e_dagster.py`), kept apart so that file holds the tests.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster._core.instance.ref import InstanceRef  # not exported; only to read heartbeats
from helpers import ROOT

LOCATION, REPOSITORY = "dprelease", "__repository__"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


LAUNCH_RUN = """
mutation LaunchPipelineExecution($executionParams: ExecutionParams!) {
  launchPipelineExecution(executionParams: $executionParams) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
    ... on PipelineNotFoundError { message }
  }
}"""
LAUNCH_BACKFILL = """
mutation LaunchPartitionBackfill($backfillParams: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $backfillParams) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
  }
}"""
RUNS = """
query Runs($filter: RunsFilter!) {
  runsOrError(filter: $filter) {
    ... on Runs { results { runId status tags { key value } } }
  }
}"""
#: A spec file that is not YAML (a key indented after its mapping ended), beside the demo's.
MESSAGES = """
query Messages($runId: ID!) {
  logsForRun(runId: $runId) {
    ... on EventConnection { events { __typename ... on MessageEvent { message } } }
  }
}"""
STEP_FAILURES = """
query StepFailures($runId: ID!) {
  logsForRun(runId: $runId) {
    ... on EventConnection {
      events {
        __typename
        ... on ExecutionStepFailureEvent {
          error { message stack }
          failureMetadata { metadataEntries { label ... on TextMetadataEntry { text } } }
        }
        ... on RunFailureEvent { error { message stack } }
      }
    }
  }
}"""
FINISHED = {"SUCCESS", "FAILURE", "CANCELED"}


def dev_module() -> Any:
    spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def descendants(pid: int) -> set[int]:
    """Every process below `pid`, from /proc (children of children included)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and " Z " not in Path(f"/proc/{pid}/stat").read_text()


@dataclass
class Server:
    """`dg dev` on a loopback port, and the directories its resources point at."""

    root: Path
    port: int
    process: subprocess.Popen[bytes]
    log: Path
    environment: dict[str, str]  # what it was started with, for `dg launch` beside it
    children: set[int] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def graphql(self, query: str, **variables: Any) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self.url}/graphql",
            data=json.dumps({"query": query, "variables": variables}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            body = json.loads(response.read())
        assert "errors" not in body, body["errors"]
        return body["data"]

    def launch_materialization(self, asset: str, partition: str | None = None) -> str:
        """What the UI's Materialize button sends for one asset (and one partition)."""
        tags = [{"key": "dagster/partition", "value": partition}] if partition else []
        params = {
            "mode": "default",
            "runConfigData": {},
            "executionMetadata": {"tags": tags},
            "selector": {
                "repositoryLocationName": LOCATION,
                "repositoryName": REPOSITORY,
                "pipelineName": "__ASSET_JOB",
                "assetSelection": [{"path": [asset]}],
            },
        }
        result = self.graphql(LAUNCH_RUN, executionParams=params)["launchPipelineExecution"]
        assert result["__typename"] == "LaunchRunSuccess", result
        return str(result["run"]["runId"])

    def launch_backfill(self, asset: str, partitions: list[str]) -> str:
        """What the UI's partition dialog sends for an asset backfill."""
        params = {
            "assetSelection": [{"path": [asset]}],
            "partitionNames": partitions,
            "fromFailure": False,
            "tags": [],
        }
        result = self.graphql(LAUNCH_BACKFILL, backfillParams=params)["launchPartitionBackfill"]
        assert result["__typename"] == "LaunchBackfillSuccess", result
        return str(result["backfillId"])

    def messages(self, run: str) -> list[str]:
        """The message of every event in a run's log, in order."""
        events = self.graphql(MESSAGES, runId=run)["logsForRun"]["events"]
        return [str(e.get("message") or "") for e in events]

    def runs(self, **run_filter: Any) -> list[dict[str, Any]]:
        return list(self.graphql(RUNS, filter=run_filter)["runsOrError"]["results"])

    def wait_for_runs(self, count: int, timeout: float = 300, **run_filter: Any) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            runs = self.runs(**run_filter)
            if len(runs) >= count and all(r["status"] in FINISHED for r in runs):
                return runs
            time.sleep(2)
        raise AssertionError(
            f"runs {run_filter} not finished in {timeout}s: {self.runs(**run_filter)}"
        )

    def stop(self) -> int | None:
        """SIGTERM to dg dev's PID, then anything of its tree still alive, each by its PID."""
        self.children |= descendants(self.process.pid)
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for pid in self.children:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        return self.process.returncode


def default_interrupts() -> None:
    """Dagster maps SIGTERM to SIGINT's handler; a process started in the background of a
    non-interactive shell inherits an ignored SIGINT and would then ignore SIGTERM too. Start
    `dg dev` as a terminal does, with SIGINT at its default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def no_daemon_on(home: Path, stale_after: float = 60) -> None:
    """Another `dg dev` on the project's home would run this test's runs with its own settings.
    A live daemon beats every 30 s; a stopped one's last beat goes stale, so wait for that."""
    if not (home / "dagster.yaml").exists():
        return
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
        deadline = time.monotonic() + stale_after + 15
        while True:
            beats = [beat.timestamp for beat in instance.get_daemon_heartbeats().values()]
            if time.time() - max(beats, default=0) > stale_after:
                return
            if time.monotonic() > deadline:
                pytest.fail(f"a Dagster daemon is running on {home}: stop `dg dev` first")
            time.sleep(5)
