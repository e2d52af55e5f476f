"""Bad input that used to escape the exit-2 contract: an ε too small or too large to state, a
directory as the ledger, an export or plot target that is not a regular file. Each exits 2 with
one line naming the input, before anything is reserved or written (through the real app)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from helpers import ROOT, invoke_cli, one_line_error, release_args, write_visits
from pydantic import ValidationError

import dprelease as dp
from dprelease.errors import LedgerError, LedgerNotFound
from dprelease.ledger import Ledger
from dprelease.loss import exact_positive

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
PRIVACY = ROOT / "examples" / "case_control.yaml"
UNSTATABLE = ["1e-400", "1e400", "nan", "1/0"]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "spec.yaml").write_text(SPEC)
    write_visits(
        tmp_path,
        ["2024-01-03", "2024-01-09", "2024-01-11"],
        pid=[1, 2, 3],
        region=["north", "south", "south"],
    )
    return tmp_path


@pytest.fixture
def ledger_path(ws: Path) -> Path:
    """A ledger with scope `visits` (cap 1) and one release of January."""
    path = ws / "ledger.sqlite"
    assert (
        invoke_cli(
            "release", *release_args(ws, "2024-01", ledger=path), "--epsilon", "1/4", "--cap", "1"
        ).exit_code
        == 0
    )
    return path


# -- ε too small or too large to state --------------------------------------------------------


@pytest.mark.parametrize("bad", UNSTATABLE)
@pytest.mark.parametrize("option", ["--epsilon", "--cap"])
def test_release_refuses_an_epsilon_it_cannot_state(ws: Path, option: str, bad: str) -> None:
    args = {"--epsilon": "0.5", "--cap": "1"} | {option: bad}
    ledger = ws / "new.sqlite"
    result = invoke_cli(
        "release",
        *release_args(ws, "2024-01", ledger=ledger),
        *(x for kv in args.items() for x in kv),
    )
    one_line_error(result, option, repr(bad))
    assert not ledger.exists() and not (ws / "pub").exists()


@pytest.mark.parametrize("bad", UNSTATABLE)
def test_release_into_an_existing_scope_refuses_it_and_charges_nothing(
    ws: Path, ledger_path: Path, bad: str
) -> None:
    before = Ledger(str(ledger_path)).export()["charges"]
    one_line_error(
        invoke_cli("release", *release_args(ws, "2024-02", ledger=ledger_path), "--epsilon", bad),
        "--epsilon",
    )
    assert Ledger(str(ledger_path)).export()["charges"] == before
    assert not (ws / "pub" / "2024-02").exists()


@pytest.mark.parametrize("bad", UNSTATABLE)
def test_plan_refuses_an_epsilon_it_cannot_state(ws: Path, bad: str) -> None:
    one_line_error(
        invoke_cli("plan", "--spec", str(ws / "spec.yaml"), "--epsilon", bad), "--epsilon"
    )


@pytest.mark.parametrize("bad", UNSTATABLE)
def test_set_cap_refuses_a_cap_it_cannot_state(ledger_path: Path, bad: str) -> None:
    one_line_error(
        invoke_cli("ledger", "set-cap", "visits", bad, "--ledger", str(ledger_path)), "CAP"
    )
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
    result = invoke_cli("plan", "--spec", str(ws / "spec.yaml"), "--epsilon", "1e-307")
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
    one_line_error(invoke_cli(*command, "--ledger", str(tmp_path)), str(tmp_path), "is a directory")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("cap", [[], ["--cap", "1"]])
def test_release_refuses_a_directory_as_the_ledger(ws: Path, cap: list[str]) -> None:
    directory = ws / "ledgers"
    directory.mkdir()
    result = invoke_cli(
        "release", *release_args(ws, "2024-01", ledger=directory), "--epsilon", "0.5", *cap
    )
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
    result = invoke_cli(
        "release",
        *release_args(ws, "2024-01", ledger=below_a_file),
        "--epsilon",
        "0.5",
        "--cap",
        "1",
    )
    one_line_error(result, f"cannot create a ledger at {below_a_file}")
    assert not (ws / "pub").exists()


def test_a_fifo_as_the_ledger_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "ledger.sqlite"
    os.mkfifo(fifo)
    with pytest.raises(LedgerError, match="is not a regular file"):
        Ledger(str(fifo))


# -- export and plot targets ---------------------------------------------------------------------


def test_export_to_dev_full_is_one_line(ledger_path: Path) -> None:
    """/dev/full is a device: writing to it fails, and replacing it by a rename would destroy it
    (as root)."""
    before = os.stat("/dev/full")
    result = invoke_cli("ledger", "export", "--ledger", str(ledger_path), "-o", "/dev/full")
    one_line_error(result, "--output", "/dev/full", "not a regular file")
    after = os.stat("/dev/full")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino


def test_export_to_a_fifo_is_refused_and_the_fifo_kept(ledger_path: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "export.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a writer would not block on main
    try:
        result = invoke_cli("ledger", "export", "--ledger", str(ledger_path), "-o", str(fifo))
        one_line_error(result, "--output", str(fifo), "not a regular file")
        assert stat.S_ISFIFO(os.stat(fifo).st_mode)
        assert os.read(reader, 1) == b""  # nothing was written into it
    finally:
        os.close(reader)


def test_export_to_standard_output_by_name_is_refused(ledger_path: Path, tmp_path: Path) -> None:
    """/dev/stdout resolves to whatever stdout is (a shell's `> file`): renaming over that file
    would swap it under the shell. Without -o the export goes to stdout."""
    link = tmp_path / "out.json"
    link.symlink_to("/dev/stdout")
    for target in ("/dev/stdout", "/dev/fd/1", str(link)):
        result = invoke_cli("ledger", "export", "--ledger", str(ledger_path), "-o", target)
        one_line_error(result, "--output", target, "names an open file descriptor")
    assert link.is_symlink()


def test_export_into_a_directory_or_below_a_file_is_one_line(
    ledger_path: Path, tmp_path: Path
) -> None:
    one_line_error(
        invoke_cli("ledger", "export", "--ledger", str(ledger_path), "-o", str(tmp_path)),
        "--output",
        "is a directory",
    )
    below_a_file = ledger_path / "export.json"
    result = invoke_cli("ledger", "export", "--ledger", str(ledger_path), "-o", str(below_a_file))
    one_line_error(result, "--output", str(below_a_file))


def test_export_replaces_a_file_whole_and_keeps_its_permissions(
    ledger_path: Path, tmp_path: Path
) -> None:
    target = tmp_path / "export.json"
    target.write_text("old")
    target.chmod(0o600)
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    result = invoke_cli("ledger", "export", "--ledger", str(ledger_path), "-o", str(link))
    assert result.exit_code == 0, result.output
    assert link.is_symlink()  # written through the link, not replaced by a file
    assert json.loads(target.read_text())["scopes"][0]["name"] == "visits"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []


def test_epsilon_plot_refuses_a_fifo_in_the_plot_directory(tmp_path: Path) -> None:
    plots = tmp_path / "plots"
    plots.mkdir()
    os.mkfifo(plots / "profile.png")
    reader = os.open(plots / "profile.png", os.O_RDONLY | os.O_NONBLOCK)
    try:
        result = invoke_cli("epsilon", "--config", str(PRIVACY), "--plot", str(plots), "--json")
        one_line_error(result, "--plot", str(plots / "profile.png"), "not a regular file")
        assert stat.S_ISFIFO(os.stat(plots / "profile.png").st_mode)
    finally:
        os.close(reader)


# -- pydantic's messages --------------------------------------------------------------------------


def test_a_spec_built_in_python_reports_its_problems_without_pydantic_links() -> None:
    with pytest.raises(ValidationError) as info:
        dp.ReleaseSpec(name="x", source="s", privacy_unit="p", statistics=[{"name": "n"}])
    text = str(info.value)
    assert "errors.pydantic.dev" not in text and "For further information" not in text
    assert "statistics.0" in text and "Unable to extract tag using discriminator 'kind'" in text
    for build in (lambda: dp.ReleaseSpec.model_validate({"name": "x"}), lambda: dp.Manifest()):
        with pytest.raises(ValidationError) as info:
            build()
        assert "Field required" in str(info.value) and "pydantic.dev" not in str(info.value)


def test_a_validators_own_error_type_keeps_its_words_without_links() -> None:
    from pydantic import BaseModel, field_validator
    from pydantic_core import PydanticCustomError

    from dprelease.files import ReadableErrors

    class Model(ReadableErrors):
        inner: list[int]

        @field_validator("inner")
        @classmethod
        def _refuse(cls, value: list[int]) -> list[int]:
            raise PydanticCustomError("not_today", "no {what} today", {"what": "lists"})

    class Outer(BaseModel):  # a plain model around it: pydantic's own text, links included
        model: Model

    with pytest.raises(ValidationError) as info:
        Model(inner=[1])
    assert str(info.value).splitlines()[1:] == [
        "inner",
        "  no lists today [type=not_today, input_value=[1], input_type=list]",
    ]
    assert info.value.errors()[0]["ctx"] == {"what": "lists"}
    with pytest.raises(ValidationError, match="errors.pydantic.dev"):
        Outer(model={"inner": "x"})
