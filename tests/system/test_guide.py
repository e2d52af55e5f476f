"""The user guide's example runs: its ```python blocks, in order, in one namespace, in a fresh
directory, so the guide cannot drift from the library."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from helpers import ROOT

GUIDE = ROOT / "docs" / "guide.md"


def test_the_guide_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"^```python\n(.*?)^```$", GUIDE.read_text(), re.DOTALL | re.MULTILINE)
    assert len(blocks) >= 8
    shutil.copytree(ROOT / "docs" / "data", tmp_path / "docs" / "data")  # as from the root
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    for number, block in enumerate(blocks, 1):
        exec(compile(block, f"{GUIDE.name}, python block {number}", "exec"), namespace)
