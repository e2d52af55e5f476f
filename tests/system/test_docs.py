"""The README and every page in docs/ are tested where they show commands: each page's shell
blocks run their `dprelease` commands, its Python blocks run, and its YAML blocks load through
the library's own loaders, top to bottom in a directory set up as after `python3 dev.py demo`
(`docs_pages.make_demo_checkout`). Links between the pages, and to files, resolve; every field
of a spec is documented. The guide's Python runs in tests/system/test_guide.py; blocks for the
Spark and e2e tiers in test_docs_spark.py and test_docs_dagster.py."""

from __future__ import annotations

import importlib
import re
import shutil
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from docs_pages import (
    ARCHITECTURE,
    LANGUAGES,
    MARKERS,
    PAGES,
    Block,
    anchors,
    blocks,
    commands,
    dprelease_args,
    links,
    make_demo_checkout,
    stray_markers,
)
from helpers import ROOT, invoke_cli, one_line_error
from pydantic import BaseModel

import dprelease as dp
from dprelease.budget import load_privacy_profiles
from dprelease.spec import PublishSpec, ReleaseSpec, load_spec

GUIDE = ROOT / "docs" / "guide.md"
DEMO_SPEC = ROOT / "pipelines" / "specs" / "visits_monthly.yaml"


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def runnable(page: Path) -> list[Block]:
    """The blocks the fast tier runs, in page order (the guide's Python runs in test_guide)."""
    return [
        b
        for b in blocks(page)
        if b.marker in (None, "refused")
        and b.language in ("sh", "yaml", "python")
        and not (page == GUIDE and b.language == "python")
    ]


def run_shell(block: Block) -> None:
    for args in dprelease_args(block):
        result = invoke_cli(*args)
        if block.marker == "refused":
            one_line_error(result)
        else:
            assert result.exit_code == 0, f"{block.where}: {args}\n{result.output}"


def load_yaml(block: Block, checkout: Path) -> None:
    """A spec through the spec loader (beside the demo's spec, whose keys files it may name), a
    privacy YAML through the privacy loader; a `publish:` or `statistics:` fragment within the
    demo's spec."""
    data = yaml.safe_load(block.text)
    demo = yaml.safe_load(DEMO_SPEC.read_text())
    if set(data) == {"publish"}:
        data = {"release": demo["release"], **data}
    elif set(data) == {"statistics"}:
        data = {"release": {**demo["release"], **data}}
    target = checkout / "pipelines" / "specs" / f"docs_block_{block.line}.yaml"
    target.write_text(yaml.safe_dump(data))
    if "release" in data:
        assert set(data) <= {"release", "publish"}, block.where
        load_spec(target)
    elif "privacy" in data:
        assert set(data) <= {"privacy", "scopes"}, block.where
        load_privacy_profiles(target)
    else:
        pytest.fail(f"{block.where}: a YAML block that is no spec, fragment or privacy YAML")


@pytest.mark.parametrize("page", [p for p in PAGES if runnable(p)], ids=page_id)
def test_the_page_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Top to bottom: commands exit 0 (a `refused` block's exit 2 with one line), Python runs
    in one namespace, YAML loads."""
    monkeypatch.delenv("DPRELEASE_LEDGER_URL", raising=False)  # the default ledger is the demo's
    checkout = make_demo_checkout(tmp_path)
    monkeypatch.chdir(checkout)
    namespace: dict[str, Any] = {}
    for block in runnable(page):
        if block.language == "sh":
            run_shell(block)
        elif block.language == "python":
            exec(compile(block.text, block.where, "exec"), namespace)
        else:
            load_yaml(block, checkout)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_block_says_how_it_runs(page: Path) -> None:
    """A fence has a known language; a marker is known and sits on a fence; a shell block that
    runs holds only `dprelease` commands; a skipped block says why and names no missing file."""
    assert stray_markers(page) == []
    for block in blocks(page):
        if page != ARCHITECTURE:
            assert block.language in LANGUAGES, f"{block.where}: tag the fence ({LANGUAGES})"
        assert block.marker in MARKERS | {None}, block.where
        if block.marker == "skip":
            assert block.reason, f"{block.where}: say why it is skipped"
        if block.language == "sh" and block.marker in (None, "refused", "spark"):
            assert dprelease_args(block), block.where
        if block.language == "sh":
            for argv in commands(block):
                for word in argv:
                    if re.fullmatch(r"(bench|examples|pipelines|docs|tests)/[\w./-]+", word):
                        assert (ROOT / word).exists(), f"{block.where}: no {word}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_links_resolve(page: Path) -> None:
    """Every relative link names a file of the checkout, and its anchor a heading there."""
    for target in links(page):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.exists() and file.is_relative_to(ROOT), f"{page_id(page)}: {target}"
        if anchor:
            assert anchor in anchors(file), f"{page_id(page)}: {target} (no such heading)"


def test_the_docs_name_only_what_imports() -> None:
    """Every `dprelease.…` name in the README and the docs (architecture.md aside, which names
    modules by their folder) is a module or an attribute of one."""
    names = {
        name
        for page in PAGES
        if page != ARCHITECTURE
        for name in re.findall(r"`(dprelease(?:\.[A-Za-z_]\w*)+)", page.read_text())
    }
    assert names
    for name in sorted(names):
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                found: object = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError:
                continue
            for attribute in parts[cut:]:
                assert hasattr(found, attribute), name
                found = getattr(found, attribute)
            break
        else:
            pytest.fail(f"{name} does not import")


def models_in(annotation: object) -> set[type[BaseModel]]:
    """The pydantic models an annotation names (through unions, lists, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {annotation}
    return {model for arg in typing.get_args(annotation) for model in models_in(arg)}


def spec_models() -> set[type[BaseModel]]:
    """Every model a spec file is made of: the release spec and all it holds, and `publish:`."""
    seen: set[type[BaseModel]] = set()
    todo = [ReleaseSpec, PublishSpec]
    while todo:
        model = todo.pop()
        if model not in seen:
            seen.add(model)
            for field in model.model_fields.values():
                todo.extend(models_in(field.annotation))
    return seen


def test_specs_md_documents_every_field_and_kind() -> None:
    text = (ROOT / "docs" / "specs.md").read_text()
    models = spec_models()
    assert len(models) >= 10  # release, publish, period, postprocess, group-by, 3 domains, ...
    for model in models:
        for field in model.model_fields:
            assert f"**`{field}`**" in text, f"{model.__name__}.{field}"
        kind = model.model_fields.get("kind")
        for value in typing.get_args(kind.annotation) if kind else ():
            assert f"`{value.value}`" in text, value


def test_the_guide_documents_every_plan_key() -> None:
    """`dprelease plan --json` keys: each is in the guide's table."""
    text = GUIDE.read_text()
    for model in (dp.ReleasePlan, dp.StatisticAccuracy):
        for field in model.model_fields:
            assert re.search(rf"(`|\[\]\.){field}(`|\[)", text), f"{model.__name__}.{field}"
    assert f'`format: "{dp.ReleasePlan.model_fields["format"].default}"`' in text


def test_the_readme_shows_the_demo_spec_as_it_is(tmp_path: Path) -> None:
    """The README's Dagster example is the demo's spec file, field for field."""
    (block,) = [b for b in blocks(ROOT / "README.md") if b.language == "yaml"]
    shutil.copytree(DEMO_SPEC.parent / "public", tmp_path / "public")  # the keys file it names
    copy = tmp_path / "visits_monthly.yaml"
    copy.write_text(block.text)
    readme, demo = load_spec(copy), load_spec(DEMO_SPEC)
    assert (readme.hash, readme.publish) == (demo.hash, demo.publish)


def test_the_readme_is_short_and_keeps_its_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    quick = readme.split("## Quick start")[1].split("## ")[0]
    (block,) = [b for b in blocks(ROOT / "README.md") if b.text in quick]
    assert [argv[:3] for argv in commands(block)] == [
        ["python3", "dev.py", "demo"],
        ["python3", "dev.py", "test"],
    ]


def test_the_guide_numbers_each_section_once_and_refers_to_those() -> None:
    text = GUIDE.read_text()
    numbers = [int(n) for n in re.findall(r"^## (\d+)\. ", text, flags=re.MULTILINE)]
    assert numbers == list(range(1, len(numbers) + 1))
    for cited in re.findall(r"section (\d+)", text):
        assert 1 <= int(cited) <= len(numbers), f"section {cited}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_no_placeholder_or_malformed_number(page: Path) -> None:
    """Nothing promised for later ("goes here", an issue in progress), and no number with a
    thousands separator after its decimal point (a pasted-together figure such as 1.96200,000)."""
    text = page.read_text()
    for placeholder in (r"goes here", r"\bTODO\b", r"\(issue \d+\)", r"in parallel \(issue"):
        assert not re.search(placeholder, text), f"{page_id(page)}: {placeholder}"
    assert not re.search(r"\d\.\d+,\d{3}\b", text), page_id(page)
