"""A release's files appear as one unit: its folder is written aside and renamed into place, a
re-run leaves a whole folder as it is and removes what killed runs left, and a folder that is
not the release's own is refused before the budget is touched. (Real SIGKILLs at every step are
in tests/system/test_release_folder_kills.py, marked `races`.)"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Callable
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest
from helpers import invoke_cli, one_line_error, release_args, words

from dprelease.errors import ConfigError
from dprelease.ledger import Ledger, StoredRelease
from dprelease.publish import RELEASE_FILES, release_folder_problem, write_release_files
from dprelease.publish import _files as files_module


def stored(n: int = 1) -> StoredRelease:
    """A stored release as the ledger hands it back (its table differs with `n`)."""
    table = pl.DataFrame({"region": ["n", "s"], "n": [n, n + 1]})
    buffer = io.BytesIO()
    table.write_parquet(buffer)
    return StoredRelease(
        release_id=f"r/{n}",
        charge_id=n,
        epsilon=Fraction(1),
        spec_hash="h",
        table_parquet=buffer.getvalue(),
        manifest={"release_id": f"r/{n}", "n": n},
        committed_at=datetime(2025, 1, 1, tzinfo=UTC),
    )


def expected(release: StoredRelease) -> dict[str, bytes]:
    return {name: encode(release) for name, encode in RELEASE_FILES.items()}


def contents(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_the_folder_appears_whole_and_a_rerun_leaves_it_as_it_is(tmp_path: Path) -> None:
    folder = tmp_path / "out" / "visits" / "2024-01"
    written = write_release_files(stored(), folder)
    assert written == {name: folder / name for name in RELEASE_FILES}
    assert contents(folder) == expected(stored())
    assert os.listdir(folder.parent) == ["2024-01"]  # nothing beside it
    inode = folder.stat().st_ino
    write_release_files(stored(), folder)
    assert folder.stat().st_ino == inode  # the same bytes: not replaced, never gone a moment


def test_a_rerun_removes_what_killed_runs_left_and_writes_the_same_bytes(tmp_path: Path) -> None:
    folder = tmp_path / "2024-01"
    write_release_files(stored(), folder)
    reference = contents(folder)
    # what a run killed at each step leaves: hidden siblings, and (earlier versions) a folder
    # with a table, no manifest and a temporary file
    (tmp_path / ".2024-01.0123456789abcdef.new").mkdir()
    (tmp_path / ".2024-01.0123456789abcdef.new" / "release.csv").write_bytes(b"half")
    (tmp_path / ".2024-01.fedcba9876543210.old").mkdir()
    (folder / "manifest.json").unlink()
    (folder / ".release.parquet.00112233445566aa.tmp").write_bytes(b"partial")
    (tmp_path / ".2024-02.0123456789abcdef.new").mkdir()  # another folder's: not ours to remove
    write_release_files(stored(), folder)
    assert contents(folder) == reference
    assert sorted(os.listdir(tmp_path)) == [".2024-02.0123456789abcdef.new", "2024-01"]


def test_a_new_release_replaces_the_folder_whole_and_keeps_its_permissions(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "2024-01"
    write_release_files(stored(1), folder)
    folder.chmod(0o2775)
    write_release_files(stored(2), folder)
    assert contents(folder) == expected(stored(2))
    assert stat.S_IMODE(folder.stat().st_mode) == 0o2775
    assert os.listdir(tmp_path) == ["2024-01"]


def test_a_failed_write_leaves_the_old_folder_and_nothing_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "2024-01"
    write_release_files(stored(1), folder)
    written: list[str] = []
    real = files_module._write

    def disk_full(path: Path, data: bytes) -> None:
        if written:
            raise OSError(28, "No space left on device")
        written.append(path.name)
        real(path, data)

    monkeypatch.setattr(files_module, "_write", disk_full)
    with pytest.raises(OSError, match="No space"):
        write_release_files(stored(2), folder)
    assert contents(folder) == expected(stored(1))
    assert os.listdir(tmp_path) == ["2024-01"]


def test_a_linked_folder_is_replaced_where_the_link_points(tmp_path: Path) -> None:
    real = tmp_path / "real"
    write_release_files(stored(1), real)
    link = tmp_path / "public"
    link.symlink_to(real)
    write_release_files(stored(2), link)
    assert link.is_symlink() and contents(link) == expected(stored(2))


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda d: (d / "notes.txt").write_text("mine"), "holds other files than a release's"),
        (lambda d: (d / "2024-01").mkdir(), "(2024-01)"),
    ],
)
def test_a_folder_that_is_not_the_releases_own_is_refused(
    tmp_path: Path, make: Callable[[Path], object], words: str
) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    make(folder)
    problem = release_folder_problem(folder)
    assert problem is not None and words in problem
    with pytest.raises(ConfigError, match="a folder of its own"):
        write_release_files(stored(), folder)
    assert release_folder_problem(tmp_path / "new" / "deep") is None


def test_the_cli_refuses_a_shared_folder_before_any_ledger_or_charge(workspace: Path) -> None:
    (workspace / "pub").mkdir()
    (workspace / "pub" / "2024-01").mkdir()
    (workspace / "pub" / "2024-01" / "README").write_text("our notes")
    result = invoke_cli("release", *release_args(workspace, "2024-01"), "--epsilon", "1",
                        "--cap", "1")  # fmt: skip
    one_line_error(result, "README", "a folder of its own")
    assert not (workspace / "ledger.sqlite").exists()
    assert (workspace / "pub" / "2024-01" / "README").read_text() == "our notes"


def test_the_cli_publishes_and_a_rerun_rewrites_a_partial_folder(workspace: Path) -> None:
    args = [*release_args(workspace, "2024-01"), "--epsilon", "1/4", "--cap", "1"]
    assert invoke_cli("release", *args).exit_code == 0
    folder = workspace / "pub" / "2024-01"
    reference = contents(folder)
    (folder / "manifest.json").unlink()  # as a run killed by an earlier dprelease left it
    again = invoke_cli("release", *args)
    assert again.exit_code == 0 and "nothing charged" in words(again.stdout)
    assert contents(folder) == reference
    with Ledger(str(workspace / "ledger.sqlite"), mode="read") as ledger:
        assert ledger.status("visits")[0].releases == 1
