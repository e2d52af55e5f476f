"""The files dprelease reads and writes, each one way for every caller.

Reading: privacy configs, release specs and pipeline specs are read by `read_sections` and
validated by pydantic; `error_at_path` turns the first validation problem into the project's
typed error at the bad field's YAML path (`release.statistics[1].upper`), so every file is
reported alike: the file for a missing or unreadable one, line and column for a syntax error,
the path for a bad value.

Writing: `atomic_path` gives files that readers may open at any moment whole or not at all.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from dprelease.errors import ConfigError

Location = tuple[int | str, ...]
#: Whether `loc[index]` is the tag pydantic adds to an error location for the member a union
#: chose (a profile's or statistic's `kind`); a tag is not part of the YAML path.
TagTest = Callable[[Location, int], bool]


def _no_tags(loc: Location, index: int) -> bool:
    return False


def join_path(prefix: str, relative: str) -> str:
    """`prefix` followed by a path below it (`privacy` + `points[2]` → `privacy.points[2]`)."""
    if not prefix or not relative:
        return prefix or relative
    return prefix + relative if relative.startswith("[") else f"{prefix}.{relative}"


def yaml_path(prefix: str, loc: Location, is_tag: TagTest = _no_tags) -> str:
    """The YAML path of a pydantic error location below `prefix`, union tags left out."""
    path = prefix
    for index, part in enumerate(loc):
        if isinstance(part, int):
            path += f"[{part}]"
        elif not is_tag(loc, index):
            path = join_path(path, part)
    return path


def error_at_path(
    exc: ValidationError,
    prefix: str,
    error: type[ConfigError],
    is_tag: TagTest = _no_tags,
) -> ConfigError:
    """The first validation problem as `error` at its YAML path.

    A check of the project's own that raised a ConfigError (or subclass) inside a validator keeps
    its type and message, its path taken as relative to the model that raised it. A union's
    missing or unknown tag is reported at the discriminator field with the tags allowed.
    """
    first = exc.errors()[0]
    path = yaml_path(prefix, tuple(first["loc"]), is_tag)
    context = first.get("ctx", {})
    cause = context.get("error")
    if isinstance(cause, ConfigError):
        return type(cause)(join_path(path, cause.path), cause.message)
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] in {"union_tag_invalid", "union_tag_not_found"}:
        field = str(context["discriminator"]).strip("'")
        path = join_path(path, field)
        allowed = re.findall(r"'([^']*)'", str(context.get("expected_tags", "")))
        given = f"{context['tag']!r} is not" if "tag" in context else "required:"
        message = f"{given} one of {', '.join(allowed)}" if allowed else "required"
    more = exc.error_count() - 1
    return error(path, message + (f" (and {more} more problem(s))" if more else ""))


def irregular(path: Path) -> str | None:
    """What `path` is when it exists but is not a regular file ("a directory", "a FIFO (named
    pipe)", …; symbolic links followed); None for a regular file or nothing at all.

    Every file dprelease reads is checked with this before it is opened: opening a FIFO blocks
    until something writes to it, and a device may never end, so either would hang a release
    instead of refusing it."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None  # missing (or unreadable): opening it says so
    kinds = [
        (stat.S_ISREG, None),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ]
    return next((kind for test, kind in kinds if test(mode)), "not a file")


def read_sections(
    path: Path, sections: Sequence[str], error: type[ConfigError], what: str
) -> dict[str, Any]:
    """The top-level mapping of the YAML file at `path`, which must hold every one of `sections`.

    `what` names the kind of file in messages ("spec file", "privacy config").
    """
    if (kind := irregular(path)) is not None:
        raise error("", f"cannot read {what} {str(path)!r}: it is {kind}, not a regular file")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error("", f"{what} {str(path)!r} does not exist") from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise error("", f"cannot read {what} {str(path)!r}: {exc}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise error("", f"{path}: YAML syntax error{where}: {problem}") from None
    found = document if isinstance(document, dict) else {}
    missing = [section for section in sections if section not in found]
    if missing:
        needed = " and ".join(f"`{section}:`" for section in sections)
        raise error(missing[0], f"{path}: a {what} needs the top-level section(s) {needed}")
    return found


def unwritable_directory(path: Path) -> str | None:
    """Why files cannot be written into the directory `path` (made when missing), in words; None
    when they can.

    Asked before a release is reserved, so a directory that cannot take the files is refused
    before the budget is charged instead of after the commit. It tries what writing will do,
    since permission bits do not tell (root ignores them; a read-only mount ignores root): it
    creates and removes an empty file in `path`, or, when `path` does not exist yet, in its
    nearest existing ancestor, where its directories would be made. Nothing stays behind."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        where = "it" if existing == path else f"{existing}"
        return f"cannot write into {path}: {where} exists and is not a directory"
    try:
        handle, probe = tempfile.mkstemp(prefix=".dprelease-probe-", dir=existing)
    except OSError as exc:
        return f"cannot write into {path}: {exc.strerror or type(exc).__name__} in {existing}"
    os.close(handle)
    os.unlink(probe)
    return None


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a fresh temporary path next to `path`; write it, and on success it replaces `path`.

    The new file is flushed to disk before the rename, so a crash leaves the old file or the new
    one, never half of one; on any error (a full disk, an exception in the block) the temporary
    file is removed and `path` is untouched. The file gets the usual permissions (umask), so
    published files stay readable.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    try:
        yield temporary
        with temporary.open("rb+") as written:
            os.fsync(written.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
