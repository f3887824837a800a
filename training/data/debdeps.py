"""Rebuild the debdeps benchmark corpus (package descriptions labelled with their dependencies) from a Debian machine's apt lists."""

from __future__ import annotations

import re
from pathlib import Path

from xtag.training.data.apt_corpus import build_apt_corpus

DEPENDENCY_FIELDS = ("Depends", "Pre-Depends", "Recommends")
# Version constraints `(>= 1.0)`, architecture qualifiers `[amd64 !i386]`, build profiles `<!nocheck>`.
_QUALIFIERS = re.compile(r"\([^)]*\)|\[[^\]]*\]|<[^>]*>")


def parse_relations(field: str) -> list[str]:
    """Package names in one relationship field: alternatives `a | b` give both, qualifiers and `:any` dropped."""
    names = []
    for alternative in re.split(r"[,|]", field.replace("\n", " ")):
        words = _QUALIFIERS.sub(" ", alternative).split()
        if words:
            name = words[0].split(":", 1)[0]
            if name:
                names.append(name)
    return names


def dependency_labels(stanza: dict[str, str]) -> list[str]:
    """Sorted, unique names in Depends, Pre-Depends and Recommends, the package itself excluded."""
    names = {n for field in DEPENDENCY_FIELDS for n in parse_relations(stanza.get(field, ""))}
    names.discard(stanza.get("Package", ""))
    return sorted(names)


def build_debdeps_corpus(lists_dir: Path, out_dir: Path) -> dict:
    """Packages with a dependency, labelled with them; see xtag.training.data.apt_corpus.build_apt_corpus."""
    return build_apt_corpus(
        lists_dir, out_dir, dependency_labels, unlabelled="no_deps", what="a Depends, Pre-Depends or Recommends field"
    )
