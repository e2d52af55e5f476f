"""Writing files that readers may open at any moment: whole or not at all, never half."""

from __future__ import annotations

import os
import re
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dprelease.errors import ConfigError

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
