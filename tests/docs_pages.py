"""The README and the pages in docs/ as tests see them: their fenced blocks, the marker that says
how a block runs, the `dprelease` commands of a shell block, and the directory the examples
assume (a checkout after `python3 dev.py demo`).

A fenced block has a language tag (```sh, ```python, ```yaml; ```text for a diagram). A block
that is not run in the fast tier says so in an HTML comment on the line before its fence:

    <!-- docs-test: skip (why) -->   not run (a server, a benchmark, the test command itself)
    <!-- docs-test: refused -->      each command exits 2 with one `error:` line
    <!-- docs-test: spark -->        run by the Spark tier (tests/system/test_docs_spark.py)
    <!-- docs-test: e2e -->          its `dg launch` lines run by tests/system/test_docs_dagster.py
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from helpers import ROOT

#: Every page whose examples are tested: the README and the docs.
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Being rewritten elsewhere: its links are checked, its untagged diagrams allowed.
ARCHITECTURE = ROOT / "docs" / "architecture.md"
LANGUAGES = {"sh", "python", "yaml", "text", "json", "html"}
MARKERS = {"skip", "refused", "spark", "e2e"}
FENCE = re.compile(r"^```(\S*)\s*$")
MARKER = re.compile(r"^<!-- docs-test: (\w+)(?: \((.+)\))? -->$")
DPRELEASE = {".venv/bin/dprelease", "dprelease"}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    marker: str | None
    reason: str | None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of `page`, each with the marker on the line before its fence."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].rstrip() == "```")
        marked = MARKER.match(lines[index - 1]) if index else None
        found.append(
            Block(
                page,
                index + 1,
                opening.group(1),
                "\n".join(lines[index + 1 : end]) + "\n",
                marked.group(1) if marked else None,
                marked.group(2) if marked else None,
            )
        )
        index = end + 1
    return found


def stray_markers(page: Path) -> list[int]:
    """Lines of markers that are not right before a fence (they would mark nothing)."""
    lines = page.read_text().splitlines()
    return [
        number
        for number, line in enumerate(lines, 1)
        if line.startswith("<!-- docs-test")
        and not (MARKER.match(line) and number < len(lines) and FENCE.match(lines[number]))
    ]


def commands(block: Block) -> list[list[str]]:
    """The commands of a shell block: continuation lines joined, comments dropped."""
    joined = block.text.replace("\\\n", " ")
    return [argv for line in joined.splitlines() if (argv := shlex.split(line, comments=True))]


def dprelease_args(block: Block) -> list[list[str]]:
    """The arguments of each `dprelease` command of a shell block; AssertionError naming the
    block for any other command (which must be marked instead)."""
    found = []
    for argv in commands(block):
        assert argv[0] in DPRELEASE, (
            f"{block.where}: `{shlex.join(argv)}` is not a dprelease command; run it from a test "
            "or mark the block <!-- docs-test: skip (why) -->"
        )
        found.append(argv[1:])
    return found


def make_demo_checkout(root: Path, *, visits_patients: int = 2_000) -> Path:
    """`root` set up as a checkout after `python3 dev.py demo`, as the examples assume: the
    demo's specs, privacy YAML and examples, the NHANES extract, a small copy of the demo's
    confidential tables, and a ledger holding one released month of `visits_by_clinic` and an
    open reservation of another (a run that died: what `ledger void` ends)."""
    import dprelease as dp
    from pipelines.demo_data import generate_case_control, generate_visits

    for part in ("pipelines/specs", "examples", "docs/data"):
        shutil.copytree(ROOT / part, root / part)
    shutil.copy(ROOT / "pipelines" / "privacy.yaml", root / "pipelines" / "privacy.yaml")
    confidential = root / ".dprelease" / "confidential"
    confidential.mkdir(parents=True)
    generate_visits(n_patients=visits_patients).write_parquet(confidential / "visits.parquet")
    generate_case_control().write_parquet(confidential / "case_control.parquet")
    with dp.Ledger(str(root / ".dprelease" / "ledger.sqlite")) as ledger:
        dp.release(
            confidential / "visits.parquet",
            root / "pipelines" / "specs" / "visits_monthly.yaml",
            privacy=root / "pipelines" / "privacy.yaml",
            ledger=ledger,
            period="2024-12",
        )
        ledger.reserve(
            "visits_by_clinic/2024-04",
            "hospital_patients",
            "2024-04",
            Fraction(1, 3),
            spec_hash="0" * 64,
        )
    return root


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings (outside fenced blocks)."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.DOTALL | re.MULTILINE)
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, flags=re.MULTILINE)}


def links(page: Path) -> list[str]:
    """The targets of a page's markdown links (outside fenced blocks and code spans)."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.DOTALL | re.MULTILINE)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.findall(r"\]\(([^)\s]+)\)", text)
