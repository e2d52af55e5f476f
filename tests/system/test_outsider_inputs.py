"""What outsiders broke, through the faces: bad inputs that hung or escaped the one-line exit-2
contract, an unwritable --out found after the commit, and one month under three spellings.

Every refusal here exits 2 with one line on stderr, before anything is reserved or written.
Each test failed before its fix (issue 18).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from helpers import WORKSPACE_SPEC
from typer.testing import CliRunner, Result

import dprelease as dp
from dprelease.cli import app
from dprelease.errors import InputError

PRIVACY = "privacy:\n  profile: {kind: constant, bound: 20}\n"


def release_args(ws: Path, **given: str) -> list[str]:
    """`dprelease release` on the workspace (tests/conftest.py) for January, `given` replacing
    options by name (`data=...` for --data)."""
    options = {
        "spec": str(ws / "spec.yaml"),
        "data": str(ws / "visits.parquet"),
        "out": str(ws / "out"),
        "period": "2024-01",
        "ledger": str(ws / "ledger.sqlite"),
        "epsilon": "1",
        "cap": "1",
        **given,
    }
    return ["release", *(item for name, value in options.items() for item in (f"--{name}", value))]


def one_line_refusal(result: Result, ws: Path, *words: str) -> None:
    """Exit 2, one `error:` line naming what is wrong, and nothing reserved or written."""
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr
    assert not (ws / "ledger.sqlite").exists() and not (ws / "out").exists()


def without_blocking(call: Callable[[], Any], fifo: Path, seconds: float = 30) -> Any:
    """`call()`, which must return (or raise) without waiting on `fifo`: if it is still running
    after `seconds`, a writer opens and closes the FIFO so the blocked open returns, and the
    test fails."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # release the blocked reader
        thread.join(seconds)
        pytest.fail(f"blocked on the FIFO {fifo} for {seconds}s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


# --- not a regular file ------------------------------------------------------------------------


@pytest.mark.parametrize("option", ["data", "spec", "config"])
@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".yaml"])
def test_a_fifo_given_as_an_input_file_is_refused_not_waited_on(
    workspace: Path, option: str, suffix: str
) -> None:
    fifo = workspace / f"pipe{suffix}"
    os.mkfifo(fifo)
    args = release_args(workspace, **{option: str(fifo)})
    result = without_blocking(lambda: CliRunner().invoke(app, args), fifo)
    one_line_refusal(result, workspace, str(fifo), "a FIFO (named pipe)", "not a regular file")


def test_a_device_is_refused_as_data(workspace: Path) -> None:
    result = CliRunner().invoke(app, release_args(workspace, data="/dev/zero"))
    one_line_refusal(result, workspace, "'/dev/zero'", "a character device")


def test_the_api_refuses_a_fifo_where_files_are_opened(workspace: Path) -> None:
    fifo = workspace / "pipe.parquet"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="is a FIFO .*give a regular file or a directory"):
        without_blocking(
            lambda: dp.release(fifo, workspace / "spec.yaml", epsilon=1, period="2024-01"), fifo
        )
    with pytest.raises(dp.DPReleaseError, match="spec file .* is a FIFO"):
        without_blocking(lambda: dp.release(workspace / "visits.parquet", fifo, epsilon=1), fifo)
    assert WORKSPACE_SPEC.startswith("release:")  # the workspace's spec, unchanged
    assert pl.read_parquet(workspace / "visits.parquet").height == 5


# --- an unwritable --out is refused before the budget is touched -------------------------------


@pytest.fixture
def unwritable(tmp_path: Path) -> Path:
    """A directory this process cannot create files in: read-only by its mode, or for root
    (whom modes do not stop) a directory of procfs."""
    if os.geteuid() == 0:
        if not Path("/proc/self").is_dir():
            pytest.skip("needs a directory root cannot write into (procfs)")
        return Path("/proc/self")
    read_only = tmp_path / "read-only"
    read_only.mkdir(mode=0o555)
    return read_only


def out_cases(ws: Path, unwritable: Path) -> dict[str, Path]:
    (ws / "a-file").write_text("not a directory")
    return {
        "a file": ws / "a-file",
        "below a file": ws / "a-file" / "out",
        "in a read-only directory": unwritable / "out",
        "below a read-only directory": unwritable / "out" / "2024-01",
    }


def test_an_unwritable_out_is_refused_before_anything_is_reserved(
    workspace: Path, unwritable: Path
) -> None:
    for case, out in out_cases(workspace, unwritable).items():
        existed = out.exists()
        result = CliRunner().invoke(app, release_args(workspace, out=str(out)))
        one_line_refusal(result, workspace, "--out: ", "cannot write")
        assert out.exists() == existed, case
    assert (workspace / "a-file").read_text() == "not a directory"


def test_a_released_slot_stays_re_servable_after_an_unwritable_out(
    workspace: Path, unwritable: Path
) -> None:
    first = CliRunner().invoke(app, release_args(workspace))
    assert first.exit_code == 0, first.output
    published = (workspace / "out" / "release.csv").read_bytes()
    refused = CliRunner().invoke(app, release_args(workspace, out=str(unwritable / "out")))
    assert refused.exit_code == 2 and "--out: " in refused.stderr, refused.output
    again = CliRunner().invoke(app, release_args(workspace, out=str(workspace / "again")))
    assert again.exit_code == 0, again.output
    assert "already released" in again.stdout
    assert (workspace / "again" / "release.csv").read_bytes() == published
    with dp.Ledger(str(workspace / "ledger.sqlite")) as book:
        assert book.status("visits")[0].spent == 1  # charged once, by the first run


def test_publish_checks_its_out_dir_before_reserving(workspace: Path, unwritable: Path) -> None:
    """The library's one-step path (`dprelease.publish.publish`) checks too, for every caller."""
    from helpers import prepare_release

    from dprelease.errors import ConfigError
    from dprelease.publish import publish
    from dprelease.spec import load_spec

    prepared = prepare_release(
        workspace / "visits.parquet", load_spec(workspace / "spec.yaml"), 1, period="2024-01"
    )
    with dp.Ledger(str(workspace / "ledger.sqlite"), mode="create") as book:
        book.ensure_scope("visits", 1, "sequential")
        with pytest.raises(ConfigError, match="^out_dir: cannot write"):
            publish(prepared, ledger=book, out_dir=unwritable / "out")
        assert book.status("visits")[0].spent == 0


def test_dagster_refuses_an_unwritable_public_directory_before_the_ledger(
    tmp_path: Path, unwritable: Path
) -> None:
    import dagster as dg

    from pipelines.definitions import build_definitions
    from pipelines.demo_data import generate_visits
    from pipelines.release_specs import SPECS_DIR
    from pipelines.resources import ConfidentialStore, LedgerResource, PrivacyPolicy, PublicStore

    (tmp_path / "confidential").mkdir()
    generate_visits(n_patients=200).write_parquet(tmp_path / "confidential" / "visits.parquet")
    defs = build_definitions(
        resources={
            "confidential": ConfidentialStore(directory=str(tmp_path / "confidential")),
            "public": PublicStore(directory=str(unwritable / "public")),
            "ledger": LedgerResource(url=str(tmp_path / "ledger.sqlite")),
            "policy": PrivacyPolicy(config_path=str(SPECS_DIR.parent / "privacy.yaml")),
        }
    )
    result = dg.materialize(
        [a for a in defs.assets if isinstance(a, dg.AssetsDefinition)],
        instance=dg.DagsterInstance.ephemeral(),
        resources=dict(defs.resources),
        selection=["visits_by_clinic"],
        partition_key="2024-01",
        raise_on_error=False,
    )
    assert not result.success
    message = result.get_step_failure_events()[0].event_specific_data.error.message
    assert "cannot write" in message and str(unwritable) in message
    assert (
        not (tmp_path / "ledger.sqlite").exists()
        or dp.Ledger(str(tmp_path / "ledger.sqlite")).status() == []
    )


# --- dprelease plan: every row is one noise, so Δ / ε = scale on it -----------------------------

MARGINS_SPEC = """\
release:
  name: m
  source: m
  privacy_unit: pid
  max_rows_per_unit: 2
  group_by:
    - {column: region, domain: {values: [n, s]}}
    - {column: sex, domain: {values: [f, m]}}
  {margins}
  statistics:
    - {name: n, kind: count}
    - {name: cost, kind: sum, column: cost, lower: 18, upper: 99}
    - {name: mean_age, kind: mean, column: age, lower: 18, upper: 99}
    - {name: mean_stay, kind: mean, column: stay, lower: 0, upper: 30}
"""
NUMBER = r"[0-9.e+-]+"


def noise_rows(output: str) -> list[tuple[float, float, float]]:
    """(ε, Δ, scale) of every table row that states all three."""
    import re

    rows = []
    for line in output.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        numbers = [cell for cell in cells if re.fullmatch(NUMBER, cell)]
        if len(numbers) >= 4:  # ε, Δ, scale and ±95%
            rows.append(tuple(float(x) for x in numbers[:3]))
    return rows


@pytest.mark.parametrize("margins", ["margins: [[region], []]", ""], ids=["margins", "cells"])
def test_plan_shows_on_each_row_the_epsilon_its_scale_comes_from(
    tmp_path: Path, margins: str
) -> None:
    """With margins the statistic's total ε sat beside one level's scale; a mean measuring its
    own sum and count showed its whole ε beside the sum's scale. Every row now is one noise."""
    (tmp_path / "spec.yaml").write_text(MARGINS_SPEC.replace("{margins}", margins))
    args = ["plan", "--spec", str(tmp_path / "spec.yaml"), "--epsilon", "1"]
    result = CliRunner(env={"COLUMNS": "160"}).invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = noise_rows(result.stdout)
    levels = 3 if margins else 1
    assert len(rows) == levels * 4  # n, cost, mean_stay's own sum and count, at every level
    for epsilon, delta, scale in rows:
        assert scale == pytest.approx(delta / epsilon, rel=2e-3), result.stdout
    if margins:
        assert "0.08333" in result.stdout  # ε/4 per statistic, /3 per level: 1/12
        assert "all levels" in result.stdout


def test_plan_states_sum_derivations_in_the_columns_units(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(MARGINS_SPEC.replace("{margins}", ""))
    args = ["plan", "--spec", str(tmp_path / "spec.yaml"), "--epsilon", "1"]
    result = CliRunner(env={"COLUMNS": "300"}).invoke(app, args)
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "each clamped to [18, 99]" in text and "Δ = 2 × 99 = 198" in text
    assert "units of" not in text and "18432" not in text


# --- one month, one spelling: the same people are never released twice under another ------------

ALIASES = ["2024-01\n", "２０２４-01", "2024-01 ", "2024-1", "٢٠٢٤-01"]  # newline, full-width, …


@pytest.fixture
def parallel(workspace: Path) -> Path:
    """The workspace's spec with months composed in parallel: each month may spend the cap,
    so a second spelling of January would be a second, independent release of January."""
    spec = workspace / "spec.yaml"
    spec.write_text(
        spec.read_text().replace("every: month}", "every: month, composition: parallel}")
    )
    assert "composition: parallel" in spec.read_text()
    return workspace


def january_only(ws: Path) -> None:
    """The ledger holds January once, charged 1 against the parallel cap of 1."""
    with dp.Ledger(str(ws / "ledger.sqlite")) as book:
        (status,) = book.status("visits")
    assert status.composition == "parallel" and status.cap == 1
    assert status.periods == {"2024-01": 1} and status.releases == 1
    assert status.open_reservations == 0


def test_another_spelling_of_a_month_is_refused_by_the_cli(parallel: Path) -> None:
    first = CliRunner().invoke(app, release_args(parallel, out=str(parallel / "out" / "first")))
    assert first.exit_code == 0, first.output
    for index, alias in enumerate(ALIASES):
        out = parallel / "out" / f"alias{index}"
        result = CliRunner().invoke(app, release_args(parallel, period=alias, out=str(out)))
        assert result.exit_code == 2, (alias, result.output)
        assert result.stderr.startswith("error: --period: ") or "period" in result.stderr
        assert result.stderr.count("\n") == 1, result.stderr
        assert "is not a month of the form YYYY-MM" in result.stderr
        assert not out.exists()
        january_only(parallel)
    again = CliRunner().invoke(app, release_args(parallel, out=str(parallel / "out" / "again")))
    assert again.exit_code == 0 and "already released" in again.stdout, again.output
    january_only(parallel)
    assert (parallel / "out" / "again" / "release.csv").read_bytes() == (
        parallel / "out" / "first" / "release.csv"
    ).read_bytes()


def test_another_spelling_of_a_month_is_refused_by_the_api(parallel: Path) -> None:
    with dp.Ledger(str(parallel / "ledger.sqlite"), mode="create") as book:
        first = dp.release(
            parallel / "visits.parquet", parallel / "spec.yaml", ledger=book, cap=1,
            period="2024-01",
        )  # fmt: skip
        assert first.charged and first.release_id == "visits/2024-01"
        for alias in ALIASES:
            with pytest.raises(dp.DPReleaseError, match="not a month of the form YYYY-MM"):
                dp.release(parallel / "visits.parquet", parallel / "spec.yaml", ledger=book,
                           cap=1, period=alias)  # fmt: skip
    january_only(parallel)


def test_the_parallel_scope_charges_january_once_and_february_on_its_own(parallel: Path) -> None:
    """Per-period spending is keyed by the canonical month: January is charged once, whatever
    was tried, and February (other people, parallel) has its own cap."""
    for period in ["2024-01", *ALIASES, "2024-01", "2024-02"]:
        out = parallel / "out" / str(abs(hash(period)))
        CliRunner().invoke(app, release_args(parallel, period=period, out=str(out)))
    with dp.Ledger(str(parallel / "ledger.sqlite")) as book:
        (status,) = book.status("visits")
        history = [event.release_id for event in book.history("visits") if event.release_id]
    assert status.periods == {"2024-01": 1, "2024-02": 1} and status.releases == 2
    assert set(history) <= {"visits/2024-01", "visits/2024-02"}


# --- keys files through the command line ---------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "content", "words"),
    [
        ("keys.csv", b"", "is empty"),
        ("keys.csv", "region\nnörth\n".encode("latin-1"), "is not UTF-8"),
        ("keys.csv", b'region\n"n\ns"x,y\n"e\n', "is not a well-formed CSV file"),
        ("../../../../etc/passwd", None, "outside the spec's directory"),
    ],
    ids=["empty", "latin-1", "bad quoting", "outside"],
)
def test_a_bad_keys_file_is_one_line_before_anything_is_reserved(
    workspace: Path, file: str, content: bytes | None, words: str
) -> None:
    if content is not None:
        (workspace / file).write_bytes(content)
    spec = workspace / "spec.yaml"
    spec.write_text(spec.read_text().replace("{values: [n, s, e]}", f"{{file: {file!r}}}"))
    result = CliRunner().invoke(app, release_args(workspace))
    one_line_refusal(result, workspace, "release.group_by[0].domain.file: ", words)
    assert "Traceback" not in result.output and "nörth" not in result.output
