"""Corpus loaders (JSONL, Annif TSV, AttentionXML pairs) and the label vocabulary."""

from __future__ import annotations

import gzip
import io
import itertools
import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import orjson
import scipy.sparse as sp
from xtag.models.errors import XtagError
from xtag.models.labels import LabelVocab

CorpusFormat = Literal["auto", "jsonl", "tsv", "attentionxml"]


@dataclass
class Corpus:
    """Texts with their label names, as read from a file; ids are the corpus ids or line numbers."""

    ids: list[str]
    texts: list[str]
    labels: list[list[str]]
    skipped: int = 0
    source: str = ""
    skipped_lines: list[int] = field(default_factory=list)
    skipped_why: list[str] = field(default_factory=list)  # the reason of each skipped line, in the same order

    def __len__(self) -> int:
        return len(self.texts)

    def skipped_note(self, shown: int = 10) -> str | None:
        """Which rows --skip-bad-rows left out, and why ("source: skipped 2 malformed rows: line 3 (no text),
        ..."); None when none was. At most `shown` lines are listed; the count is always whole."""
        if not self.skipped:
            return None
        listed = ", ".join(f"line {n} ({why})" for n, why in zip(self.skipped_lines[:shown], self.skipped_why))
        more = f", and {self.skipped - shown} more" if self.skipped > shown else ""
        rows = "row" if self.skipped == 1 else "rows"
        return f"{self.source}: skipped {self.skipped} malformed {rows}: {listed}{more}"

    def label_matrix(self, vocab: LabelVocab, extra: Sequence[str] = ()) -> tuple[sp.csr_matrix, int]:
        """Binary doc×label matrix over `vocab` (then one column per name of `extra`); also returns how
        many label mentions are in neither.

        Training wants the model's labels only. Evaluation under the XMC convention passes the test
        labels the model has never seen (`unseen_labels`) as `extra`, so their mentions stay in the
        ground truth as misses instead of vanishing (models/metrics.py).
        """
        index = dict(vocab.index)
        for name in extra:
            index.setdefault(name, len(index))
        indptr, indices, unknown = [0], [], 0
        for names in self.labels:
            ids = sorted({index[n] for n in names if n in index})
            unknown += sum(1 for n in set(names) if n not in index)
            indices.extend(ids)
            indptr.append(len(indices))
        data = np.ones(len(indices), dtype=np.float32)
        Y = sp.csr_matrix(
            (data, np.asarray(indices, dtype=np.int64), np.asarray(indptr)), shape=(len(self), len(index))
        )
        return Y, unknown

    def unseen_labels(self, vocab: LabelVocab) -> list[str]:
        """The corpus's label names the vocabulary lacks, sorted (stable column order whatever the row order)."""
        return sorted({n for names in self.labels for n in names if n not in vocab.index})


def label_counts(corpus: Corpus) -> Counter:
    """Documents per label name (a name twice in one row counts once)."""
    return Counter(n for names in corpus.labels for n in set(names))


def build_vocab(corpus: Corpus) -> LabelVocab:
    """Label ids are the sorted label names: stable whatever the row order of the corpus."""
    counts = label_counts(corpus)
    names = sorted(counts)
    return LabelVocab(names=names, frequencies=[counts[n] for n in names], n_train_docs=len(corpus))


def write_jsonl_gz(path: Path, rows: Iterable[dict], level: int = 9, ensure_ascii: bool = True) -> None:
    """Rows as gzipped JSON lines, reproducibly (no name or mtime in the gzip header), replaced atomically.
    `level` 1 for files written on a user's clock (an update's corpus: level 9 took seconds of it); there
    `ensure_ascii=False` writes UTF-8 with orjson, several times faster than the json module."""
    tmp = path.with_name(path.name + ".tmp")
    if ensure_ascii:
        lines = ((json.dumps(row) + "\n").encode("utf-8") for row in rows)
    else:
        lines = (orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE) for row in rows)
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=level) as gz:
        while chunk := b"".join(itertools.islice(lines, 1024)):  # one compressor call per 1,024 rows, not per row
            gz.write(chunk)
    os.replace(tmp, path)


def _open_text(path: Path) -> io.TextIOBase:
    if not path.exists():
        raise XtagError(f"{path}: no such corpus file")
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="strict")
    return open(path, encoding="utf-8", errors="strict")


Span = tuple[int, int | None]  # lines first..stop-1, numbered from 1 (stop None: to the end): one shard of a file


def _lines(path: Path, span: Span | None = None) -> Iterator[tuple[int, str]]:
    with _open_text(path) as fh:
        numbered = enumerate(fh, start=1)
        if span is not None:
            numbered = itertools.islice(numbered, span[0] - 1, None if span[1] is None else span[1] - 1)
        try:
            for number, line in numbered:
                yield number, line.rstrip("\n").rstrip("\r")
        except UnicodeDecodeError as exc:
            raise XtagError(f"{path}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from exc


def detect_format(path: Path) -> CorpusFormat:
    name = path.name.removesuffix(".gz")
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    if name.endswith(".tsv"):
        return "tsv"
    if name.endswith("_texts.txt") or name.endswith("texts.txt"):
        return "attentionxml"
    raise XtagError(f"{path}: cannot tell the corpus format from the name; use --format jsonl|tsv|attentionxml")


class _Reader:
    """Collects rows, and either raises on a malformed one or counts it when skipping is allowed."""

    def __init__(self, path: Path, skip_bad: bool, span: Span | None = None):
        self.path, self.skip_bad, self.span = path, skip_bad, span
        self.corpus = Corpus(ids=[], texts=[], labels=[], source=str(path))

    def bad(self, line: int, why: str, column: int | None = None) -> None:
        if not self.skip_bad:  # FILE:LINE(:COLUMN): what editors and terminals open at the place
            raise XtagError(f"{self.path}:{line}{'' if column is None else f':{column}'}: {why}")
        self.corpus.skipped += 1
        self.corpus.skipped_lines.append(line)
        self.corpus.skipped_why.append(why)

    def add(self, line: int, doc_id: object, text: object, labels: object, need_labels: bool) -> None:
        if not isinstance(text, str) or not text.strip():
            return self.bad(line, "no text")
        try:  # one pass: only strings have .strip (JSON gives no other type that does)
            labels = [x.strip() for x in labels] if isinstance(labels, list) else None
        except AttributeError:
            labels = None
        if labels is None or not all(labels):
            return self.bad(line, "labels must be a list of non-empty strings")
        if need_labels and not labels:
            return self.bad(line, "no labels")
        self.corpus.ids.append(str(doc_id) if doc_id is not None else str(line))
        self.corpus.texts.append(text)
        self.corpus.labels.append(labels)


def _read_jsonl(r: _Reader, need_labels: bool) -> None:
    for number, line in _lines(r.path, r.span):
        if not line.strip():
            continue
        try:  # orjson reads a row several times faster; the json module's reading stands where it refuses one
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            try:  # what orjson refuses but JSON readers accept (NaN, integers over 64 bits), or the message
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                r.bad(number, json_error(exc), exc.colno)
                continue
        if not isinstance(row, dict):
            r.bad(number, "a row must be a JSON object with 'text' and 'labels'")
            continue
        r.add(number, row.get("id"), row.get("text"), row.get("labels", [] if not need_labels else None), need_labels)


def json_error(exc: json.JSONDecodeError) -> str:
    """The JSON reader's whole reason, its column, and the text around it (a row can be long: only there)."""
    text = exc.doc.rstrip("\n")
    near = text[max(0, exc.pos - 30) : exc.pos + 30]
    marked = f"{'...' if exc.pos > 30 else ''}{near}{'...' if exc.pos + 30 < len(text) else ''}"
    return f"bad JSON: {exc.msg} at column {exc.colno}, near {marked!r}"


def _read_tsv(r: _Reader, need_labels: bool) -> None:
    for number, line in _lines(r.path, r.span):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) != 2:
            r.bad(number, f"expected 2 tab-separated columns (text, labels), found {len(cols)}")
            continue
        uris = [u.strip("<>") for u in cols[1].split()]
        r.add(number, None, cols[0], uris, need_labels)


def _read_attentionxml(r: _Reader, need_labels: bool) -> None:
    name = r.path.name
    labels_name = name.replace("texts", "labels", 1) if "texts" in name else None
    labels_path = r.path.with_name(labels_name) if labels_name else None
    if labels_path is None or not labels_path.exists():
        raise XtagError(f"{r.path}: AttentionXML texts need a labels file beside them ({labels_path})")
    texts = list(_lines(r.path, r.span))
    labels = list(_lines(labels_path, r.span))
    if len(texts) != len(labels):
        raise XtagError(f"{r.path}: {len(texts)} texts but {labels_path} has {len(labels)} label lines")
    for (number, text), (_, label_line) in zip(texts, labels):
        r.add(number, None, text, label_line.split(), need_labels)


def load_corpus(
    path: str | Path, fmt: CorpusFormat = "auto", skip_bad: bool = False, need_labels: bool = True
) -> Corpus:
    """Read a corpus; malformed rows raise XtagError naming file and line unless `skip_bad`."""
    corpus = read_span(path, None, fmt, skip_bad, need_labels)
    if not corpus.texts:
        raise XtagError(f"{path}: no usable rows")
    return corpus


def read_span(
    path: str | Path, span: Span | None, fmt: CorpusFormat = "auto", skip_bad: bool = False, need_labels: bool = True
) -> Corpus:
    """The rows of lines `span` of a corpus file (all of it: None), read and checked as load_corpus reads them, with
    the same line numbers (and ids of rows without one): distributed scoring reads its shards with this."""
    path = Path(path)
    fmt = detect_format(path) if fmt == "auto" else fmt
    reader = _Reader(path, skip_bad, span)
    {"jsonl": _read_jsonl, "tsv": _read_tsv, "attentionxml": _read_attentionxml}[fmt](reader, need_labels)
    return reader.corpus
