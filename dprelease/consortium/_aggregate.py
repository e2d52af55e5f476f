"""The aggregator's steps: check the shares and add them under encryption, charging the
consortium's ledger once (`aggregate`); then turn the key holder's decrypted noisy totals into the
release, as a central release is post-processed, and commit it (`publish`).

What the aggregator refuses, from the share headers and its own records alone: a share of another
consortium, spec, period, key or set of public parameters; two shares from one site; a share
from an unknown site; a share that is not a ciphertext of the key; missing sites (beyond t, or at
all unless asked); a different set of shares than the one already summed for this release (a
late or replaced share); any share once the release is published. The ledger is charged exactly
once per release: `reserve` before the sum is written (a re-run resumes the open reservation),
`commit` after the decrypted totals are post-processed.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

from dprelease.consortium import _container
from dprelease.consortium._central import manifest_for, noisy_table, pooled_margins
from dprelease.consortium._errors import ConsortiumError, ShareError
from dprelease.consortium._he import POLY_MODULUS_DEGREE, SECURITY, PublicKey
from dprelease.consortium._plan import Plan, kls_rho
from dprelease.consortium._site import SHARE_FORMAT, differing_fact
from dprelease.files import atomic_path
from dprelease.ledger import Ledger, ReleaseConflict, StoredRelease
from dprelease.loss import Measure, Mechanism
from dprelease.mechanism.noise import default_noise_source
from dprelease.publication import finish
from dprelease.publish import Budget, write_release_files
from dprelease.statement import LedgerRecord

SUM_FORMAT = "dprelease-consortium-sum/1"
TOTALS_FORMAT = "dprelease-consortium-totals/1"


def check_budget(plan: Plan, budget: Budget) -> None:
    """The aggregator's budget must be the consortium's: a zCDP scope, Gaussian noise, ρ as the
    consortium file states it and the plan's protected change (one-line refusals otherwise)."""
    loss = budget.required_loss()
    if loss.measure is not Measure.ZCDP:
        raise ConsortiumError(
            "scope",
            f"scope {budget.scope!r} is a pure-ε scope; consortium releases spend ρ: use a zCDP "
            "scope (distributed discrete Laplace shares cannot be drawn exactly)",
        )
    if budget.mechanism is not Mechanism.GAUSSIAN:
        raise ConsortiumError(
            "release.mechanism",
            "consortium releases add distributed discrete Gaussian noise; remove `mechanism: "
            "laplace`",
        )
    if loss.amount != plan.consortium.rho:
        raise ConsortiumError("consortium.rho", "the scope's ρ for this release differs")
    if budget.change is not plan.change:
        raise ConsortiumError(
            "consortium.neighbours",
            f"the privacy configuration protects {budget.change.value}, the consortium "
            f"{plan.change.value}; make them agree",
        )


@dataclass(frozen=True)
class _Share:
    path: Path
    site: str
    digest: str
    blobs: list[bytes]
    header: dict[str, Any]


def _read_share(path: Path, plan: Plan, key: PublicKey, moduli: int) -> _Share:
    container = _container.read(path)
    header = container.header
    if header.get("format") != SHARE_FORMAT:
        raise ShareError(str(path), "is not a consortium share")
    changed = differing_fact(header, plan.public_facts())
    if changed is not None:
        raise ShareError(
            str(path),
            f"is a share of another {changed} ({header.get(changed)!r}, not "
            f"{plan.public_facts()[changed]!r}); only shares of {plan.release_id} are added",
        )
    if header.get("key_id") != key.key_id:
        raise ShareError(
            str(path), f"is encrypted under key {header.get('key_id')!r}, not {key.key_id!r}"
        )
    if header.get("site") not in plan.consortium.sites:
        raise ShareError(
            str(path), f"comes from {header.get('site')!r}, not a site of the consortium"
        )
    chunks = -(-plan.length // POLY_MODULUS_DEGREE)
    if header.get("moduli") != moduli or len(container.blobs) != moduli * chunks:
        raise ShareError(str(path), "does not hold the ciphertexts this release needs")
    key.check_ciphertexts(container.blobs, moduli, str(path))
    return _Share(path, str(header["site"]), container.digest, container.blobs, header)


def _refuse_copies(by_site: dict[str, _Share]) -> None:
    """Two sites' shares that hold a byte-identical ciphertext: one is a copy of the other's
    (BFV encryption is randomized, so honest shares never collide). A copy would add the other
    site's data twice; a scaled copy is not caught here (PRIVACY.md: shares are confidential to
    the aggregator)."""
    seen: dict[bytes, str] = {}
    for site, share in sorted(by_site.items()):
        for blob in share.blobs:
            other = seen.setdefault(hashlib.sha256(blob).digest(), site)
            if other != site:
                raise ShareError(
                    str(share.path),
                    f"holds a ciphertext of {other!r}'s share; a site sends its own share, "
                    "and only the aggregator reads the shares",
                )


def sum_name(plan: Plan) -> str:
    asset, period = plan.release_id.split("/")
    return f"{plan.consortium.name}__{asset}__{period}__{plan.resolved.hash[:12]}.dpsum"


@dataclass(frozen=True)
class Aggregated:
    """What `aggregate` did: where the encrypted sum is, which sites it holds, and what the
    ledger did ("reserved": charged now; "resumed": the open charge of an earlier run;
    "committed": already released, nothing charged or written)."""

    release_id: str
    sum_path: Path
    sites: tuple[str, ...]
    missing: tuple[str, ...]
    status: Literal["reserved", "resumed", "committed"]


def aggregate(
    plan: Plan,
    key: PublicKey,
    shares: list[Path],
    *,
    ledger: Ledger,
    budget: Budget,
    out: Path,
    allow_missing: bool = False,
    allow_unsafe_noise: bool = False,
    run_id: str | None = None,
) -> Aggregated:
    """Check every share, charge the release once, seal the charge (the sum leaves for the key
    holder before commit, so it can never be voided) and write the encrypted sum into `out`.
    Shares whose noise was seeded (tests) are refused unless `allow_unsafe_noise`."""
    check_budget(plan, budget)
    moduli = plan.moduli_needed(key.moduli, "public key")
    read = [_read_share(p, plan, key, moduli) for p in sorted(shares)]
    by_site: dict[str, _Share] = {}
    for share in read:
        if share.site in by_site and by_site[share.site].digest != share.digest:
            raise ShareError(
                str(share.path),
                f"is a second, different share from {share.site!r} (the other is "
                f"{by_site[share.site].path}); a site sends one share per release",
            )
        if share.header.get("noise_seeded") is not False and not allow_unsafe_noise:
            raise ShareError(
                str(share.path),
                f"{share.site!r} drew its noise share from a seeded (test) source; a release "
                "needs every site's noise from the operating system's CSPRNG: contribute again",
            )
        by_site[share.site] = share
    _refuse_copies(by_site)
    missing = tuple(s for s in plan.consortium.sites if s not in by_site)
    t = plan.consortium.tolerate
    if missing and (not allow_missing or len(missing) > t):
        what = "wait for them" if len(missing) > t else "wait for them, or pass --allow-missing"
        raise ShareError(
            "--shares",
            f"no share from {', '.join(missing)}; {what} (at most tolerate: {t} may be missing)",
        )
    digests = {site: by_site[site].digest for site in sorted(by_site)}
    target = out / sum_name(plan)
    earlier = _container.read(target) if target.exists() else None
    if earlier is not None and earlier.header.get("shares") != digests:
        raise ShareError(
            "--shares",
            f"differ from the shares already summed for {plan.release_id} (a late or replaced "
            "share); the sum is made once per release",
        )
    stored = ledger.stored_release(plan.release_id)
    if stored is not None:
        if earlier is None:
            raise ShareError(
                "--shares",
                f"{plan.release_id} is already published; shares are not accepted after the "
                "release",
            )
        return Aggregated(plan.release_id, target, tuple(digests), missing, "committed")
    reservation = _reserve(plan, budget, ledger, run_id)
    seal = json.dumps({"key_id": key.key_id, "moduli": moduli, "shares": digests}, sort_keys=True)
    if ledger.seal(reservation, seal) != seal:
        raise ShareError(
            "--shares",
            f"differ from the shares (or key) whose sum the ledger sealed for {plan.release_id}; "
            "the sum is made once per release, whatever the key or --out",
        )
    if earlier is None:
        ordered = [by_site[site].blobs for site in digests]
        total = key.add(ordered, moduli)
        sources = sorted({str(by_site[s].header.get("noise_bits")) for s in digests})
        header = {
            "format": SUM_FORMAT,
            **plan.public_facts(),
            "key_id": key.key_id,
            "moduli": moduli,
            "shares": digests,
            "missing": list(missing),
            "engines": sorted({str(by_site[s].header.get("engine")) for s in digests}),
            "noise_bits": sources,
            "noise_seeded": any(bool(by_site[s].header.get("noise_seeded")) for s in digests),
        }
        _container.write(target, _container.encode(header, total))
    status: Literal["reserved", "resumed"] = (
        "reserved" if reservation.status == "reserved" else "resumed"
    )
    return Aggregated(plan.release_id, target, tuple(digests), missing, status)


def _reserve(plan: Plan, budget: Budget, ledger: Ledger, run_id: str | None) -> Any:
    """Charge ρ for the release (or resume its open charge); a new scope is made with its
    terms together with the first charge, as a central release's is."""
    return ledger.reserve(
        plan.release_id,
        budget.scope,
        None if plan.period is None else str(plan.period),
        plan.consortium.rho,
        spec_hash=plan.resolved.hash,
        terms=budget.terms,
        run_id=run_id,
        max_cap=budget.profile_cap,
        new_scope_cap=budget.cap if budget.new_scope else None,
    )


@dataclass(frozen=True)
class Published:
    """A published consortium release: the ledger's stored copy and the files written."""

    release_id: str
    status: Literal["committed now", "already released"]
    stored: StoredRelease
    files: dict[str, Path]


def facts_path(out: Path) -> Path:
    """Where the consortium's facts of the release in folder `out` go: beside the folder
    (`release/` → `release.consortium.json`), which holds the release's own files only."""
    return out.with_name(f"{out.name}.consortium.json")


def consortium_facts(plan: Plan, summed: dict[str, Any]) -> dict[str, Any]:
    """consortium.json: who contributed, what the noise is and what it protects against."""
    sites = sorted(summed["shares"])
    missing = list(summed["missing"])
    t = plan.consortium.tolerate
    return {
        "format": "dprelease-consortium-release/1",
        "release_id": plan.release_id,
        "consortium": plan.consortium.name,
        "sites": list(plan.consortium.sites),
        "contributed": sites,
        "missing": missing,
        "tolerate": t,
        "colluding_sites_tolerated_now": t - len(missing),
        "max_sites_per_unit": plan.consortium.max_sites_per_unit,
        "privacy_unit": _unit_text(plan),
        "noise": (
            "distributed discrete Gaussian: the decrypted total carries the sum of one exact "
            "N_Z(0, share_sigma2) share per contributing site and cell; the guarantee rests on "
            f"the shares of at least {plan.consortium.honest} sites outside any coalition "
            "(Kairouz, Liu & Steinke 2021)"
        ),
        "measurements": [
            {
                "name": n.name,
                **({} if n.label is None else {"level": n.label}),
                "share_sigma2_units_exact": str(n.sigma2),
                "sites_noise": len(sites),
                "rho_exact": str(n.rho),
                "rho_bound": float(
                    kls_rho(n.sigma2, plan.consortium.honest, n.delta1, n.delta2_squared, n.cells)
                ),
                "rho_bound_exact": str(
                    kls_rho(n.sigma2, plan.consortium.honest, n.delta1, n.delta2_squared, n.cells)
                ),
                "delta1_units": n.delta1,
                "delta2_squared_units": n.delta2_squared,
            }
            for n in plan.noise
        ],
        "encryption": {
            "scheme": "BFV (Microsoft SEAL through TenSEAL)",
            "poly_modulus_degree": POLY_MODULUS_DEGREE,
            "coeff_modulus_bits": 218,
            "plain_moduli_used": summed["moduli"],
            "security": SECURITY,
            "key_id": summed["key_id"],
        },
        "share_digests": summed["shares"],
        "beyond_tolerance": _beyond(plan),
    }


def _beyond(plan: Plan) -> list[dict[str, Any]]:
    """The ρ that still holds against c > t sites in the coalition (colluding or missing): the
    same bound with the m − c honest shares left, about ρ·(m − t)/(m − c) (PRIVACY.md, "Beyond
    t"), for c = t + 1 … m − 1."""
    m, t = len(plan.consortium.sites), plan.consortium.tolerate
    rows = []
    for c in range(t + 1, m):
        rho = sum(
            (kls_rho(n.sigma2, m - c, n.delta1, n.delta2_squared, n.cells) for n in plan.noise),
            Fraction(0),
        )
        rows.append({"sites_in_coalition": c, "rho_bound": float(rho), "rho_bound_exact": str(rho)})
    return rows


def _levels_text(plan: Plan) -> str:
    """With margins: that every level was measured with its own shares, as centrally."""
    if plan.resolved.levels is None:
        return ""
    return (
        " (every level, the cells and each margin, with its own shares from its part of ρ, as "
        "a central release splits it; the consistent table is computed from the noisy totals "
        "of every level as in a central release)"
    )


def _unit_text(plan: Plan) -> str:
    unit = plan.resolved.spec.privacy_unit or "each row"
    k = plan.consortium.max_sites_per_unit
    where = "one site only" if k == 1 else f"up to {k} sites (Δ multiplied by {k})"
    return (
        f"{unit} within a site, against coalitions that do not include that site; a person is "
        f"assumed to be in {where} (max_sites_per_unit: {k})"
    )


def publish(
    plan: Plan,
    sum_path: Path,
    totals_path: Path,
    *,
    ledger: Ledger,
    budget: Budget,
    out: Path,
    run_id: str | None = None,
) -> Published:
    """Post-process the decrypted noisy totals into the release, commit it, write its files
    (release.parquet, release.csv, manifest.json) as the folder `out`, and the consortium's facts
    beside it (`facts_path`)."""
    check_budget(plan, budget)
    summed = _container.read(sum_path)
    if summed.header.get("format") != SUM_FORMAT or differing_fact(
        summed.header, plan.public_facts()
    ):
        raise ShareError(str(sum_path), f"is not the encrypted sum of {plan.release_id}")
    totals = json.loads(Path(totals_path).read_text())
    if (
        not isinstance(totals, dict)
        or totals.get("format") != TOTALS_FORMAT
        or totals.get("sum_digest") != summed.digest
    ):
        raise ShareError(str(totals_path), f"are not the decrypted totals of {sum_path}")
    facts = consortium_facts(plan, summed.header)
    stored = ledger.stored_release(plan.release_id)
    status: Literal["committed now", "already released"] = "already released"
    if stored is None:
        reservation = _reserve(plan, budget, ledger, run_id)
        if reservation.status == "committed":
            stored = ledger.stored_copy(reservation)
        else:
            stored = _commit(plan, summed.header, totals, budget, ledger, reservation, facts)
            status = "committed now"
    chosen = None if plan.resolved.publish is None else plan.resolved.publish.formats
    files = write_release_files(stored, out, chosen)
    beside = facts_path(out)
    with atomic_path(beside) as temporary:
        temporary.write_text(json.dumps(facts, indent=2, sort_keys=True) + "\n")
    files["consortium.json"] = beside
    return Published(plan.release_id, status, stored, files)


def _commit(
    plan: Plan,
    summed: dict[str, Any],
    totals: dict[str, Any],
    budget: Budget,
    ledger: Ledger,
    reservation: Any,
    facts: dict[str, Any],
) -> StoredRelease:
    parties = len(summed["shares"])
    allocation = plan.pooled(parties)
    margins = pooled_margins(plan.resolved, allocation)
    levels = plan.by_measurement(totals["totals"])
    table, outcome = noisy_table(plan.resolved, allocation, margins, levels)
    manifest = manifest_for(
        plan.resolved,
        allocation,
        margins,
        outcome,
        plan.change,
        plan.period,
        budget.delta,
        "+".join(summed["engines"]) + " (at each site)",
        "+".join(summed["noise_bits"]) + " (at each site)",
        bool(summed["noise_seeded"]),
        plan.consortium.honest,
    )
    contributed = ", ".join(facts["contributed"])
    missing = ", ".join(facts["missing"]) or "none"
    manifest = manifest.model_copy(
        update={
            "release_id": plan.release_id,
            "ledger": LedgerRecord(
                scope=budget.scope, charge_id=reservation.charge_id, rerelease=reservation.rerelease
            ),
            "privacy_unit": _unit_text(plan),
            "mechanism": (
                f"distributed discrete Gaussian (consortium {plan.consortium.name!r}): the sum of "
                f"the exact noise shares of {parties} sites ({contributed}; missing: {missing}), "
                f"added to their exact aggregates under BFV encryption{_levels_text(plan)}; "
                "only the noisy total was decrypted. ρ holds against the key holder with up to "
                f"{plan.consortium.tolerate - len(facts['missing'])} colluding site(s) "
                "(<release folder>.consortium.json has the details)"
            ),
        }
    )
    # the spec's publication options (sampling error, rounding to a base, reliability rules):
    # post-processing of the noisy table, the rounding's coins from the aggregator's CSPRNG
    table, manifest = finish(table, manifest, plan.resolved, default_noise_source())
    buffer = io.BytesIO()
    table.write_parquet(buffer, statistics=False)
    try:
        return ledger.commit(reservation, buffer.getvalue(), manifest.to_json_dict())
    except ReleaseConflict as conflict:
        return conflict.stored
