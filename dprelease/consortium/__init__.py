"""Consortium releases: several sites, one pooled table, no trusted curator.

    keys = make_keys(Path("keyholder"))                                    # the key holder
    plan = plan_release(load_consortium("consortium.yaml"), load_spec("spec.yaml"), "2025-03")
    contribute(plan, "north", public_key, data, store=..., out=...)        # each site
    aggregate(plan, public_key, shares, ledger=..., budget=..., out=...)   # the aggregator
    decrypt(secret_path, sum_path, totals_path)                            # the key holder
    publish(plan, sum_path, totals_path, ledger=..., budget=..., out=...)  # the aggregator

Each site adds its exact aggregates and an exact discrete Gaussian noise share and encrypts them
(BFV, TenSEAL); the aggregator adds the ciphertexts and charges the ledger once; the key holder
decrypts only the sum, which is already noisy; post-processing is the central release's (with
margins: every level measured with its own shares, then the consistent table). Files are the
transport. docs/consortium.md walks through it; PRIVACY.md states the threat model.
A use case like `publish/` (floor 4): it calls the mechanism only through `_central`.
"""

from dprelease.consortium._aggregate import (
    Aggregated,
    Published,
    aggregate,
    check_budget,
    publish,
    sum_name,
)
from dprelease.consortium._config import Consortium, load_consortium, parse_consortium
from dprelease.consortium._errors import ConsortiumError, ShareError
from dprelease.consortium._he import PublicKey, SecretKey
from dprelease.consortium._keyholder import Decrypted, decrypt, make_keys
from dprelease.consortium._plan import Plan, kls_rho, plan_release, share_sigma2
from dprelease.consortium._site import Contributed, contribute, share_name

__all__ = [
    "Aggregated",
    "Consortium",
    "ConsortiumError",
    "Contributed",
    "Decrypted",
    "Plan",
    "PublicKey",
    "Published",
    "SecretKey",
    "ShareError",
    "aggregate",
    "check_budget",
    "contribute",
    "decrypt",
    "kls_rho",
    "load_consortium",
    "make_keys",
    "parse_consortium",
    "plan_release",
    "publish",
    "share_name",
    "share_sigma2",
    "sum_name",
]
