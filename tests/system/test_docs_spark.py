"""The docs' blocks marked `<!-- docs-test: spark -->` run in the Spark tier, on the local Spark
session the Spark tests share, in a directory set up as after `python3 dev.py demo` (see
test_docs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from docs_pages import PAGES, Block, blocks, dprelease_args, make_demo_checkout
from helpers import ROOT, invoke_cli
from sparktest import local_session

pytestmark = pytest.mark.spark
SPARK_BLOCKS = [b for page in PAGES for b in blocks(page) if b.marker == "spark"]


@pytest.mark.parametrize("block", SPARK_BLOCKS, ids=lambda b: b.where)
def test_the_spark_examples_run(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    local_session()  # as the Spark tier has it: started in the checkout, before this test
    monkeypatch.delenv("DPRELEASE_LEDGER_URL", raising=False)
    monkeypatch.chdir(make_demo_checkout(tmp_path))
    for args in dprelease_args(block):
        result = invoke_cli(*args)
        assert result.exit_code == 0, f"{block.where}: {args}\n{result.output}"
        if "--engine" in args:
            out = Path(args[args.index("--out") + 1])
            assert '"engine": "spark"' in (out / "manifest.json").read_text()
