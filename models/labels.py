"""Label vocabulary: names by integer id and the training frequencies that propensities and reweighting need."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from xtag.models.errors import XtagError


@dataclass
class LabelVocab:
    names: list[str]
    frequencies: list[int]
    n_train_docs: int
    index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.names) != len(self.frequencies):
            raise XtagError("label vocabulary: names and frequencies differ in length")
        self.index = {n: i for i, n in enumerate(self.names)}
        if len(self.index) != len(self.names):  # a name given twice: its first id would never be found by name
            twice = next(n for i, n in enumerate(self.names) if self.index[n] != i)
            raise XtagError(f"names: {twice!r} is given to labels {self.names.index(twice)} and {self.index[twice]}")
        if not all(isinstance(n, str) for n in self.names):
            raise XtagError(f"names: {next(n for n in self.names if not isinstance(n, str))!r} is not a string")
        if self.n_train_docs < 0 or (self.frequencies and min(self.frequencies) < 0):
            raise XtagError("frequencies and n_train_docs are counts of training documents: none is negative")

    def __len__(self) -> int:
        return len(self.names)

    @property
    def frequency_array(self) -> np.ndarray:
        return np.asarray(self.frequencies, dtype=np.float64)

    def with_added(self, names: list[str]) -> LabelVocab:
        """This vocabulary with `names` appended as labels no training document carries (frequency 0)."""
        return LabelVocab([*self.names, *names], [*self.frequencies, *([0] * len(names))], self.n_train_docs)

    def save(self, path: Path) -> None:
        payload = {"names": self.names, "frequencies": self.frequencies, "n_train_docs": self.n_train_docs}
        path.write_text(json.dumps(payload, ensure_ascii=False))

    @classmethod
    def load(cls, path: Path) -> LabelVocab:
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
            return cls(payload["names"], [int(f) for f in payload["frequencies"]], int(payload["n_train_docs"]))
        except (OSError, KeyError, TypeError, ValueError) as exc:
            raise XtagError(f"{path}: not a valid label file ({exc})") from exc
