"""Label files: what each label says, read from the formats users have (`labels.jsonl[.gz]`), errors by FILE:LINE.

A label file gives text to the ids a corpus uses (models/label_texts.py). It may name labels that no training
document carries: those are the labels a label-text model can still return.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path

from xtag.models.errors import XtagError
from xtag.models.label_texts import LabelText, LabelTexts, from_json


def read_label_file(path: Path) -> LabelTexts:
    """The label file at `path`, by its suffix: `.jsonl` or `.jsonl.gz`, one row a label:
    `{"id", "name"?, "description"?, "alt_labels"?: [...], "broader"?: [ids]}`."""
    path = Path(path)
    if not path.is_file():
        raise XtagError(f"{path}: no such label file")
    return _read_jsonl(path)


def _read_jsonl(path: Path) -> LabelTexts:
    opener = gzip.open if path.suffix == ".gz" else open
    labels: list[LabelText] = []
    line_of: dict[str, int] = {}
    try:
        with opener(path, "rt", encoding="utf-8") as rows:
            for n, line in enumerate(rows, start=1):
                if not line.strip():
                    continue
                try:
                    label = from_json(json.loads(line))
                except (ValueError, KeyError, TypeError) as exc:
                    reason = exc.args[0] if isinstance(exc, KeyError) else exc
                    raise XtagError(f"{path}:{n}: {reason}") from exc
                if label.id in line_of:
                    raise XtagError(
                        f"{path}:{n}: label {label.id!r} is given twice (first on line {line_of[label.id]})"
                    )
                line_of[label.id] = n
                labels.append(label)
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise XtagError(f"{path}: cannot read the label file ({exc})") from exc
    for label in labels:
        unknown = next((b for b in label.broader if b not in line_of), None)
        if unknown is not None:
            raise XtagError(f"{path}:{line_of[label.id]}: broader {unknown!r} is not a label of the file")
    return LabelTexts(labels, source=str(path))  # a broader cycle is refused there, naming its labels


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
