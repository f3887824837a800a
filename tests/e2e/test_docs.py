"""The documentation: README.md is a newcomer's page that links into docs/, and docs/ builds with
`mkdocs build --strict` (a dead link, a missing anchor or a page left out of the nav fails it), with a settings
table generated from the Settings class and a site that loads nothing from the internet."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from xtag.config.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
LINK = re.compile(r"(?<!!)\[[^\]\n]+\]\(([^)\s]+)\)")


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"), "-d", str(site)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site")
    built = build(ROOT, site)
    assert built.returncode == 0, built.stderr[-4000:]
    return site


def text_of(page: Path) -> str:
    """A built page's text, tags dropped and whitespace folded, for comparing with descriptions."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", page.read_text())).split())


def leaf_fields(model: type[BaseModel]):
    """(name, field) of every setting, nested groups flattened (Settings may group its fields by concern)."""
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            yield from leaf_fields(field.annotation)
        else:
            yield name, field


def test_the_docs_build_strict_and_list_every_setting(site):
    page = site / "settings.html"
    text = text_of(page)
    for name, field in leaf_fields(Settings):
        assert name.upper() in text, f"{name} is missing from the settings page"
        if field.description:
            shown = " ".join(field.description.replace("`", "").split())  # code spans are rendered as code
            assert shown in text, f"{name}'s description is missing"


def test_every_page_is_built_and_the_results_are_included(site):
    for page in (ROOT / "docs").rglob("*.md"):
        built = site / page.relative_to(ROOT / "docs").with_suffix(".html")
        assert built.is_file(), f"{page} was not built"
    results = text_of(site / "bench" / "RESULTS.html")  # the benchmarks page links to the site's copy
    assert (ROOT / "bench" / "RESULTS.md").read_text().splitlines()[0].lstrip("# ") in results
    assert 'href="bench/RESULTS.html"' in (site / "benchmarks.html").read_text()


def test_the_site_loads_nothing_from_the_internet(site):
    """Scripts, styles, images and fonts come from the site itself (links to other sites are fine to follow)."""
    loads = re.compile(r"<(?:script|link|img|iframe|source)\b[^>]*?\b(?:src|href)=\"((?:https?:)?//[^\"]+)\"")
    for page in site.rglob("*.html"):
        source = page.read_text()
        assert not loads.findall(source), (page, loads.findall(source))
        assert 'class="mermaid"' not in source, page  # Material would fetch mermaid.js from a CDN
    for sheet in site.rglob("*.css"):
        assert not re.search(r"@import\s+url\(\s*['\"]?(?:https?:)?//", sheet.read_text()), sheet


def copy_docs(dest: Path) -> Path:
    for name in ("mkdocs.yml", "README.md"):
        shutil.copyfile(ROOT / name, dest / name)
    shutil.copytree(ROOT / "docs", dest / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    (dest / "bench").mkdir()
    shutil.copyfile(ROOT / "bench" / "RESULTS.md", dest / "bench" / "RESULTS.md")
    return dest


@pytest.mark.parametrize(
    "link, message",
    [
        ("[gone](no-such-page.md)", "no-such-page.md"),
        ("[gone](cli.md#no-such-section)", "no-such-section"),
        ("[gone](../training/no_such_module.py)", "no_such_module.py"),
    ],
    ids=["page", "anchor", "repository-file"],
)
def test_a_dead_link_fails_the_build(tmp_path, link, message):
    root = copy_docs(tmp_path)
    page = root / "docs" / "index.md"
    page.write_text(page.read_text() + f"\nSee {link}.\n")
    built = build(root, tmp_path / "site")
    assert built.returncode != 0
    warnings = [line for line in built.stderr.splitlines() if line.startswith("WARNING")]
    assert warnings and all(message in w for w in warnings), built.stderr[-2000:]  # the planted link, and only it


def settings_hook():
    spec = importlib.util.spec_from_file_location("settings_table", ROOT / "docs" / "hooks" / "settings_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Limits(BaseModel):
    max_k: int = Field(1000, ge=1, description="largest k | a request may ask for")


class _Example(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="XTAG_", env_nested_delimiter="__")

    port: int = Field(8000, ge=0, le=65535, description="the port")
    log_format: Literal["text", "json"] = Field("text", description="lines as text or JSON")
    limits: _Limits = _Limits()


def test_the_settings_table_follows_the_class(monkeypatch):
    """A field added to Settings (or a group of them) is in the table with no edit to the docs."""
    hook = settings_hook()
    monkeypatch.setattr(hook, "SETTINGS", f"{__name__}:_Example")
    header = ["| variable | default | type | what |", "|---|---|---|---|"]
    assert hook.settings_table().splitlines() == [
        *header,
        "| `XTAG_PORT` | `8000` | int, ≥ 0, ≤ 65535 | the port |",
        "| `XTAG_LOG_FORMAT` | `text` | `text` \\| `json` | lines as text or JSON |",
        "",
        "### limits",  # a group: its own table under its name
        "",
        *header,
        "| `XTAG_LIMITS__MAX_K` | `1000` | int, ≥ 1 | largest k \\| a request may ask for |",
    ]


def test_the_readme_is_a_newcomers_page():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    assert headings[0] == "The two commands", headings
    first = text.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    assert "```\nbash scripts/main.sh\n```" in first and "```\nbash scripts/test.sh\n```" in first
    assert (ROOT / "scripts" / "main.sh").is_file() and (ROOT / "scripts" / "test.sh").is_file()


def test_the_readme_links_work_on_github_and_in_the_site():
    """Relative file links (what GitHub renders), each to a file that exists; those into docs/ name a page the
    site builds (in the nav)."""
    nav = (ROOT / "mkdocs.yml").read_text()
    links = [link for link in LINK.findall(README.read_text()) if not re.match(r"^[a-z]+:", link)]
    assert links
    for link in links:
        path = link.split("#", 1)[0]
        assert not path.startswith("/"), link
        assert (ROOT / path).exists(), f"README links to {link}, which does not exist"
        if path.startswith("docs/"):
            assert path.removeprefix("docs/") in nav, f"README links to {link}, which the nav leaves out"
