"""Every default the README and the docs pages (docs/**/*.md, where the README's reference sections moved) state for
an XTAG_* setting is the one Settings has (issue 47, 9e: the README said XTAG_SHADOW_QUEUE defaults to 8 while the
code said 64)."""

from __future__ import annotations

import re
from pathlib import Path

from xtag.config.settings import flat_fields

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
UNITS = {None: 1, "s": 1, "ms": 1e-3, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
NUMBER = r"(-?[0-9][0-9,_]*(?:\.[0-9]+)?)(?: (s|ms|KiB|MiB|GiB))?(?=[,);:]|\s)"
# `XTAG_NAME` (default 8 MiB ...), `XTAG_NAME` (64) ..., and (`XTAG_NAME`, 5 s)
STATED = re.compile(rf"`XTAG_([A-Z0-9_]+)` \((?:default:? )?{NUMBER}|\(`XTAG_([A-Z0-9_]+)`, {NUMBER}")


def stated_defaults(text: str) -> list[tuple[str, float, str]]:
    found = []
    for m in STATED.finditer(text):
        name, number, unit = (m.group(1), m.group(2), m.group(3)) if m.group(1) else m.group(4, 5, 6)
        found.append((name, float(number.replace(",", "").replace("_", "")) * UNITS[unit], m.group(0)))
    return found


def test_the_readmes_stated_defaults_are_the_settings_defaults():
    stated = [(page, *s) for page in PAGES for s in stated_defaults(page.read_text())]
    assert len(stated) >= 16  # the README stated that many before its sections moved: the pattern still finds them
    assert any(page.parent.name == "operations" for page, *_ in stated)  # the limits and security pages
    assert any(page.name == "shadow.md" for page, *_ in stated)  # XTAG_SHADOW_QUEUE (64), issue 47's 9e
    fields = flat_fields()
    wrong = [
        (
            page.relative_to(ROOT).as_posix(),
            said,
            fields[name.lower()].default if name.lower() in fields else "no such setting",
        )
        for page, name, value, said in stated
        if name.lower() not in fields or abs(float(fields[name.lower()].default) - value) > 1e-9 * max(1, value)
    ]
    assert not wrong, wrong


def test_the_pattern_reads_each_form_and_unit():
    text = "`XTAG_A` (default 8 MiB, x) `XTAG_B` (50,000) and (`XTAG_C`, 5 s), `XTAG_D` (the first model)"
    assert [(n, v) for n, v, _ in stated_defaults(text)] == [("A", 8 * 2**20), ("B", 50000), ("C", 5)]
