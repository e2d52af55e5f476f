"""A release's files appear whole, whatever instant the process dies: the real `dprelease
release` SIGKILLed at every file-system step after the ledger commit (`publish_kill.py`), on a new
folder and on a folder being replaced by a re-release. After each kill the folder is absent or
one release whole, never a table without its manifest; the re-run charges nothing, removes what
the killed run left and writes the stored release byte for byte. (Outsiders found 5 of 20 kills
aimed at that window leaving `release.parquet` alone or a `.manifest.json.*.tmp`, and 14 of 20
folders keeping a `.release.parquet.*.tmp` after the successful re-run.)"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest
from helpers import RACERS, WORKSPACE_SPEC, invoke_cli, write_visits
from publish_kill import release_killed_at

from dprelease.ledger import Ledger, make_release_id
from dprelease.publish import RELEASE_FILES

pytestmark = pytest.mark.races
MONTHS = [f"2024-{m:02d}" for m in range(1, 13)]
MOST_STEPS = 20


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "spec.yaml").write_text(WORKSPACE_SPEC)
    days = [f"{month}-{day:02d}" for month in MONTHS for day in (3, 9)]
    write_visits(tmp_path, days, pid=list(range(len(days))), region=["n", "s"] * 12,
                 cost=[1.0] * len(days))  # fmt: skip
    return tmp_path


def run(ws: Path, month: str, *extra: str, kill_at: int | None = None) -> int:
    """`dprelease release` of `month` into pub/<month>: in a process of its own (forked, see
    helpers.RACERS) killed before step `kill_at` after the commit (or run to the end); without
    `kill_at`, the re-run after a kill, in this process (nothing kills it).
    Returns the exit status (-9: killed)."""
    args = [
        "release", "--spec", str(ws / "spec.yaml"), "--data", str(ws / "visits.parquet"),
        "--out", str(ws / "pub" / month), "--period", month, "--ledger", str(ws / "l.sqlite"),
        "--epsilon", "1/100", "--cap", "1", *extra,
    ]  # fmt: skip
    if kill_at is None:
        result = invoke_cli(*args)
        assert result.exit_code == 0, result.output
        return 0
    log = ws / "killed.log"
    process = RACERS.Process(target=release_killed_at, args=(kill_at, args, str(ws), str(log)))
    process.start()
    process.join(120)
    assert process.exitcode in (0, -signal.SIGKILL), (process.exitcode, log.read_text())
    return process.exitcode


def stored_files(ws: Path, month: str) -> dict[str, bytes]:
    """The files of the slot's latest stored release, as publishing makes them."""
    with Ledger(str(ws / "l.sqlite"), mode="read") as ledger:
        stored = ledger.stored_release(make_release_id("visits", month))
    assert stored is not None
    return {name: encode(stored) for name, encode in RELEASE_FILES.items()}


def folder(ws: Path, month: str) -> dict[str, bytes] | None:
    path = ws / "pub" / month
    return {p.name: p.read_bytes() for p in path.iterdir()} if path.exists() else None


def test_a_kill_at_any_step_after_the_commit_leaves_no_partial_folder(ws: Path) -> None:
    steps = 0
    for step, month in zip(range(1, MOST_STEPS), MONTHS, strict=False):
        code = run(ws, month, kill_at=step)
        seen = folder(ws, month)
        assert seen is None or seen == stored_files(ws, month), (step, seen and sorted(seen))
        assert run(ws, month) == 0  # the re-run: nothing charged, files from the stored copy
        assert folder(ws, month) == stored_files(ws, month)
        assert sorted(os.listdir(ws / "pub")) == MONTHS[:step]  # no hidden leftovers beside
        if code == 0:  # the publication has fewer steps than this: every one was killed
            steps = step - 1
            break
    assert steps >= 5  # made the folder, wrote three files, renamed it: each step was killed
    with Ledger(str(ws / "l.sqlite"), mode="read") as ledger:
        status = ledger.status("visits")[0]
    assert (status.releases, status.open_reservations) == (steps + 1, 0)  # one charge each


def test_a_replaced_folder_is_the_old_release_or_the_new_never_a_mix(ws: Path) -> None:
    month = "2024-01"
    assert run(ws, month) == 0
    partial: list[list[str]] = []
    for step in range(1, MOST_STEPS):
        before = folder(ws, month)
        watching = threading.Event()
        watcher = threading.Thread(target=_watch, args=(ws / "pub" / month, watching, partial))
        watcher.start()
        code = run(ws, month, "--force-new", kill_at=step)
        watching.set()
        watcher.join()
        seen = folder(ws, month)
        assert seen in (None, before, stored_files(ws, month)), step
        assert run(ws, month) == 0
        assert folder(ws, month) == stored_files(ws, month)
        assert os.listdir(ws / "pub") == [month]
        if code == 0:
            assert step > 6  # aside, into place, the old removed: each step was killed
            break
    assert partial == []  # a reader polling the folder never saw some of the files


def _watch(path: Path, done: threading.Event, partial: list[list[str]]) -> None:
    """List the folder at `path` until `done`, as a careful reader does (through one open
    handle); record a listing that is not all of a release's files while `path` still names
    that folder. (A reader whose folder is replaced under it may see the old one emptied as it
    is removed: by then the name holds the new release, and reading again finds it.)"""
    while not done.is_set():
        try:
            handle = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            continue
        try:
            names = sorted(os.listdir(handle))
            try:
                still_there = os.stat(path).st_ino == os.fstat(handle).st_ino
            except FileNotFoundError:
                still_there = False
        finally:
            os.close(handle)
        if names != sorted(RELEASE_FILES) and still_there:
            partial.append(names)
