"""The published files of a release: made from the ledger's stored copy only, and published as
one unit.

Everything is derived from the stored table and manifest, so every run of the same slot (a
re-run, a backfill, the publish-pending sensor) writes the same bytes.

A release's folder appears whole or not at all. Its files are written into a hidden sibling
folder (`.<name>.<random>.new`), each flushed to disk, and that folder is renamed to the
release's name in one step (a rename to a free name is atomic on POSIX). A folder already there
that holds exactly these bytes (a re-run) is left as it is; any other (a re-release with
force_new, or what a killed run of an earlier dprelease left) is first renamed aside
(`.<name>.<random>.old`) and removed after the new one is in place: a reader finds the old
folder, for a moment none, or the new one, never a mix. A run killed at any step leaves hidden
siblings at most, which the next run of the release removes (with the `.<file>.<random>.tmp`
files earlier versions could leave inside the folder). Runs publishing into one directory take
turns (an exclusive lock on it), so two runs of the same release never remove each other's work.

The folder is the release's own: publishing replaces it whole, so one that holds anything else
is refused (`release_folder_problem`), before the budget is touched.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from dprelease.errors import ConfigError
from dprelease.files import unwritable_directory
from dprelease.publication import Publishable, chosen_files
from dprelease.spec import TABLE_FORMATS, TableFormat


def _manifest(stored: Publishable) -> bytes:
    return (json.dumps(stored.manifest, indent=2, sort_keys=True) + "\n").encode()


#: The published files by default, by name, and how each is made from the ledger's stored copy
#: (the table's files from `publication`, the CSV with integral values as integers).
RELEASE_FILES: dict[str, Callable[[Publishable], bytes]] = {
    **chosen_files(),
    "manifest.json": _manifest,
}
#: Every file a release's folder may hold: the table in each format (`publish.formats` chooses)
#: and the manifest.
FOLDER_FILES = (*chosen_files(TABLE_FORMATS), "manifest.json")

#: A temporary file `atomic_path` of an earlier dprelease wrote into a release's folder and a
#: killed run left there: part of the release's folder, removed when it is published again.
_EARLIER_TEMPORARY = re.compile(
    r"\.(" + "|".join(map(re.escape, RELEASE_FILES)) + r")\.[0-9a-f]{16}\.tmp"
)


def _folder(out_dir: Path) -> Path:
    """The folder that publishing replaces: `out_dir` made absolute, or the folder a symbolic
    link there points to (the link keeps pointing at the new folder)."""
    path = Path(os.path.abspath(out_dir))
    return path.resolve() if path.is_symlink() else path


def _sibling(folder: Path, kind: str) -> Path:
    return folder.with_name(f".{folder.name}.{secrets.token_hex(8)}.{kind}")


def _is_leftover(folder: Path, name: str) -> bool:
    """Whether `name`, beside `folder`, is a sibling a killed publication of it left."""
    return re.fullmatch(rf"\.{re.escape(folder.name)}\.[0-9a-f]{{16}}\.(new|old)", name) is not None


def release_folder_problem(out_dir: Path) -> str | None:
    """Why a release cannot be published as the folder `out_dir`, in words; None when it can.

    Asked before a release is reserved, so that the budget is never charged for files that
    cannot appear: the folder must be a directory (or not exist yet) that holds a release's
    files only, and its parent must take the new folder beside it."""
    folder = _folder(out_dir)
    if folder.parent == folder or os.path.ismount(folder):
        return (
            f"cannot publish into {out_dir}: a release is published by replacing its folder "
            "whole, so give it a folder of its own (not a file system's root or mount point)"
        )
    if folder.exists():
        if not folder.is_dir():
            return f"cannot write into {out_dir}: it exists and is not a directory"
        others = sorted(
            entry.name
            for entry in folder.iterdir()
            if entry.name not in FOLDER_FILES and not _EARLIER_TEMPORARY.fullmatch(entry.name)
        )
        if others:
            shown = ", ".join(others[:3]) + (", …" if len(others) > 3 else "")
            return (
                f"{out_dir} holds other files than a release's ({shown}); a release is "
                "published by replacing its folder whole, so give each release a folder of "
                "its own"
            )
    return unwritable_directory(folder.parent)


@contextmanager
def _taking_turns(directory: Path) -> Iterator[None]:
    """An exclusive lock on `directory` while the block runs; the system releases it when the
    process ends, however it ends."""
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def _sync(directory: Path) -> None:
    """Flush a directory's entries to disk (a rename in it survives a crash)."""
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _write(path: Path, data: bytes) -> None:
    with path.open("xb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())


def _holds_exactly(folder: Path, contents: dict[str, bytes]) -> bool:
    """Whether `folder` is already the published release: these files, these bytes, nothing
    else."""
    if not folder.is_dir() or sorted(os.listdir(folder)) != sorted(contents):
        return False
    return all((folder / name).read_bytes() == data for name, data in contents.items())


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def write_release_files(
    stored: Publishable, out_dir: Path, formats: Sequence[TableFormat] | None = None
) -> dict[str, Path]:
    """Publish the stored release as the folder `out_dir`, whole (see the module docstring):
    its table in `formats` (default parquet and csv) and `manifest.json`.

    Every file is made in memory first, so an error there (or ConfigError for a folder that is
    not the release's own) changes nothing on disk; an error while writing leaves the folder as
    it was."""
    folder = _folder(out_dir)
    if (problem := release_folder_problem(out_dir)) is not None:
        raise ConfigError("out_dir", problem)
    chosen = (
        RELEASE_FILES if formats is None else {**chosen_files(formats), "manifest.json": _manifest}
    )
    contents = {name: encode(stored) for name, encode in chosen.items()}
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _taking_turns(folder.parent):
        for entry in os.listdir(folder.parent):
            if _is_leftover(folder, entry):
                _remove(folder.parent / entry)
        if not _holds_exactly(folder, contents):
            _replace(folder, contents)
    return {name: out_dir / name for name in contents}


def _replace(folder: Path, contents: dict[str, bytes]) -> None:
    """Write `contents` into a new hidden sibling and rename it to `folder`, moving an existing
    `folder` aside first (it keeps its permissions)."""
    staging = _sibling(folder, "new")
    aside: Path | None = None
    os.mkdir(staging)
    try:
        for name, data in contents.items():
            _write(staging / name, data)
        if folder.exists():
            os.chmod(staging, stat.S_IMODE(folder.stat().st_mode))
        _sync(staging)
        if folder.exists():
            aside = _sibling(folder, "old")
            os.rename(folder, aside)
        os.rename(staging, folder)
        _sync(folder.parent)
    except BaseException:
        if aside is not None and aside.exists() and not folder.exists():
            os.rename(aside, folder)  # put the old release back
        _remove(staging)
        raise
    if aside is not None:
        _remove(aside)
