"""`dprelease consortium …`: a release pooled from several sites without a trusted curator.

    keygen      the key holder: a public key for everyone, a secret key kept
    contribute  each site: exact aggregates + a noise share, encrypted, as one share file
    aggregate   the aggregator: checks and adds the shares, charges the ledger once
    decrypt     the key holder: decrypts the sum only (already noisy)
    publish     the aggregator: post-processing, the ledger's commit, the release files

Each command parses, calls `dprelease.consortium` and prints; docs/consortium.md walks through.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dprelease.cli._app import app
from dprelease.cli._common import (
    CLI_WORDS_FOR_BUDGET,
    LedgerOption,
    PeriodOption,
    SpecOption,
    cli_errors,
    ledger_after_checks,
    parse_epsilon,
)

if TYPE_CHECKING:
    from dprelease.consortium import Plan, PublicKey
    from dprelease.ledger import Ledger
    from dprelease.publish import Budget

consortium_app = typer.Typer(
    name="consortium",
    help="A release pooled from several sites' encrypted shares, without a trusted curator.",
    no_args_is_help=True,
)
app.add_typer(consortium_app)

ConsortiumOption = Annotated[
    Path, typer.Option("--consortium", help="Consortium YAML (`consortium:` sites, rho, ...).")
]
PublicKeyOption = Annotated[
    Path, typer.Option("--public-key", help="The consortium's public.key (from keygen).")
]
ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", help="Privacy YAML of the consortium's scope (a zcdp profile)."),
]
CapOption = Annotated[
    str | None, typer.Option("--cap", help="Lifetime ρ cap of a new scope.", show_default=False)
]


def _plan(consortium: Path, spec: Path, period: str | None) -> Plan:
    from dprelease.consortium import load_consortium, plan_release
    from dprelease.spec import load_spec

    return plan_release(load_consortium(consortium), load_spec(spec), period)


def _public_key(path: Path) -> PublicKey:
    from dprelease.consortium import PublicKey

    return PublicKey.parse(path.read_bytes(), str(path))


def _ledger_and_budget(
    plan: Plan, ledger_url: str | None, config: Path | None, cap: str | None
) -> tuple[Ledger, Budget]:
    """The aggregator's ledger (created only once every check passed) and its budget."""
    from dprelease.budget import load_privacy_profiles
    from dprelease.consortium import check_budget
    from dprelease.publish import Options, decide_budget

    privacy = None if config is None else load_privacy_profiles(config)

    def checks(existing: Ledger | None) -> Budget:
        budget = decide_budget(
            plan.resolved,
            scope=plan.consortium.ledger_scope,
            privacy=privacy,
            ledger=existing,
            new_ledger=existing is None,
            rho=plan.consortium.rho,
            cap=None if cap is None else parse_epsilon(cap, "--cap"),
            options=Options(**CLI_WORDS_FOR_BUDGET),
        )
        check_budget(plan, budget)
        return budget

    book, budget = ledger_after_checks(ledger_url, checks)
    if budget.new_scope:
        typer.echo(
            f"new budget scope {budget.scope!r}: lifetime cap ρ = {budget.cap} "
            f"({budget.composition})",
            err=True,
        )
    return book, budget


@consortium_app.command()
@cli_errors
def keygen(
    out: Annotated[Path, typer.Option("--out", help="Directory for public.key and secret.key.")],
) -> None:
    """The key holder: make the consortium's key pair (give public.key to every party)."""
    from dprelease.consortium import make_keys

    public, secret = make_keys(out)
    typer.echo(f"public key: {public} (give it to every site and the aggregator)")
    typer.echo(f"secret key: {secret} (keep it; only the key holder decrypts, once per release)")


@consortium_app.command()
@cli_errors
def contribute(
    consortium: ConsortiumOption,
    spec: SpecOption,
    site: Annotated[str, typer.Option("--site", help="This site's name in the consortium.")],
    data: Annotated[Path, typer.Option("--data", help="This site's confidential input.")],
    public_key: PublicKeyOption,
    out: Annotated[Path, typer.Option("--out", help="Directory the share file is written to.")],
    period: PeriodOption = None,
    store: Annotated[
        Path,
        typer.Option("--store", help="Where this site keeps its shares (a re-run resends them)."),
    ] = Path(".dprelease/consortium-shares"),
    engine: Annotated[str | None, typer.Option("--engine", help="polars or spark.")] = None,
) -> None:
    """A site: encrypt its exact aggregates plus its noise share into one share file."""
    from dprelease.consortium import contribute as contribute_share

    plan = _plan(consortium, spec, period)
    done = contribute_share(
        plan, site, _public_key(public_key), data, store=store, out=out, engine=engine
    )
    how = "drawn now" if done.status == "drawn" else "the stored share of an earlier run, resent"
    typer.echo(f"{plan.release_id}: share of {site} ({how}): {done.out} ({done.size} bytes)")


@consortium_app.command()
@cli_errors
def aggregate(
    consortium: ConsortiumOption,
    spec: SpecOption,
    public_key: PublicKeyOption,
    shares: Annotated[
        list[Path],
        typer.Option("--shares", help="A directory of shares (repeat it: one outbox per site)."),
    ],
    out: Annotated[Path, typer.Option("--out", help="Directory for the encrypted sum.")],
    period: PeriodOption = None,
    ledger_url: LedgerOption = None,
    config: ConfigOption = None,
    cap: CapOption = None,
    allow_missing: Annotated[
        bool,
        typer.Option("--allow-missing", help="Go on without at most `tolerate` missing sites."),
    ] = False,
) -> None:
    """The aggregator: check and add the shares under encryption; charge the ledger once."""
    from dprelease.consortium import aggregate as add_shares

    plan = _plan(consortium, spec, period)
    key = _public_key(public_key)
    files = sorted(
        p for folder in shares for p in folder.glob("*.dpshare") if not p.name.startswith(".")
    )
    book, budget = _ledger_and_budget(plan, ledger_url, config, cap)
    with book:
        done = add_shares(
            plan, key, files, ledger=book, budget=budget, out=out, allow_missing=allow_missing
        )
    if done.status == "committed":
        typer.echo(f"{done.release_id}: already published from these shares; nothing to do")
        return
    missing = f"; missing: {', '.join(done.missing)}" if done.missing else ""
    charged = "charged" if done.status == "reserved" else "charge of an earlier run resumed"
    typer.echo(
        f"{done.release_id}: sum of {len(done.sites)} shares ({', '.join(done.sites)}{missing}); "
        f"ρ = {plan.consortium.rho} {charged} to scope {budget.scope!r}"
    )
    typer.echo(f"encrypted sum for the key holder: {done.sum_path}")


@consortium_app.command()
@cli_errors
def decrypt(
    secret_key: Annotated[Path, typer.Option("--secret-key", help="The key holder's secret.key.")],
    sum_path: Annotated[Path, typer.Option("--sum", help="The aggregator's encrypted sum.")],
    out: Annotated[Path, typer.Option("--out", help="File for the noisy totals (JSON).")],
) -> None:
    """The key holder: decrypt a release's encrypted sum (once) into its noisy totals."""
    from dprelease.consortium import decrypt as decrypt_sum

    done = decrypt_sum(secret_key, sum_path, out)
    typer.echo(f"{done.release_id}: noisy totals of {', '.join(done.sites)}: {done.out}")


@consortium_app.command()
@cli_errors
def publish(
    consortium: ConsortiumOption,
    spec: SpecOption,
    sum_path: Annotated[Path, typer.Option("--sum", help="The encrypted sum (from aggregate).")],
    totals: Annotated[Path, typer.Option("--totals", help="The key holder's noisy totals.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for the published files.")],
    period: PeriodOption = None,
    ledger_url: LedgerOption = None,
    config: ConfigOption = None,
    cap: CapOption = None,
) -> None:
    """The aggregator: post-process the noisy totals, commit the release, write its files."""
    from dprelease.consortium import publish as publish_release

    plan = _plan(consortium, spec, period)
    book, budget = _ledger_and_budget(plan, ledger_url, config, cap)
    with book:
        done = publish_release(plan, sum_path, totals, ledger=book, budget=budget, out=out)
    typer.echo(f"{done.release_id}: {done.status}; files in {out}: {', '.join(done.files)}")
