"""Bad input that used to escape the exit-2 contract: an ε too small or too large to state, a
directory as the ledger, an export or plot target that is not a regular file. Each exits 2 with
one line naming the input, before anything is reserved or written (through the real app)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import polars as pl
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner, Result

import dprelease as dp
from dprelease.cli import app
from dprelease.errors import LedgerError, LedgerNotFound
from dprelease.ledger import Ledger
from dprelease.rational import exact_positive

SPEC = """\
release:
  name: visits
  source: visits
  privacy_unit: pid
  max_rows_per_unit: 100
  period: {column: day, composition: sequential}
  group_by:
    - column: region
      domain: {values: [north, south]}
  statistics:
    - {name: n, kind: count}
"""
PRIVACY = Path(__file__).resolve().parents[1] / "examples" / "case_control.yaml"
UNSTATABLE = ["1e-400", "1e400", "nan", "1/0"]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "spec.yaml").write_text(SPEC)
    pl.DataFrame(
        {
            "pid": [1, 2, 3],
            "region": ["north", "south", "south"],
            "day": pl.Series(["2024-01-03", "2024-01-09", "2024-01-11"]).str.to_date(),
        }
    ).write_parquet(tmp_path / "visits.parquet")
    return tmp_path


@pytest.fixture
def ledger_path(ws: Path) -> Path:
    """A ledger with scope `visits` (cap 1) and one release of January."""
    path = ws / "ledger.sqlite"
    assert cli("release", *_release_args(ws, path), "--epsilon", "1/4", "--cap", "1").exit_code == 0
    return path


def cli(*args: str) -> Result:
    return CliRunner(env={"COLUMNS": "80"}).invoke(app, list(args))


def _release_args(ws: Path, ledger: Path, period: str = "2024-01") -> list[str]:
    return [
        "--spec",
        str(ws / "spec.yaml"),
        "--data",
        str(ws / "visits.parquet"),
        "--out",
        str(ws / "pub" / period),
        "--period",
        period,
        "--ledger",
        str(ledger),
    ]


def one_line_error(result: Result, *words: str) -> str:
    """The exit-2 contract: one `error:` line on stderr, no traceback, naming `words`."""
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    for word in words:
        assert word in result.stderr, result.stderr
    return result.stderr


# -- ε too small or too large to state --------------------------------------------------------


@pytest.mark.parametrize("bad", UNSTATABLE)
@pytest.mark.parametrize("option", ["--epsilon", "--cap"])
def test_release_refuses_an_epsilon_it_cannot_state(ws: Path, option: str, bad: str) -> None:
    args = {"--epsilon": "0.5", "--cap": "1"} | {option: bad}
    ledger = ws / "new.sqlite"
    result = cli("release", *_release_args(ws, ledger), *(x for kv in args.items() for x in kv))
    one_line_error(result, option, repr(bad))
    assert not ledger.exists() and not (ws / "pub").exists()


@pytest.mark.parametrize("bad", UNSTATABLE)
def test_release_into_an_existing_scope_refuses_it_and_charges_nothing(
    ws: Path, ledger_path: Path, bad: str
) -> None:
    before = Ledger(str(ledger_path)).export()["charges"]
    one_line_error(
        cli("release", *_release_args(ws, ledger_path, "2024-02"), "--epsilon", bad), "--epsilon"
    )
    assert Ledger(str(ledger_path)).export()["charges"] == before
    assert not (ws / "pub" / "2024-02").exists()


@pytest.mark.parametrize("bad", UNSTATABLE)
def test_plan_refuses_an_epsilon_it_cannot_state(ws: Path, bad: str) -> None:
    one_line_error(cli("plan", "--spec", str(ws / "spec.yaml"), "--epsilon", bad), "--epsilon")


@pytest.mark.parametrize("bad", UNSTATABLE)
def test_set_cap_refuses_a_cap_it_cannot_state(ledger_path: Path, bad: str) -> None:
    one_line_error(cli("ledger", "set-cap", "visits", bad, "--ledger", str(ledger_path)), "CAP")
    assert Ledger(str(ledger_path)).status("visits")[0].cap == 1


def test_the_statable_range_is_the_range_of_a_double() -> None:
    """The smallest and largest ε accepted print as themselves in every message and manifest."""
    assert exact_positive("2.2250738585072014e-308") == exact_positive(2.2250738585072014e-308)
    assert f"{float(exact_positive('1.7976931348623157e308')):.6g}" == "1.79769e+308"
    for text, words in (("1e-400", "too small"), ("2e308", "too large"), ("1e-310", "too small")):
        with pytest.raises(ValueError, match=words):
            exact_positive(text)


def test_the_api_refuses_an_epsilon_it_cannot_state(ws: Path) -> None:
    spec = dp.ReleaseSpec.from_yaml(ws / "spec.yaml")
    with pytest.raises(dp.DPReleaseError, match="epsilon: ε must be at least"):
        dp.release(ws / "visits.parquet", spec, epsilon="1e-400", period="2024-01")
    with pytest.raises(dp.DPReleaseError, match="epsilon: ε must be at most"):
        dp.plan(spec, "1e400")


def test_a_tiny_statable_epsilon_is_refused_by_the_sampler_in_one_line(ws: Path) -> None:
    """ε = 1e-307 is statable, but Δ/ε = 100/1e-307 is beyond any double: its refusal must
    still be formatted (it was an OverflowError in the message of the sampler's own refusal)."""
    result = cli("plan", "--spec", str(ws / "spec.yaml"), "--epsilon", "1e-307")
    one_line_error(result, "release.statistics[0]", "raise ε")


# -- a directory as the ledger ------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["ledger", "status"],
        ["ledger", "history"],
        ["ledger", "export"],
        ["ledger", "set-cap", "visits", "1"],
        ["ledger", "void", "visits/2024-01", "--reason", "r"],
        ["ledger", "upgrade"],
    ],
)
def test_every_ledger_command_refuses_a_directory_as_the_ledger(
    tmp_path: Path, command: list[str]
) -> None:
    one_line_error(cli(*command, "--ledger", str(tmp_path)), str(tmp_path), "is a directory")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("cap", [[], ["--cap", "1"]])
def test_release_refuses_a_directory_as_the_ledger(ws: Path, cap: list[str]) -> None:
    directory = ws / "ledgers"
    directory.mkdir()
    result = cli("release", *_release_args(ws, directory), "--epsilon", "0.5", *cap)
    one_line_error(result, str(directory), "is a directory")
    assert os.listdir(directory) == [] and not (ws / "pub").exists()


@pytest.mark.parametrize("mode", ["create", "existing", "read"])
def test_the_ledger_constructor_refuses_a_directory(tmp_path: Path, mode: str) -> None:
    for url in (str(tmp_path), f"sqlite:///{tmp_path}"):
        with pytest.raises(LedgerError, match=f"{tmp_path} is a directory") as info:
            Ledger(url, mode=mode)  # type: ignore[arg-type]
        assert not isinstance(info.value, LedgerNotFound)
    assert os.listdir(tmp_path) == []


def test_a_ledger_below_a_file_is_one_line(ws: Path) -> None:
    below_a_file = ws / "spec.yaml" / "ledger.sqlite"
    result = cli("release", *_release_args(ws, below_a_file), "--epsilon", "0.5", "--cap", "1")
    one_line_error(result, f"cannot create a ledger at {below_a_file}")
    assert not (ws / "pub").exists()


def test_a_fifo_as_the_ledger_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "ledger.sqlite"
    os.mkfifo(fifo)
    with pytest.raises(LedgerError, match="is not a regular file"):
        Ledger(str(fifo))
