"""The debtags corpus builder on tiny fake apt lists (no /var/lib/apt, no network)."""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

import lz4.frame
import pytest
from xtag.models.errors import XtagError
from xtag.training.data import apt_corpus, debtags

PACKAGES = """\
Package: delta
Version: 1.0
Description: delta tool
Description-md5: m-delta
Tag: role::program, implemented-in::c,
 interface::commandline
Section: utils

Package: alpha
Description: alpha lib
Description-md5: m-alpha
Tag: role::shared-lib

Package: notags
Description: a package nobody tagged
Description-md5: m-notags

Package: alpha-copy
Description: alpha lib
Description-md5: m-alpha
Tag: role::shared-lib, devel::library

Package: bare
Description: Transitional package
Description-md5: m-bare
Tag: role::dummy, role::dummy

Package: untranslated
Description: only in Packages
Tag: role::program
"""

TRANSLATION = """\
Package: delta
Description-md5: m-delta
Description-en: delta tool
 Delta does things.  Twice
 over several lines.
 .
 Features:
  * one
  * two

Package: alpha
Description-md5: m-alpha
Description-en: alpha lib
 Shared library for alpha.

Package: notags
Description-md5: m-notags
Description-en: a package nobody tagged
 Never in the corpus.

Package: bare
Description-md5: m-bare
Description-en: Transitional package
"""

APT = "deb.debian.org_debian_dists_bookworm_main"


def write_lists(lists: Path, compress: bool = True, translation: bool = True) -> Path:
    lists.mkdir(parents=True, exist_ok=True)
    files = {f"{APT}_binary-amd64_Packages": PACKAGES}
    if translation:
        files[f"{APT}_i18n_Translation-en"] = TRANSLATION
    for name, text in files.items():
        if compress:
            (lists / f"{name}.lz4").write_bytes(lz4.frame.compress(text.encode("utf-8")))
        else:
            (lists / name).write_text(text, encoding="utf-8")
    return lists


def read_rows(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


@pytest.mark.parametrize("compress", [True, False])
def test_build_corpus_rows_split_dedup_and_stats(tmp_path: Path, compress: bool) -> None:
    lists = write_lists(tmp_path / "lists", compress=compress)
    stats = debtags.build_debtags_corpus(lists, tmp_path / "out")
    rows = read_rows(tmp_path / "out" / "train.jsonl.gz") + read_rows(tmp_path / "out" / "test.jsonl.gz")
    by_id = {r["id"]: r for r in rows}

    assert set(by_id) == {"delta", "alpha", "bare", "untranslated"}  # notags dropped, alpha-copy a duplicate text
    assert by_id["delta"] == {
        "id": "delta",
        "text": "delta tool. Delta does things.  Twice over several lines. Features: * one * two",
        "labels": ["implemented-in::c", "interface::commandline", "role::program"],
    }
    assert by_id["alpha"]["text"] == "alpha lib. Shared library for alpha."
    assert by_id["bare"] == {"id": "bare", "text": "Transitional package.", "labels": ["role::dummy"]}
    assert by_id["untranslated"]["text"] == "only in Packages."

    for split in ("train", "test"):
        ids = [r["id"] for r in read_rows(tmp_path / "out" / f"{split}.jsonl.gz")]
        assert all(apt_corpus.is_test(i) == (split == "test") for i in ids)
        order = [p for p in ("delta", "alpha", "bare", "untranslated") if p in ids]
        assert ids == order  # same order as the Packages list
    assert stats == {
        "train": sum(not apt_corpus.is_test(i) for i in by_id),
        "test": sum(apt_corpus.is_test(i) for i in by_id),
        "labels": 5,
        "dropped_duplicates": 1,
        "no_tags": 1,
        "no_translation": 1,
    }
    assert stats["test"] == 1 and stats["train"] == 3  # delta is the one with sha1 % 5 == 0


def test_split_rule_is_sha1_mod_5() -> None:
    import hashlib

    names = [f"pkg{i}" for i in range(200)]
    expected = [n for n in names if int(hashlib.sha1(n.encode()).hexdigest(), 16) % 5 == 0]
    assert [n for n in names if apt_corpus.is_test(n)] == expected
    assert 0 < len(expected) < 200


def test_output_is_deterministic(tmp_path: Path) -> None:
    lists = write_lists(tmp_path / "lists")
    debtags.build_debtags_corpus(lists, tmp_path / "a")
    debtags.build_debtags_corpus(lists, tmp_path / "b")
    for split in ("train.jsonl.gz", "test.jsonl.gz"):
        assert (tmp_path / "a" / split).read_bytes() == (tmp_path / "b" / split).read_bytes()


def test_find_lists_prefers_main_archive_and_its_translation(tmp_path: Path) -> None:
    lists = write_lists(tmp_path / "lists")
    small = "deb.debian.org_debian-security_dists_bookworm-security_main"
    (lists / f"{small}_binary-amd64_Packages.lz4").write_bytes(lz4.frame.compress(b"Package: x\n"))
    (lists / f"{small}_i18n_Translation-en.lz4").write_bytes(lz4.frame.compress(b"Package: x\n"))
    pkg, tr = apt_corpus.find_lists(lists)
    assert pkg.name == f"{APT}_binary-amd64_Packages.lz4"
    assert tr.name == f"{APT}_i18n_Translation-en.lz4"


def test_missing_translation_names_it_and_the_fix(tmp_path: Path) -> None:
    lists = write_lists(tmp_path / "lists", translation=False)
    with pytest.raises(XtagError, match="Translation-en") as info:
        debtags.build_debtags_corpus(lists, tmp_path / "out")
    assert "apt-get update -o Acquire::Languages=en" in str(info.value)
    assert not (tmp_path / "out").exists()


def test_missing_packages_and_missing_dir(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(XtagError, match="Packages"):
        apt_corpus.find_lists(tmp_path / "empty")
    with pytest.raises(XtagError, match="no such apt lists directory"):
        apt_corpus.find_lists(tmp_path / "nope")


def test_update_apt_lists_failure_is_xtag_error(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 100, "", "E: Could not open lock file")

    monkeypatch.setattr(apt_corpus.subprocess, "run", fake_run)
    monkeypatch.setattr(apt_corpus.os, "geteuid", lambda: 0)  # as root, apt-get runs
    with pytest.raises(XtagError, match="lock file"):
        apt_corpus.update_apt_lists()
    assert calls == [["apt-get", "update", "-o", "Acquire::Languages=en"]]

    def missing(cmd: list[str], **kwargs: object) -> None:
        raise FileNotFoundError(cmd[0])

    monkeypatch.setattr(apt_corpus.subprocess, "run", missing)
    with pytest.raises(XtagError, match="apt-get not found"):
        apt_corpus.update_apt_lists()


def test_another_user_is_not_told_to_use_update_and_update_says_why_not(tmp_path: Path, monkeypatch) -> None:
    """Issue 47: a non-root user was told to run `--update`, which then failed with "needs root"."""
    monkeypatch.setattr(apt_corpus.os, "geteuid", lambda: 1000)
    lists = write_lists(tmp_path / "lists", translation=False)
    with pytest.raises(XtagError) as info:
        debtags.build_debtags_corpus(lists, tmp_path / "out")
    assert "--update" not in str(info.value) and "--lists" in str(info.value), info.value
    ran: list[list[str]] = []
    monkeypatch.setattr(apt_corpus.subprocess, "run", lambda cmd, **kw: ran.append(cmd))
    with pytest.raises(XtagError, match="needs root; as root run `apt-get update") as info:
        apt_corpus.update_apt_lists()
    assert ran == [] and "--lists" in str(info.value)
    monkeypatch.setattr(apt_corpus.os, "geteuid", lambda: 0)
    with pytest.raises(XtagError, match="--update") as info:
        debtags.build_debtags_corpus(lists, tmp_path / "out")
