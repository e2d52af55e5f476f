"""What outsiders broke, through the faces: bad inputs that hung or escaped the one-line exit-2
contract, an unwritable --out found after the commit, and one month under three spellings.

Every refusal here exits 2 with one line on stderr, before anything is reserved or written.
Each test failed before its fix (issue 18).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import WORKSPACE_SPEC
from typer.testing import CliRunner, Result

import dprelease as dp
from dprelease.cli import app
from dprelease.errors import InputError

PRIVACY = "privacy:\n  profile: {kind: constant, bound: 20}\n"


def release_args(ws: Path, **given: str) -> list[str]:
    """`dprelease release` on the workspace (tests/conftest.py) for January, `given` replacing
    options by name (`data=...` for --data)."""
    options = {
        "spec": str(ws / "spec.yaml"),
        "data": str(ws / "visits.parquet"),
        "out": str(ws / "out"),
        "period": "2024-01",
        "ledger": str(ws / "ledger.sqlite"),
        "epsilon": "1",
        "cap": "1",
        **given,
    }
    return ["release", *(item for name, value in options.items() for item in (f"--{name}", value))]


def one_line_refusal(result: Result, ws: Path, *words: str) -> None:
    """Exit 2, one `error:` line naming what is wrong, and nothing reserved or written."""
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr
    assert not (ws / "ledger.sqlite").exists() and not (ws / "out").exists()


def without_blocking(call: Callable[[], Any], fifo: Path, seconds: float = 30) -> Any:
    """`call()`, which must return (or raise) without waiting on `fifo`: if it is still running
    after `seconds`, a writer opens and closes the FIFO so the blocked open returns, and the
    test fails."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # release the blocked reader
        thread.join(seconds)
        pytest.fail(f"blocked on the FIFO {fifo} for {seconds}s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


# --- not a regular file ------------------------------------------------------------------------


@pytest.mark.parametrize("option", ["data", "spec", "config"])
@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".yaml"])
def test_a_fifo_given_as_an_input_file_is_refused_not_waited_on(
    workspace: Path, option: str, suffix: str
) -> None:
    fifo = workspace / f"pipe{suffix}"
    os.mkfifo(fifo)
    args = release_args(workspace, **{option: str(fifo)})
    result = without_blocking(lambda: CliRunner().invoke(app, args), fifo)
    one_line_refusal(result, workspace, str(fifo), "a FIFO (named pipe)", "not a regular file")


def test_a_device_is_refused_as_data(workspace: Path) -> None:
    result = CliRunner().invoke(app, release_args(workspace, data="/dev/zero"))
    one_line_refusal(result, workspace, "'/dev/zero'", "a character device")


def test_the_api_refuses_a_fifo_where_files_are_opened(workspace: Path) -> None:
    fifo = workspace / "pipe.parquet"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="is a FIFO .*give a regular file or a directory"):
        without_blocking(
            lambda: dp.release(fifo, workspace / "spec.yaml", epsilon=1, period="2024-01"), fifo
        )
    with pytest.raises(dp.DPReleaseError, match="spec file .* is a FIFO"):
        without_blocking(lambda: dp.release(workspace / "visits.parquet", fifo, epsilon=1), fifo)
    assert WORKSPACE_SPEC.startswith("release:")  # the workspace's spec, unchanged
    assert pl.read_parquet(workspace / "visits.parquet").height == 5
