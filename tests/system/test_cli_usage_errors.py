"""A mistyped command line is one `error:` line too (exit 2), never click's usage box, and an
empty `--scope ""` is refused instead of quietly meaning the spec's own scope."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, invoke_cli, one_line_error, release_args

#: Every command, as typed after `dprelease`, with the arguments it needs to get to the flag.
COMMANDS = [
    ["release"],
    ["plan"],
    ["epsilon"],
    ["ledger", "status"],
    ["ledger", "history"],
    ["ledger", "export"],
    ["ledger", "set-cap", "s", "1"],
    ["ledger", "void", "r/p"],
    ["ledger", "upgrade"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_an_unknown_flag_is_one_line_naming_it_and_help(command: list[str]) -> None:
    result = invoke_cli(*command, "--bogus")
    line = one_line_error(result, "--bogus", f"dprelease {' '.join(command[:2])}")
    assert "--help" in line and "Usage:" not in result.output


def test_a_typo_of_a_flag_is_told_its_likely_spelling() -> None:
    line = one_line_error(invoke_cli("release", "--epsilonn", "1"), "--epsilonn")
    assert "--epsilon" in line.replace("--epsilonn", "")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["release", "--spec", "x.yaml"], "--data"),  # a required option left out
        (["plan", "--spec", "x.yaml", "--releases", "two"], "--releases"),  # not an integer
        (["ledger", "set-cap"], "scope"),  # a missing argument
        (["ledger", "stat"], "stat"),  # a command that does not exist
        (["plan", "--spec"], "--spec"),  # an option without its value
    ],
)
def test_other_usage_errors_are_one_line(args: list[str], words: str) -> None:
    line = one_line_error(invoke_cli(*args), words)
    assert "--help" in line


def test_the_installed_command_says_it_in_one_line_too(tmp_path: Path) -> None:
    """Through the installed `dprelease` script: the exit code and stderr users see."""
    done = subprocess.run(
        [Path(sys.executable).parent / "dprelease", "ledger", "status", "--bogus"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ")


def test_help_and_a_bare_command_still_show_help() -> None:
    assert invoke_cli("--help").exit_code == 0 and "Usage:" in invoke_cli("--help").stdout
    assert "set-cap" in invoke_cli("ledger").output  # no_args_is_help: the group's help


def test_an_empty_scope_is_refused_by_release_not_read_as_the_specs(workspace: Path) -> None:
    args = release_args(workspace, "2024-01")
    result = invoke_cli("release", *args, "--epsilon", "1/4", "--cap", "1", "--scope", "")
    one_line_error(result, "--scope")
    assert not (workspace / "ledger.sqlite").exists()  # refused before any ledger was made


@pytest.mark.parametrize("command", ["plan", "epsilon"])
def test_an_empty_scope_is_refused_by_plan_and_epsilon(workspace: Path, command: str) -> None:
    config = ["--config", str(ROOT / "pipelines" / "privacy.yaml")]
    args = ["--spec", str(workspace / "spec.yaml"), *config] if command == "plan" else config
    one_line_error(invoke_cli(command, *args, "--scope", ""), "--scope")


def test_the_release_help_the_package_and_its_description_name_every_kind() -> None:
    """`dprelease release --help`, the package's docstring and pyproject's description said
    "counts and sums" after means, shares and quantiles came: each names every statistic kind
    the library releases (`KINDS`)."""
    import tomllib

    import dprelease
    from dprelease.mechanism.kinds import KINDS

    help_text = " ".join(invoke_cli("release", "--help", columns=200).stdout.split())
    description = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["description"]
    for where, text in (
        ("release --help", help_text),
        ("dprelease.__doc__", " ".join((dprelease.__doc__ or "").split())),
        ("pyproject description", description),
    ):
        for kind in KINDS:
            assert any(name in text for name in kind.names), (where, kind.names, text[:200])
