"""What each label says: its name, other names, description and broader labels (a vocabulary's hierarchy).

A label is known by its id, the string a corpus uses (`LabelVocab.names`). The label file a user gives
(corpus/label_files.py reads JSONL, Annif TSV and SKOS into this type) adds text to those ids; a run keeps it
as `label_texts.jsonl` and a bundle serves it. numpy-free and torch-free: a leaf of models/, like labels.py.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from xtag.models.errors import XtagError

LABEL_TEXTS_FILE = "label_texts.jsonl"  # a run's model/ and a bundle keep the label file under this name


@dataclass(frozen=True)
class LabelText:
    id: str
    name: str | None = None
    description: str | None = None
    alt_labels: tuple[str, ...] = ()
    broader: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """The text a label-text model reads: its name, other names and description, or its id when it has
        none of them."""
        parts = [p for p in (self.name, *self.alt_labels, self.description) if p]
        return ". ".join(parts) if parts else self.id

    @property
    def has_text(self) -> bool:
        """Whether the label says more than its id (a name equal to the id says nothing)."""
        return bool(self.description or self.alt_labels or (self.name and self.name != self.id))

    def as_json(self) -> dict:
        row: dict = {"id": self.id}
        if self.name is not None:
            row["name"] = self.name
        if self.description is not None:
            row["description"] = self.description
        if self.alt_labels:
            row["alt_labels"] = list(self.alt_labels)
        if self.broader:
            row["broader"] = list(self.broader)
        return row


@dataclass
class LabelTexts:
    """The label file's rows in file order, by id; `broader` names ids of the same file and has no cycle."""

    labels: list[LabelText]
    source: str = ""
    index: dict[str, int] = field(init=False, repr=False)
    _children: dict[str, list[str]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.index = {}
        for i, label in enumerate(self.labels):
            if label.id in self.index:
                raise XtagError(f"{self.source or 'label texts'}: label {label.id!r} is given twice")
            self.index[label.id] = i
        self._children = {}
        for label in self.labels:
            for parent in label.broader:
                if parent not in self.index:
                    raise XtagError(
                        f"{self.source or 'label texts'}: label {label.id!r} has broader {parent!r}, "
                        "which is not a label of the file"
                    )
                self._children.setdefault(parent, []).append(label.id)
        cycle = self._a_cycle()
        if cycle:
            raise XtagError(f"{self.source or 'label texts'}: broader labels form a cycle: {' → '.join(cycle)}")

    def __len__(self) -> int:
        return len(self.labels)

    def __contains__(self, label_id: str) -> bool:
        return label_id in self.index

    def get(self, label_id: str) -> LabelText | None:
        i = self.index.get(label_id)
        return None if i is None else self.labels[i]

    def texts_for(self, ids: Sequence[str]) -> list[str]:
        """The text of each id, in order; an id the file does not have reads as itself."""
        return [label.text if (label := self.get(i)) is not None else i for i in ids]

    def branch(self, ids: Iterable[str]) -> set[str]:
        """The ids and every label below them through `broader` (narrower, transitively)."""
        seen: set[str] = set()
        stack = list(ids)
        while stack:
            label_id = stack.pop()
            if label_id not in seen:
                seen.add(label_id)
                stack.extend(self._children.get(label_id, ()))
        return seen

    def _a_cycle(self) -> list[str]:
        """One broader cycle as a path of ids (first id repeated at the end), or [] when there is none."""
        state: dict[str, int] = {}  # 1: on the current path, 2: done
        for root in self.index:
            if state.get(root):
                continue
            path: list[str] = []
            stack: list[tuple[str, int]] = [(root, 0)]
            while stack:
                node, i = stack.pop()
                parents = self.labels[self.index[node]].broader
                if i == 0:
                    state[node] = 1
                    path.append(node)
                if i < len(parents):
                    stack.append((node, i + 1))
                    parent = parents[i]
                    if state.get(parent) == 1:
                        return [*path[path.index(parent) :], parent]
                    if not state.get(parent):
                        stack.append((parent, 0))
                else:
                    state[node] = 2
                    path.pop()
        return []

    def save(self, path: Path) -> None:
        """One JSON object a line, the label file format (`labels.jsonl`), which `load` and every reader read back."""
        with path.open("w", encoding="utf-8") as out:
            for label in self.labels:
                out.write(json.dumps(label.as_json(), ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, path: Path) -> LabelTexts:
        """A file `save` wrote (a run's or a bundle's `label_texts.jsonl`); user files go through
        corpus/label_files.py, which reports their errors by line."""
        opener = gzip.open if path.suffix == ".gz" else open
        labels = []
        try:
            with opener(path, "rt", encoding="utf-8") as rows:
                for line in rows:
                    if line.strip():
                        labels.append(from_json(json.loads(line)))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise XtagError(f"{path}: not a valid label texts file ({exc})") from exc
        return cls(labels, source=str(path))


def from_json(row: dict) -> LabelText:
    """One label file row → LabelText; raises TypeError/KeyError/ValueError naming the field that is wrong."""
    if not isinstance(row, dict):
        raise TypeError("a row is a JSON object")
    unknown = set(row) - {"id", "name", "description", "alt_labels", "broader"}
    if unknown:
        raise KeyError(f"unknown field {sorted(unknown)[0]!r} (fields: id, name, description, alt_labels, broader)")
    label_id = row["id"] if "id" in row else None
    if not isinstance(label_id, str) or not label_id.strip():
        raise ValueError('"id" must be a non-empty string')
    for key in ("name", "description"):
        if row.get(key) is not None and not isinstance(row[key], str):
            raise ValueError(f'"{key}" must be a string')
    lists = {}
    for key in ("alt_labels", "broader"):
        value = row.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f'"{key}" must be a list of strings')
        lists[key] = tuple(value)
    return LabelText(label_id, row.get("name"), row.get("description"), lists["alt_labels"], lists["broader"])


def shown_fields(texts: LabelTexts | None, label_id: str) -> dict:
    """What a returned label carries when its text is asked for (the service's and `xtag predict`'s `label_text`):
    `label`, its name (its id when it has none, as Annif shows a label), and `description` (None when it has none)."""
    label = None if texts is None else texts.get(label_id)
    if label is None:
        return {"label": label_id, "description": None}
    return {"label": label.name or label_id, "description": label.description}
