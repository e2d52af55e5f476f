"""The one file layout every consortium file shares (keys, shares, the encrypted sum): a JSON
header of public facts, then binary blobs, each in a slot of a size the header states.

Why fixed slots: a ciphertext's serialized size varies by a few hundred bytes from one encryption
to the next (SEAL compresses it), and a file whose size varied could only raise the question of
what it depends on. Every blob of a share sits in a slot whose size follows from the public HE
parameters alone, so every share of a release has the same size whatever the table it holds,
up to its public header (which names the site). Each blob's own length is written in the clear
before its slot: a function of an IND-CPA ciphertext, it reveals nothing, so the slots are
tidiness rather than a privacy measure (PRIVACY.md, "What each party sees").

Files are written atomically (`dprelease.files.atomic_path`): a process killed while writing
leaves the old file or none, never part of one.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dprelease.consortium._errors import ShareError
from dprelease.files import atomic_path

_MAGIC = b"dprelease-consortium\n"
_LENGTH = struct.Struct(">Q")


@dataclass(frozen=True)
class Container:
    """A parsed consortium file: its header, its blobs (unpadded), and the digest of its bytes
    (what the aggregator and the key holder recognise a file by)."""

    header: dict[str, Any]
    blobs: list[bytes]
    digest: str


def encode(header: dict[str, Any], blobs: list[bytes], slot: int | None = None) -> bytes:
    """The file's bytes: magic, header (canonical JSON), then each blob as its length and its
    bytes, zero-padded to `slot` bytes when a slot is given (its size is then in the header)."""
    head = dict(header, slot=slot, blobs=len(blobs))
    text = json.dumps(head, sort_keys=True, separators=(",", ":")).encode()
    parts = [_MAGIC, _LENGTH.pack(len(text)), text]
    for blob in blobs:
        if slot is not None and len(blob) > slot:
            raise ShareError("", f"internal: a ciphertext of {len(blob)} bytes exceeds its slot")
        parts += [_LENGTH.pack(len(blob)), blob]
        if slot is not None:
            parts.append(bytes(slot - len(blob)))
    return b"".join(parts)


def write(path: Path, data: bytes, *, private: bool = False) -> None:
    """Write `data` to `path` atomically; `private` files (a secret key) are readable by their
    owner only, from before their first byte is written."""
    with atomic_path(path) as temporary:
        if private:
            temporary.touch(mode=0o600)
            temporary.chmod(0o600)
        temporary.write_bytes(data)


def decode(data: bytes, name: str) -> Container:
    """Parse a consortium file; ShareError naming `name` for anything that is not one whole."""
    if not data.startswith(_MAGIC):
        raise ShareError(name, "is not a dprelease consortium file")
    at = len(_MAGIC)
    try:
        (size,) = _LENGTH.unpack_from(data, at)
        at += _LENGTH.size
        header = json.loads(data[at : at + size])
        at += size
        slot, count = header["slot"], header["blobs"]
        blobs = []
        for _ in range(count):
            (length,) = _LENGTH.unpack_from(data, at)
            at += _LENGTH.size
            if at + length > len(data) or (slot is not None and length > slot):
                raise ValueError("truncated")
            blobs.append(data[at : at + length])
            at += length if slot is None else slot
    except (ValueError, KeyError, TypeError, struct.error):
        raise ShareError(name, "is truncated or malformed; ask its sender for it again") from None
    if at != len(data) or not isinstance(header, dict):
        raise ShareError(name, "is truncated or malformed; ask its sender for it again")
    return Container(header, blobs, hashlib.sha256(data).hexdigest())


def read(path: Path) -> Container:
    """`decode` of the file at `path`."""
    return decode(Path(path).read_bytes(), str(path))
