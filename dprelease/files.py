"""The files dprelease reads and writes, each one way for every caller.

Reading: privacy configs, release specs and pipeline specs are read by `read_sections` and
validated by pydantic; `error_at_path` turns the first validation problem into the project's
typed error at the bad field's YAML path (`release.statistics[1].upper`), so every file is
reported alike: the file for a missing or unreadable one, line and column for a syntax error,
line and key for a key given twice, the path for a bad value. A file says one thing once:
PyYAML keeps the last of two equal keys silently, so a scope listed twice would get the cap of
whichever came last; `read_yaml`'s loader refuses it.

Models a user builds in Python (a spec, a manifest read back) derive from `ReadableErrors`: their
problems raise pydantic's `ValidationError` as usual, printed without pydantic's documentation
links (a page about pydantic's own error codes that says nothing about a release spec).

Writing: `atomic_path` gives files that readers may open at any moment whole or not at all, and
never renames over a device, a FIFO or a path that names an open file descriptor.
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
from typing import Any, Self, get_args

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError
from pydantic_core.core_schema import ErrorType

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


class DuplicateKey(yaml.YAMLError):
    """A mapping gives one key twice (lines are 1-based)."""

    def __init__(self, key: Any, line: int, first: int) -> None:
        self.key, self.line, self.first = key, line, first
        super().__init__(f"line {line}: key {key!r} given twice (first at line {first})")


class _OneKeyOnce(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that gives a key twice (DuplicateKey).

    Keys are compared as loaded, so `a` and `'a'`, or `yes` and `true` (both True in YAML 1.1),
    are the same key. A merge (`<<: *anchor`) is not a repetition: the keys it brings in are
    overridden by the mapping's own, as YAML defines."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    raise DuplicateKey(key, line, seen[key])
                seen[key] = line
            except TypeError:  # an unhashable key: the base loader refuses it with its mark
                continue
        return super().construct_mapping(node, deep)


def read_yaml(text: str) -> Any:
    """The YAML document in `text`, every mapping's keys given once (else DuplicateKey); raises
    yaml.YAMLError for text that is not YAML."""
    return yaml.load(text, Loader=_OneKeyOnce)  # a SafeLoader: builds plain data only


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
        document = read_yaml(text)
    except DuplicateKey as exc:
        raise error("", f"{path}: {exc}") from None
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


# --------------------------------------------------------------------------- pydantic's errors


_PYDANTIC_ERROR_TYPES = frozenset(get_args(ErrorType))
_LINK = "For further information visit"


class ReadableValidationError(ValidationError):
    """A ValidationError printed without pydantic's documentation links."""

    def __str__(self) -> str:
        return "\n".join(
            line for line in super().__str__().splitlines() if not line.lstrip().startswith(_LINK)
        )


def _details(error: Any) -> InitErrorDetails:
    """One problem of `errors()` as it was raised: pydantic's own types by name, a validator's
    custom type (unknown to pydantic) with its message."""
    kind, context = error["type"], error.get("ctx")
    details: InitErrorDetails = {
        "type": kind
        if kind in _PYDANTIC_ERROR_TYPES
        else PydanticCustomError(kind, error["msg"], context),
        "loc": error["loc"],
        "input": error["input"],
    }
    if context is not None:
        details["ctx"] = context
    return details


def without_links(exc: ValidationError) -> ValidationError:
    """The same problems, printed without pydantic's links."""
    return ReadableValidationError.from_exception_data(
        exc.title, [_details(error) for error in exc.errors(include_url=False)]
    )


class ReadableErrors(BaseModel):
    """Base of the models users construct (`dp.ReleaseSpec(...)`) or validate themselves: a
    problem raises ValidationError without pydantic's links. Nested models are validated by
    their parent, so only the outermost call needs this."""

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise without_links(exc) from None

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Self:
        try:
            return super().model_validate(obj, *args, **kwargs)
        except ValidationError as exc:
            raise without_links(exc) from None


# --------------------------------------------------------------------------- writing

#: Paths that name an open file descriptor (/dev/stdout, /dev/fd/N, /proc/PID/fd/N), not a file.
_DESCRIPTOR_PATH = re.compile(r"/dev/(stdin|stdout|stderr)|/dev/fd/.+|/proc/[^/]+/fd/.+")
_MAX_LINKS = 40  # as the kernel's own limit on a chain of symbolic links


def _names_a_descriptor(path: Path) -> bool:
    """Whether `path`, or a symbolic link on the way from it, names an open file descriptor.

    Renaming over what such a path resolves to (say, the file a shell redirected stdout to)
    would swap the file under whoever holds it open; the check walks the links one by one,
    because resolving them at once yields the redirected file's own, innocent-looking path.
    """
    hop = Path(os.path.abspath(path))
    for _ in range(_MAX_LINKS):
        if _DESCRIPTOR_PATH.fullmatch(str(hop)):
            return True
        if not hop.is_symlink():
            return False
        hop = Path(os.path.abspath(hop.parent / os.readlink(hop)))
    return False  # a loop: writing it fails with its own error


def replaceable_target(path: Path, option: str = "") -> Path:
    """The regular file that writing `path` whole replaces: `path`, or the file a symbolic link
    at `path` points to (the link is kept, as writing through it would).

    Writing whole means renaming a new file over the old one, which must not happen to anything
    but a regular file: renaming over a device (/dev/full; as root, /dev/null) would destroy
    it, over a FIFO silently drop whoever reads it, over /dev/stdout's file swap it under the
    shell. Those, and a directory, are refused with ConfigError at `option` (the option or field
    that named the path).
    """
    target = path.resolve() if path.is_symlink() else path
    if _names_a_descriptor(path):
        kind = "names an open file descriptor (such as /dev/stdout), not a file"
    elif target.is_dir():
        kind = "is a directory"
    elif target.exists() and not target.is_file():
        kind = "is not a regular file (a device, FIFO or socket)"
    else:
        return target
    raise ConfigError(
        option,
        f"{path} {kind}; dprelease writes a file whole, by renaming a new file over the old "
        "one, so give the path of a regular file",
    )


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
def atomic_path(path: Path, option: str = "") -> Iterator[Path]:
    """Yield a fresh temporary path next to `path`; write it, and on success it replaces `path`.

    The new file is flushed to disk before the rename, so a crash leaves the old file or the new
    one, never half of one; on any error (a full disk, an exception in the block) the temporary
    file is removed and `path` is untouched. A `path` that is not a regular file is refused
    first (`replaceable_target`); a symbolic link keeps pointing at the new file. A new file gets
    the usual permissions (umask), so published files stay readable; a replaced file keeps its
    own (a private export stays private).
    """
    target = replaceable_target(path, option)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        kept_mode: int | None = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        kept_mode = None
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp")
    try:
        yield temporary
        with temporary.open("rb+") as written:
            if kept_mode is not None:
                os.fchmod(written.fileno(), kept_mode)
            os.fsync(written.fileno())
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
