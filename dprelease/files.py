"""Writing files that readers may open at any moment: whole or not at all, never half."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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
