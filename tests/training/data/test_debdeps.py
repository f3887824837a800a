"""The debdeps corpus builder on tiny fake apt lists (no /var/lib/apt, no network)."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import lz4.frame
import pytest
from typer.testing import CliRunner
from xtag.models.errors import XtagError
from xtag.training.data import apt_corpus, debdeps, debtags

from xtag.cli import app

PACKAGES = """\
Package: editor
Version: 2.0-1
Pre-Depends: dpkg (>= 1.15.6~)
Depends: libc6 (>= 2.34), libncursesw6 (>= 6),
 python3:any (>= 3.9~) | python3-minimal:any, editor-common (= 2.0-1)
Recommends: editor-data [amd64 i386] <!nocheck>, editor
Suggests: editor-extras
Description: text editor
Description-md5: m-editor
Tag: role::program

Package: libfoo1
Depends: libc6, libfoo1 (= 1.0), libbar2:amd64 [!i386]
Suggests: libfoo-doc
Description: foo library
Description-md5: m-libfoo1

Package: suggests-only
Suggests: editor
Enhances: editor
Breaks: editor (<< 1.0)
Description: nothing it needs
Description-md5: m-suggests-only

Package: self-only
Depends: self-only (= 1.0)
Description: depends on itself
Description-md5: m-self-only

Package: editor-copy
Depends: editor
Description: text editor
Description-md5: m-editor

Package: libbar2
Recommends: libbar-common <stage1 !cross>
Description: bar library
Description-md5: m-libbar2
Tag: role::shared-lib

Package: untranslated
Depends: libc6
Description: only in Packages
 Described here alone.
"""

TRANSLATION = """\
Package: editor
Description-md5: m-editor
Description-en: text editor
 Edits text.  Fast
 and small.
 .
 Features:
  * undo

Package: libfoo1
Description-md5: m-libfoo1
Description-en: foo library
 Shared library for foo.

Package: suggests-only
Description-md5: m-suggests-only
Description-en: nothing it needs
 Never in the corpus.

Package: libbar2
Description-md5: m-libbar2
Description-en: bar library
"""

APT = "deb.debian.org_debian_dists_bookworm_main"
runner = CliRunner()


def write_lists(lists: Path, translation: bool = True) -> Path:
    lists.mkdir(parents=True, exist_ok=True)
    (lists / f"{APT}_binary-amd64_Packages.lz4").write_bytes(lz4.frame.compress(PACKAGES.encode("utf-8")))
    if translation:
        (lists / f"{APT}_i18n_Translation-en").write_text(TRANSLATION, encoding="utf-8")
    return lists


def read_rows(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def all_rows(out: Path) -> dict[str, dict]:
    return {r["id"]: r for split in ("train", "test") for r in read_rows(out / f"{split}.jsonl.gz")}


@pytest.mark.parametrize(
    ("field", "names"),
    [
        ("libc6 (>= 2.34), zlib1g (>= 1:1.2.0)", ["libc6", "zlib1g"]),  # version constraints (with epochs)
        ("a [amd64 !i386], b [linux-any] (>= 1)", ["a", "b"]),  # arch qualifiers, in either order
        ("c <!nocheck>, d <stage1 !cross> <!nodoc>", ["c", "d"]),  # build profiles
        ("python3:any (>= 3.9), perl:native, libx:amd64", ["python3", "perl", "libx"]),  # :any-style suffixes
        ("e | f (>= 2) | g:any", ["e", "f", "g"]),  # alternatives give every name
        ("h,\n i (<< 3),\n  j", ["h", "i", "j"]),  # continuation lines
        ("", []),
        (" , | ", []),
    ],
)
def test_parse_relations(field: str, names: list[str]) -> None:
    assert debdeps.parse_relations(field) == names


def test_dependency_labels_fields_and_self() -> None:
    stanza = {
        "Package": "pkg",
        "Depends": "libc6, pkg (= 1.0)",
        "Pre-Depends": "dpkg (>= 1.15)",
        "Recommends": "pkg-data | pkg-data-alt, libc6",
        "Suggests": "pkg-doc",
        "Enhances": "other",
        "Breaks": "old",
        "Conflicts": "bad",
        "Provides": "virtual",
        "Replaces": "older",
        "Build-Depends": "debhelper",
    }
    assert debdeps.dependency_labels(stanza) == ["dpkg", "libc6", "pkg-data", "pkg-data-alt"]
    assert debdeps.dependency_labels({"Package": "pkg", "Suggests": "a", "Depends": "pkg"}) == []


def test_build_corpus_rows_drops_split_and_stats(tmp_path: Path) -> None:
    stats = debdeps.build_debdeps_corpus(write_lists(tmp_path / "lists"), tmp_path / "out")
    by_id = all_rows(tmp_path / "out")

    # suggests-only and self-only have no dependency; editor-copy repeats editor's text (first kept).
    assert set(by_id) == {"editor", "libfoo1", "libbar2", "untranslated"}
    assert by_id["editor"] == {
        "id": "editor",
        "text": "text editor. Edits text.  Fast and small. Features: * undo",
        "labels": ["dpkg", "editor-common", "editor-data", "libc6", "libncursesw6", "python3", "python3-minimal"],
    }
    assert by_id["libfoo1"]["labels"] == ["libbar2", "libc6"]
    assert by_id["libbar2"] == {"id": "libbar2", "text": "bar library.", "labels": ["libbar-common"]}
    assert by_id["untranslated"] == {
        "id": "untranslated",
        "text": "only in Packages. Described here alone.",
        "labels": ["libc6"],
    }
    assert stats == {
        "train": 2,
        "test": 2,
        "labels": 9,
        "dropped_duplicates": 1,
        "no_deps": 2,
        "no_translation": 1,
    }


def test_split_rule_and_packages_order(tmp_path: Path) -> None:
    debdeps.build_debdeps_corpus(write_lists(tmp_path / "lists"), tmp_path / "out")
    order = ["editor", "libfoo1", "libbar2", "untranslated"]  # the Packages list's order
    for split in ("train", "test"):
        ids = [r["id"] for r in read_rows(tmp_path / "out" / f"{split}.jsonl.gz")]
        expected = [n for n in order if (int(hashlib.sha1(n.encode()).hexdigest(), 16) % 5 == 0) == (split == "test")]
        assert ids == expected and ids  # both splits hold a row
        assert all(apt_corpus.is_test(i) == (split == "test") for i in ids)


def test_shares_text_and_split_with_debtags(tmp_path: Path) -> None:
    lists = write_lists(tmp_path / "lists")
    debdeps.build_debdeps_corpus(lists, tmp_path / "deps")
    debtags.build_debtags_corpus(lists, tmp_path / "tags")
    deps, tags = all_rows(tmp_path / "deps"), all_rows(tmp_path / "tags")
    assert set(tags) == {"editor", "libbar2"}
    for name, row in tags.items():
        assert deps[name]["text"] == row["text"]
    assert read_rows(tmp_path / "tags" / "test.jsonl.gz")[0]["id"] == "libbar2"


def test_output_is_deterministic(tmp_path: Path) -> None:
    lists = write_lists(tmp_path / "lists")
    debdeps.build_debdeps_corpus(lists, tmp_path / "a")
    debdeps.build_debdeps_corpus(lists, tmp_path / "b")
    for split in ("train.jsonl.gz", "test.jsonl.gz"):
        assert (tmp_path / "a" / split).read_bytes() == (tmp_path / "b" / split).read_bytes()


def test_no_package_with_dependencies_is_an_error(tmp_path: Path) -> None:
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / f"{APT}_binary-amd64_Packages").write_text("Package: a\nSuggests: b\nDescription-md5: m\n\n")
    (lists / f"{APT}_i18n_Translation-en").write_text("Package: a\nDescription-md5: m\nDescription-en: a\n")
    with pytest.raises(XtagError, match="Depends, Pre-Depends or Recommends"):
        debdeps.build_debdeps_corpus(lists, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_cli_data_debdeps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lists = write_lists(tmp_path / "lists")
    result = runner.invoke(app, ["data", "debdeps", "--out", str(tmp_path / "out"), "--lists", str(lists)])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout)
    assert (stats["train"], stats["test"], stats["labels"], stats["no_deps"]) == (2, 2, 9, 2)
    assert set(all_rows(tmp_path / "out")) == {"editor", "libfoo1", "libbar2", "untranslated"}

    updates: list[bool] = []
    monkeypatch.setattr(apt_corpus, "update_apt_lists", lambda: updates.append(True))
    args = ["data", "debdeps", "--out", str(tmp_path / "again"), "--lists", str(lists), "--update"]
    assert runner.invoke(app, args).exit_code == 0 and updates == [True]

    missing = write_lists(tmp_path / "bare", translation=False)
    result = runner.invoke(app, ["data", "debdeps", "--out", str(tmp_path / "x"), "--lists", str(missing)])
    assert result.exit_code == 2
    assert "Translation-en" in result.output and "apt-get update -o Acquire::Languages=en" in result.output
    assert not (tmp_path / "x").exists()
