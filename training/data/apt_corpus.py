"""One apt-list reader for every corpus rebuilt from a Debian machine's apt lists (Packages ⨝ Translation-en), so debtags and debdeps cannot drift apart."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import lzma
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import lz4.frame
from xtag.corpus.files import write_jsonl_gz
from xtag.models.errors import XtagError

APT_UPDATE = ["apt-get", "update", "-o", "Acquire::Languages=en"]


def _apt_hint() -> str:
    """What fills the apt lists, for this user: `--update` runs apt-get update, which only root may, so another user
    is not told to use it (it failed with "needs root")."""
    if os.geteuid() == 0:
        return "run `xtag data debtags|debdeps --update`, which runs `apt-get update -o Acquire::Languages=en` first"
    return (
        "as root run `apt-get update -o Acquire::Languages=en` (e.g. with sudo), or give --lists a folder holding a "
        "Debian machine's *_Packages and *_Translation-en lists"
    )


_SUFFIXES = ("", ".lz4", ".gz", ".xz", ".bz2")


def _open_list(path: Path) -> IO[str]:
    """Open an apt list as text, whatever compression apt stored it with (by magic bytes, not name)."""
    with open(path, "rb") as fh:
        magic = fh.read(6)
    if magic.startswith(b"\x04\x22\x4d\x18"):
        raw: IO[bytes] = lz4.frame.open(path, "rb")
    elif magic.startswith(b"\x1f\x8b"):
        raw = gzip.open(path, "rb")
    elif magic.startswith(b"\xfd7zXZ"):
        raw = lzma.open(path, "rb")
    elif magic.startswith(b"BZh"):
        raw = bz2.open(path, "rb")
    else:
        raw = open(path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace")


def _candidates(lists_dir: Path, marker: str) -> list[Path]:
    names = [p for p in lists_dir.iterdir() if p.is_file()] if lists_dir.is_dir() else []
    return [p for p in names if any(p.name.endswith(marker + s) for s in _SUFFIXES)]


def find_lists(lists_dir: Path) -> tuple[Path, Path]:
    """The main-component Packages list and its Translation-en list in an apt lists directory."""
    lists_dir = Path(lists_dir)
    if not lists_dir.is_dir():
        raise XtagError(f"{lists_dir}: no such apt lists directory")
    packages = _candidates(lists_dir, "_Packages")
    main = [p for p in packages if "_main_binary-" in p.name] or packages
    if not main:
        raise XtagError(f"{lists_dir}: no Packages list (*_main_binary-amd64_Packages.lz4); {_apt_hint()}")
    # Several suites may be configured (-updates, -security): the main archive's list is by far the largest.
    pkg = max(main, key=lambda p: (p.stat().st_size, p.name))
    translations = _candidates(lists_dir, "_Translation-en")
    if not translations:
        raise XtagError(
            f"{lists_dir}: no Translation-en list (*_main_i18n_Translation-en.lz4) beside {pkg.name}; {_apt_hint()}"
        )
    prefix = pkg.name.split("_binary-")[0] + "_i18n_Translation-en"
    same = [p for p in translations if p.name.startswith(prefix)]
    return pkg, max(same or translations, key=lambda p: (p.stat().st_size, p.name))


def update_apt_lists() -> None:
    """Fetch the apt lists, including the English translations that hold the long descriptions (root only: another
    user is told so before apt-get runs, and what to do instead)."""
    if os.geteuid() != 0:
        raise XtagError(f"--update runs `{' '.join(APT_UPDATE)}`, which needs root; {_apt_hint()}")
    try:
        proc = subprocess.run(APT_UPDATE, capture_output=True, text=True)
    except FileNotFoundError as exc:
        raise XtagError(
            "apt-get not found: the apt corpora (debtags, debdeps) need a Debian machine's apt lists"
        ) from exc
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise XtagError(f"`{' '.join(APT_UPDATE)}` failed (exit {proc.returncode}; needs root): " + " | ".join(tail))


def iter_stanzas(path: Path) -> Iterator[dict[str, str]]:
    """deb822 stanzas one at a time; continuation lines are kept, newline-joined, in the field value."""
    with _open_list(path) as fh:
        stanza: dict[str, str] = {}
        key = ""
        for line in fh:
            line = line.rstrip("\n")
            if not line.strip():
                if stanza:
                    yield stanza
                stanza, key = {}, ""
            elif line[0] in " \t":
                if key:
                    stanza[key] += "\n" + line
            elif ":" in line:
                key, _, value = line.partition(":")
                stanza[key] = value.strip()
        if stanza:
            yield stanza


def render_description(description: str) -> str:
    """'<short>. <long>': long-description lines stripped and space-joined, ' .' paragraph breaks dropped."""
    lines = description.split("\n")
    body = [ln.strip() for ln in lines[1:]]
    return f"{lines[0].strip()}. {' '.join(b for b in body if b and b != '.')}".rstrip()


def is_test(package: str) -> bool:
    """The split rule of every apt corpus: test = packages whose sha1(name) % 5 == 0."""
    return int(hashlib.sha1(package.encode("utf-8")).hexdigest(), 16) % 5 == 0


def build_apt_corpus(
    lists_dir: Path,
    out_dir: Path,
    labels_of: Callable[[dict[str, str]], list[str]],
    *,
    unlabelled: str,
    what: str,
) -> dict:
    """Join Packages with Translation-en on Description-md5; write train/test.jsonl.gz in Packages order.

    `labels_of(stanza)` gives a package's sorted labels; packages with none are counted under
    `unlabelled` and dropped, then exact duplicate texts (first kept). `what` names the label
    field in the error raised when no package qualifies.
    """
    packages, translation = find_lists(Path(lists_dir))
    descriptions = {
        s["Description-md5"]: s["Description-en"]
        for s in iter_stanzas(translation)
        if "Description-md5" in s and "Description-en" in s
    }
    splits: dict[str, list[dict]] = {"train": [], "test": []}
    seen: set[str] = set()
    labels: set[str] = set()
    stats = {"dropped_duplicates": 0, unlabelled: 0, "no_translation": 0}
    for stanza in iter_stanzas(packages):
        name = stanza.get("Package")
        if not name:
            continue
        row_labels = labels_of(stanza)
        if not row_labels:
            stats[unlabelled] += 1
            continue
        description = descriptions.get(stanza.get("Description-md5", ""))
        if description is None:
            stats["no_translation"] += 1
            description = stanza.get("Description", "")
            if not description.strip():
                continue
        text = render_description(description)
        if text in seen:
            stats["dropped_duplicates"] += 1
            continue
        seen.add(text)
        labels.update(row_labels)
        splits["test" if is_test(name) else "train"].append({"id": name, "text": text, "labels": row_labels})
    if not seen:
        raise XtagError(f"{packages}: no package has both {what} and a description")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        write_jsonl_gz(out_dir / f"{split}.jsonl.gz", rows)
    return {"train": len(splits["train"]), "test": len(splits["test"]), "labels": len(labels), **stats}
