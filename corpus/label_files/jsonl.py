"""xtag's own label file, `labels.jsonl[.gz]`: one JSON object a line, errors by FILE:LINE."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from xtag.corpus.files import json_error
from xtag.models.errors import XtagError
from xtag.models.label_texts import LabelText, LabelTexts, from_json


def read_jsonl(path: Path) -> LabelTexts:
    """One row a label: `{"id", "name"?, "description"?, "alt_labels"?: [...], "broader"?: [ids]}`."""
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
                except json.JSONDecodeError as exc:
                    raise XtagError(f"{path}:{n}: {json_error(exc)}") from exc
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
