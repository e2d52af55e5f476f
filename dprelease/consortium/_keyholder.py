"""The key holder's steps: make the key pair, and decrypt the one encrypted sum of a release.

The key holder never receives a site's share, only the aggregator's sum, and decrypts one sum
per release: its log (next to the secret key) refuses a second, different ciphertext for a
release it has already decrypted, so even an aggregator that deviated could not have a single
site's share decrypted in place of a sum it already had decrypted. What comes out is the
noisy total per cell and measurement: already differentially private.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dprelease.consortium import _container
from dprelease.consortium._aggregate import SUM_FORMAT, TOTALS_FORMAT
from dprelease.consortium._errors import ShareError
from dprelease.consortium._he import SecretKey, keygen
from dprelease.files import atomic_path

PUBLIC_KEY = "public.key"
SECRET_KEY = "secret.key"
LOG = "decrypted.jsonl"


def make_keys(directory: Path) -> tuple[Path, Path]:
    """A fresh key pair in `directory`: public.key (for every party) and secret.key (owner-only
    permissions). Refuses to replace an existing secret key: shares made under it would become
    undecryptable."""
    public_path, secret_path = directory / PUBLIC_KEY, directory / SECRET_KEY
    if secret_path.exists():
        raise ShareError(
            str(secret_path), "exists already; keep it (shares are encrypted under its key)"
        )
    public, secret = keygen()
    _container.write(secret_path, secret, private=True)
    _container.write(public_path, public)
    return public_path, secret_path


@dataclass(frozen=True)
class Decrypted:
    release_id: str
    out: Path
    sites: tuple[str, ...]


def _logged(log: Path) -> dict[tuple[str, str], str]:
    """The sums decrypted so far, by (consortium, release id)."""
    if not log.exists():
        return {}
    entries = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return {(e.get("consortium", ""), e["release_id"]): e["sum_digest"] for e in entries}


def decrypt(secret_path: Path, sum_path: Path, out: Path, *, log: Path | None = None) -> Decrypted:
    """Decrypt the encrypted sum at `sum_path` into the noisy totals file `out`."""
    key = SecretKey.parse(Path(secret_path).read_bytes(), str(secret_path))
    summed = _container.read(sum_path)
    header: dict[str, Any] = summed.header
    if header.get("format") != SUM_FORMAT:
        raise ShareError(str(sum_path), "is not an encrypted sum of a consortium release")
    if header.get("key_id") != key.key_id:
        raise ShareError(
            str(sum_path), f"is encrypted under key {header.get('key_id')!r}, not this one"
        )
    sites, total_sites = header["shares"], header["sites"]
    if len(sites) < len(total_sites) - header["tolerate"]:
        raise ShareError(str(sum_path), "sums fewer sites than the consortium tolerates")
    release_id = header["release_id"]
    slot = (str(header["consortium"]), str(release_id))
    log = log or Path(secret_path).with_name(LOG)
    decrypted = _logged(log)
    if decrypted.get(slot, summed.digest) != summed.digest:
        raise ShareError(
            str(sum_path),
            f"is a different ciphertext for {release_id}, whose sum was decrypted already; one "
            "sum is decrypted per release",
        )
    length = sum(m["cells"] for m in header["measurements"])
    values = key.decrypt(summed.blobs, header["moduli"], length)
    totals: dict[str, list[int]] = {}
    at = 0
    for m in header["measurements"]:  # a measurement's margins follow its cells
        totals.setdefault(m["name"], []).extend(values[at : at + m["cells"]])
        at += m["cells"]
    document = {
        "format": TOTALS_FORMAT,
        "release_id": release_id,
        "consortium": header["consortium"],
        "sum_digest": summed.digest,
        "sites": sorted(sites),
        "totals": totals,
    }
    with atomic_path(out) as temporary:
        temporary.write_text(json.dumps(document, sort_keys=True) + "\n")
    if slot not in decrypted:
        entry = {"consortium": slot[0], "release_id": release_id, "sum_digest": summed.digest}
        with log.open("a") as appended:
            appended.write(json.dumps(entry, sort_keys=True) + "\n")
    return Decrypted(release_id, out, tuple(sorted(sites)))
