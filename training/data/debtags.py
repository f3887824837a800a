"""Rebuild the debtags benchmark corpus from a Debian machine's apt lists, so the shared data can be regenerated and checked."""

from __future__ import annotations

from pathlib import Path

from xtag.training.data.apt_corpus import build_apt_corpus


def parse_tags(tag_field: str) -> list[str]:
    """The `Tag:` field's debtags (`facet::tag`), sorted and unique."""
    return sorted({t.strip() for t in tag_field.replace("\n", " ").split(",") if t.strip()})


def build_debtags_corpus(lists_dir: Path, out_dir: Path) -> dict:
    """Packages with a Tag field, labelled with their debtags; see xtag.training.data.apt_corpus.build_apt_corpus."""
    return build_apt_corpus(
        lists_dir, out_dir, lambda stanza: parse_tags(stanza.get("Tag", "")), unlabelled="no_tags", what="a Tag field"
    )
