"""Label files: what each label says, read from the formats users have, errors by FILE:LINE (or the concept's URI).

A label file gives text to the ids a corpus uses (models/label_texts.py). It may name labels that no training
document carries: those are the labels a label-text model can still return. One reader per format:
`jsonl.py` (xtag's own `labels.jsonl[.gz]`), `annif_tsv.py` (Annif's TSV vocabulary), `skos.py` (SKOS in Turtle
or RDF/XML, through rdflib); the format is told by the file's name, else by its first bytes.
"""

from __future__ import annotations

import gzip
from collections.abc import Sequence
from pathlib import Path

from xtag.corpus.label_files.annif_tsv import read_annif_tsv
from xtag.corpus.label_files.jsonl import read_jsonl
from xtag.corpus.label_files.skos import RDF_SUFFIXES, rdf_syntax, read_skos
from xtag.models.errors import XtagError
from xtag.models.label_texts import LabelTexts

READERS = {"jsonl": read_jsonl, "tsv": read_annif_tsv, "skos": read_skos}


def read_label_file(path: Path) -> LabelTexts:
    """The label file at `path`: `.jsonl[.gz]` (one row a label: `{"id", "name"?, "description"?,
    "alt_labels"?: [...], "broader"?: [ids]}`), Annif's `.tsv` vocabulary (`<uri>\\tlabel[\\tnotation]`) or SKOS
    (`.ttl`, `.rdf`, ...); a bad one raises XtagError naming FILE:LINE (or the concept's URI) and the reason."""
    path = Path(path)
    if not path.is_file():
        raise XtagError(f"{path}: no such label file")
    texts = READERS[label_file_format(path)](path)
    if not len(texts):
        raise XtagError(f"{path}: the label file names no label")
    return texts


def label_file_format(path: Path) -> str:
    """ "jsonl", "tsv" or "skos": by the name (a `.gz` suffix aside), else by the first bytes of the file."""
    name = path.name.lower().removesuffix(".gz")
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if name.endswith(".tsv"):
        return "tsv"
    if name.endswith(RDF_SUFFIXES):
        return "skos"
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as fh:
            head = fh.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    except (OSError, EOFError) as exc:
        raise XtagError(f"{path}: cannot read the label file ({exc})") from exc
    first = head.split(b"\n", 1)[0]
    if head.startswith(b"{"):
        return "jsonl"
    if rdf_syntax(head) is not None:
        return "skos"
    if b"\t" in first:
        return "tsv"
    raise XtagError(
        f"{path}: cannot tell the label file's format; name it .jsonl (xtag), .tsv (Annif) or .ttl / .rdf (SKOS)"
    )


def missing_note(texts: LabelTexts, corpus_labels: Sequence[str], shown: int = 5) -> str | None:
    """One warning line for the corpus's labels that the label file lacks (they keep their id as their text),
    with the count; None when the file has them all."""
    missing = [name for name in corpus_labels if name not in texts]
    if not missing:
        return None
    listed = ", ".join(repr(m) for m in missing[:shown]) + (", ..." if len(missing) > shown else "")
    return (
        f"{texts.source}: {len(missing)} of the corpus's {len(corpus_labels)} labels are not in the label file "
        f"({listed}); they keep their id as their text"
    )
