"""Annif's TSV vocabulary: `<uri>\\tlabel` a line, optionally a third column, the notation.

The id is the URI without its angle brackets, as corpus/files.py reads the subjects of an Annif TSV corpus, so a
vocabulary and its corpus name the same labels. Annif's notation (a classification code) is read and not kept:
xtag's label texts have no field for it.
"""

from __future__ import annotations

import gzip
from pathlib import Path

from xtag.models.errors import XtagError
from xtag.models.label_texts import LabelText, LabelTexts


def read_annif_tsv(path: Path) -> LabelTexts:
    """The vocabulary's labels in file order; a bad line raises XtagError with FILE:LINE and the reason."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            lines = [line.rstrip("\n") for line in fh]
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise XtagError(f"{path}: cannot read the label file ({exc})") from exc
    labels: list[LabelText] = []
    line_of: dict[str, int] = {}
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) not in (2, 3):
            raise XtagError(
                f"{path}:{n}: expected 2 or 3 tab-separated columns (<uri>, label, notation), found {len(cols)}"
            )
        uri, name = cols[0].strip(), cols[1].strip()
        label_id = uri.strip("<>")  # as corpus/files.py reads an Annif corpus's subjects
        if not label_id or any(c.isspace() for c in label_id):
            raise XtagError(f"{path}:{n}: {uri!r} is not a subject URI (one word, in angle brackets or not)")
        if not name:
            raise XtagError(f"{path}:{n}: subject {label_id!r} has no label")
        if label_id in line_of:
            raise XtagError(f"{path}:{n}: subject {label_id!r} is given twice (first on line {line_of[label_id]})")
        line_of[label_id] = n
        labels.append(LabelText(label_id, name=name))
    return LabelTexts(labels, source=str(path))
