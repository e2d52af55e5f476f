"""Additively homomorphic encryption of integer vectors: BFV from Microsoft SEAL, through
TenSEAL (the `consortium` extra). Nothing cryptographic is written here: keys, encryption,
addition and decryption are the library's; this module only chooses parameters, encodes
integers as residues and keeps every ciphertext in a slot of a public size.

Parameters (docs/consortium.md says why):
- poly modulus degree N = 8192: 8192 integers per ciphertext (batching);
- coefficient modulus: SEAL's `CoeffModulus.BFVDefault(8192)` (43+43+44+44+44 = 218 bits), the
  largest the HomomorphicEncryption.org standard allows at N = 8192 for 128-bit classical
  security; SEAL refuses larger ones at that security level;
- plaintext moduli: three 60-bit primes p ≡ 1 (mod 2N) from SEAL's `PlainModulus.Batching`,
  each its own BFV context and key pair. A vector of integers is encrypted as its residues
  modulo the first k of them (CRT), k chosen by `moduli_needed` from public bounds, so the sum
  over every site decodes exactly: a cell holds any integer in (−P/2, P/2), P = p_1⋯p_k.
Fresh ciphertexts have ~106 bits of noise budget; a sum of 1001 of them still ~101 (measured),
so additions never come near failing decryption.

Randomness: SEAL draws encryption and key randomness from its default PRNG (Blake2xb, or
SHAKE256), seeded from the operating system (`std::random_device` on /dev/urandom; getrandom in
SEAL 4); no seed is ever set here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from dprelease.consortium._container import Container, decode, encode
from dprelease.consortium._errors import ShareError

POLY_MODULUS_DEGREE = 8192
PLAIN_MODULUS_BITS = 60
MODULI = 3
SECURITY = "128-bit classical (HomomorphicEncryption.org standard, SEAL's BFVDefault)"
_PUBLIC_FORMAT = "dprelease-consortium-public-key/1"
_SECRET_FORMAT = "dprelease-consortium-secret-key/1"
#: A ciphertext (2 polynomials of N coefficients modulo the 4 data primes, 8 bytes each) is at
#: most this big serialized: SEAL compresses it with zstd, whose output is at most its input
#: plus 1/256 of it, and TenSEAL's wrapper and SEAL's header add less than 4 KiB.
_RAW = 2 * POLY_MODULUS_DEGREE * 4 * 8
SLOT = _RAW + _RAW // 256 + 4096


def _tenseal() -> Any:
    try:
        import tenseal  # type: ignore[import-untyped]
        import tenseal.sealapi  # type: ignore[import-untyped]  # noqa: F401  (the primes)
    except ModuleNotFoundError:
        raise ShareError(
            "", "consortium releases need TenSEAL: pip install 'dprelease[consortium]'"
        ) from None
    return tenseal


def _context(ts: Any, prime: int) -> Any:
    return ts.context(
        ts.SCHEME_TYPE.BFV, poly_modulus_degree=POLY_MODULUS_DEGREE, plain_modulus=prime
    )


def _public_bytes(context: Any) -> bytes:
    return bytes(
        context.serialize(
            save_public_key=True,
            save_secret_key=False,
            save_galois_keys=False,
            save_relin_keys=False,
        )
    )


def keygen() -> tuple[bytes, bytes]:
    """A fresh key pair: (public key file, secret key file). The public file is for every
    party; the secret one stays with the key holder."""
    ts = _tenseal()
    primes = [
        m.value()
        for m in ts.sealapi.PlainModulus.Batching(
            POLY_MODULUS_DEGREE, [PLAIN_MODULUS_BITS] * MODULI
        )
    ]
    contexts = [_context(ts, p) for p in primes]
    public = [_public_bytes(c) for c in contexts]
    header = {
        "format": _PUBLIC_FORMAT,
        "poly_modulus_degree": POLY_MODULUS_DEGREE,
        "plain_moduli": [str(p) for p in primes],
        "coeff_modulus_bits": 218,
        "security": SECURITY,
    }
    public_file = encode(header, public)
    key_id = key_id_of(public_file)
    secret = [bytes(c.serialize(save_secret_key=True)) for c in contexts]
    secret_file = encode({**header, "format": _SECRET_FORMAT, "key_id": key_id}, secret)
    return public_file, secret_file


def key_id_of(public_file: bytes) -> str:
    """A public key's id: the first 16 hex digits of the SHA-256 of its file."""
    return hashlib.sha256(public_file).hexdigest()[:16]


def _moduli_of(container: Container, name: str) -> list[int]:
    header = container.header
    if header.get("poly_modulus_degree") != POLY_MODULUS_DEGREE:
        raise ShareError(name, "was made with other HE parameters than this dprelease uses")
    return [int(p) for p in header["plain_moduli"]]


@dataclass(frozen=True)
class PublicKey:
    """The consortium's public key: what a site encrypts with and the aggregator adds under."""

    moduli: tuple[int, ...]
    key_id: str
    _contexts: tuple[bytes, ...]

    @classmethod
    def parse(cls, data: bytes, name: str) -> PublicKey:
        container = decode(data, name)
        if container.header.get("format") != _PUBLIC_FORMAT:
            raise ShareError(name, "is not a consortium public key (give public.key)")
        moduli = _moduli_of(container, name)
        return cls(tuple(moduli), key_id_of(data), tuple(container.blobs))

    @cached_property
    def contexts(self) -> list[Any]:
        ts = _tenseal()
        return [ts.context_from(blob) for blob in self._contexts]

    def encrypt(self, values: Sequence[int], k: int) -> list[bytes]:
        """`values` encrypted as residues modulo the first k primes, N per ciphertext (the last
        chunk padded with zeros): k·⌈len/N⌉ ciphertexts, each in its own slot."""
        ts = _tenseal()
        out = []
        for prime, context in zip(self.moduli[:k], self.contexts, strict=False):
            half = prime // 2
            residues = [v % prime for v in values]
            centred = [r - prime if r > half else r for r in residues]
            for chunk in _chunks(centred):
                out.append(bytes(ts.bfv_vector(context, chunk).serialize()))
        return out

    def add(self, shares: Sequence[Sequence[bytes]], k: int) -> list[bytes]:
        """The ciphertext-wise sum of several shares' ciphertexts (each share: the blobs of
        `encrypt`), as blobs: addition under encryption, nothing decrypted."""
        ts = _tenseal()
        per_prime = len(shares[0]) // k
        total = []
        for index in range(len(shares[0])):
            context = self.contexts[index // per_prime]
            acc = ts.bfv_vector_from(context, shares[0][index])
            for share in shares[1:]:
                acc += ts.bfv_vector_from(context, share[index])
            total.append(bytes(acc.serialize()))
        return total

    def check_ciphertexts(self, blobs: Sequence[bytes], k: int, name: str) -> None:
        """ShareError naming `name` unless every blob parses as a BFV vector of N slots under
        this key's parameters (what the aggregator can check without the secret key)."""
        ts = _tenseal()
        per_prime = len(blobs) // k
        for index, blob in enumerate(blobs):
            try:
                vector = ts.bfv_vector_from(self.contexts[index // per_prime], blob)
                ok = vector.size() == POLY_MODULUS_DEGREE
            except Exception:  # TenSEAL raises plain exceptions for bytes it cannot parse
                ok = False
            if not ok:
                raise ShareError(name, f"ciphertext {index} is not a BFV ciphertext of this key")


@dataclass(frozen=True)
class SecretKey:
    """The key holder's secret key (the same contexts, with their secret keys)."""

    moduli: tuple[int, ...]
    key_id: str
    _contexts: tuple[bytes, ...]

    @classmethod
    def parse(cls, data: bytes, name: str) -> SecretKey:
        container = decode(data, name)
        if container.header.get("format") != _SECRET_FORMAT:
            raise ShareError(name, "is not a consortium secret key (give secret.key)")
        moduli = _moduli_of(container, name)
        return cls(tuple(moduli), str(container.header["key_id"]), tuple(container.blobs))

    def decrypt(self, blobs: Sequence[bytes], k: int, length: int) -> list[int]:
        """The `length` integers the blobs encrypt (residues modulo the first k primes,
        recombined by the CRT into (−P/2, P/2))."""
        ts = _tenseal()
        per_prime = len(blobs) // k
        residues: list[list[int]] = []
        for j in range(k):
            context = ts.context_from(self._contexts[j])
            values: list[int] = []
            for blob in blobs[j * per_prime : (j + 1) * per_prime]:
                values += ts.bfv_vector_from(context, blob).decrypt()
            residues.append(values[:length])
        return crt(residues, self.moduli[:k])


def crt(residues: Sequence[Sequence[int]], moduli: Sequence[int]) -> list[int]:
    """The integers x in (−P/2, P/2), P = ∏ moduli, with x ≡ residues[j] (mod moduli[j])."""
    product = 1
    for p in moduli:
        product *= p
    weights = []
    for p in moduli:
        rest = product // p
        weights.append(rest * pow(rest, -1, p))
    half = product // 2
    out = []
    for column in zip(*residues, strict=True):
        x = sum(r * w for r, w in zip(column, weights, strict=True)) % product
        out.append(x - product if x > half else x)
    return out


def _chunks(values: list[int]) -> list[list[int]]:
    """`values` in chunks of N, the last padded with zeros: every ciphertext holds N slots."""
    n = POLY_MODULUS_DEGREE
    chunks = [values[i : i + n] for i in range(0, max(len(values), 1), n)]
    chunks[-1] = chunks[-1] + [0] * (n - len(chunks[-1]))
    return chunks
