"""docs/local.md's questionnaire snippet: it carries the wave's configuration, and under Node
with a stub page it sends a report, never the answer. (The page's Python and `dprelease`
commands run, in order, in tests/system/test_docs.py, as every docs page's.)"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from docs_pages import blocks
from helpers import ROOT
from local_audit import node

import dprelease as dp

PAGE = ROOT / "docs" / "local.md"


def _snippet() -> tuple[str, dict]:
    html = next(block.text for block in blocks(PAGE) if block.language == "html")
    script = re.search(r'<script type="module">\n(.*?)</script>', html, re.DOTALL)
    assert script is not None
    config = re.search(r"const config = (\{.*\});", script.group(1))
    assert config is not None
    return script.group(1), json.loads(config.group(1))


def test_the_snippet_carries_the_waves_configuration(tmp_path: Path) -> None:
    page = PAGE.read_text()
    spec = re.search(r'write_text\(\n    """\\\n(.*?)"""', page, re.DOTALL)
    assert spec is not None
    (tmp_path / "diabetes.yaml").write_text(spec.group(1))
    _, config = _snippet()
    assert config == dp.local.load_local_spec(tmp_path / "diabetes.yaml").wave.config()


def test_the_snippet_sends_a_report_and_never_the_answer(tmp_path: Path) -> None:
    """The module script with a stub page (form, FormData, fetch): every submit posts a report
    of the domain with the configuration's wave_hash; over 2,000 submits of "yes" the reports
    are not all "yes" (k-RR keeps it with probability e/(e + 1) ≈ 0.73)."""
    script, config = _snippet()
    module = dp.local.js_module_path().as_uri()
    page = script.replace('"/static/randomize.js"', json.dumps(module))
    harness = tmp_path / "page.mjs"
    harness.write_text(
        """
let handler;
globalThis.document = { getElementById: () => ({ addEventListener: (_, h) => (handler = h) }) };
globalThis.FormData = class { get(name) { return { diabetes: "1", region: "3" }[name]; } };
const sent = [];
globalThis.fetch = async (_, request) => sent.push(JSON.parse(request.body));
"""
        + page
        + """
for (let i = 0; i < 2000; i++) await handler({ preventDefault() {}, target: {} });
process.stdout.write(JSON.stringify(sent));
"""
    )
    done = subprocess.run([node(), str(harness)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    sent = json.loads(done.stdout)
    assert len(sent) == 2000 and {s["region"] for s in sent} == {"3"}
    assert {s["wave_hash"] for s in sent} == {config["wave_hash"]}
    reports = [s["diabetes"] for s in sent]
    assert set(reports) == {0, 1}
    assert 0.65 < reports.count(1) / 2000 < 0.81  # e/(e + 1) ≈ 0.731; false alarm < 1e-6
