"""`dprelease local`: local DP for a sensitive survey question — record a wave (its ε is charged
before anyone answers), serve the questionnaire's randomizer, and plan local beside central DP.
The wave's randomized answers are released by `dprelease release --spec FILE` (a `kind:
randomized` release: post-processing, charged nothing)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer
from rich.console import Console

from dprelease.cli._app import app
from dprelease.cli._common import LedgerOption, cli_errors, ledger_after_checks, parse_epsilon
from dprelease.errors import ConfigError

if TYPE_CHECKING:
    from dprelease.ledger import Ledger
    from dprelease.local import Mechanism

local_app = typer.Typer(
    help="Local DP: answers randomized on the respondent's device; waves and plans (release "
    "the answers with `dprelease release --spec FILE`).",
    no_args_is_help=True,
)
app.add_typer(local_app, name="local")

LocalSpecOption = Annotated[
    Path, typer.Option("--spec", help="Local spec YAML (`wave:`, and its `release:`).")
]


@local_app.command("wave")
@cli_errors
def wave(
    spec: LocalSpecOption,
    ledger_url: LedgerOption = None,
    cap: Annotated[
        str | None,
        typer.Option(
            "--cap", help="Lifetime cap of a new scope, e.g. 2 or 1/3.", show_default=False
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="Privacy YAML: a new scope's cap from its profile."),
    ] = None,
) -> None:
    """Record a wave before collecting: charge its ε to the respondents' scope, then print the
    questionnaire's configuration for the JavaScript randomizer."""
    from dprelease.budget import load_privacy_profiles
    from dprelease.local import js_module_path, load_local_spec, new_scope_cap, record_wave

    loaded = load_local_spec(spec)
    stated = None if cap is None else parse_epsilon(cap, "--cap")
    privacy = None if config is None else load_privacy_profiles(config)

    def checks(existing: Ledger | None) -> None:
        if existing is None:  # a new ledger is created only once the wave can be charged in it
            new_scope_cap(loaded.wave, stated, privacy)

    book, _ = ledger_after_checks(ledger_url, checks)
    with book:
        recorded = record_wave(loaded, ledger=book, cap=stated, privacy=privacy)
    console = Console(highlight=False, soft_wrap=True)
    console.print(recorded.describe())
    console.print(f"questionnaire randomizer: {js_module_path()}")
    console.print("its configuration (pass it to makeRandomizer or randomize):")
    typer.echo(json.dumps(loaded.wave.config()))


@local_app.command("plan")
@cli_errors
def plan(
    respondents: Annotated[int, typer.Option("--respondents", help="People asked (n).")],
    categories: Annotated[int, typer.Option("--categories", help="Answers allowed (k).")],
    epsilon: Annotated[str, typer.Option("--epsilon", help="ε of each answer, e.g. 1 or 1/2.")],
    mechanism: Annotated[
        str | None,
        typer.Option("--mechanism", help="krr, oue or olh (default: the variance rule's)."),
    ] = None,
    target: Annotated[
        float | None,
        typer.Option("--target", help="A share's wanted 95% margin, e.g. 0.02: n it needs."),
    ] = None,
) -> None:
    """The margin of a count and a share under local DP beside central DP at the same ε."""
    from dprelease.local import plan as plan_local

    if mechanism is not None and mechanism not in ("krr", "oue", "olh"):
        raise ConfigError("--mechanism", f"choose krr, oue or olh, not {mechanism!r}")
    chosen = parse_epsilon(epsilon, "--epsilon")
    result = plan_local(
        respondents,
        categories,
        chosen,
        mechanism=cast("Mechanism | None", mechanism),
        target=target,
    )
    for line in result.lines():
        typer.echo(line)


@local_app.command("js")
@cli_errors
def js(
    spec: Annotated[
        Path | None,
        typer.Option("--spec", help="Also print this wave's configuration for the module."),
    ] = None,
) -> None:
    """Print the path of the JavaScript randomizer to serve with a web questionnaire."""
    from dprelease.local import js_module_path

    typer.echo(str(js_module_path()))
    if spec is not None:
        from dprelease.local import load_local_spec

        typer.echo(json.dumps(load_local_spec(spec).wave.config()))
