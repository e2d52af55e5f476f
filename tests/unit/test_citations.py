"""A comment or docstring that sends the reader to a section of the docs (`docs/x.md, "Heading"`,
or the older `README, Heading`) names a heading that page has: when the README was split into
docs/ pages, citations of "README, Performance" and "README, "Tests"" were left pointing at
text that had moved."""

from __future__ import annotations

import re
from pathlib import Path

from helpers import ROOT

CITATION = re.compile(r'\b(README|docs/[\w-]+\.md),[\s#:]*(?:"([^"]+)"|([A-Z]\w*)\))')
WHERE = ("dprelease", "pipelines", "tests", "bench")
SUFFIXES = {".py", ".sh", ".yaml", ".yml"}


def headings(page: str) -> set[str]:
    path = ROOT / (page if page != "README" else "README.md")
    if not path.is_file():
        return set()
    return {m.group(1).strip() for m in re.finditer(r"^#+ (.+)$", path.read_text(), re.M)}


def citations() -> list[tuple[Path, str, str]]:
    found = []
    for top in WHERE:
        for path in (ROOT / top).rglob("*"):
            mine = path == Path(__file__).resolve()  # its docstring quotes the stale ones
            if path.suffix in SUFFIXES and "fixtures" not in path.parts and not mine:
                for m in CITATION.finditer(path.read_text(encoding="utf-8", errors="replace")):
                    found.append((path.relative_to(ROOT), m.group(1), m.group(2) or m.group(3)))
    return found


def test_every_cited_section_is_a_heading_of_the_page_cited() -> None:
    found = citations()
    assert len(found) >= 4  # the docs/ citations this module was written for: it sees them
    stale = [(str(path), page, heading) for path, page, heading in found
             if heading not in headings(page)]  # fmt: skip
    assert stale == []
