"""A finished LaMP run (training/deep/result.py's NetRunResult): how its net's shape is saved, and the re-ranker's
parts a bundle needs beside the graph (lamp.json, the co-occurring label pairs for LaMP_pr)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from xtag.models.files.atomic import write_atomic, write_text_atomic
from xtag.models.lamp.model import CODES_FILE, HEAD_FILE, LampHeadConfig
from xtag.training.deep.result import NetKind
from xtag.training.lamp.net import LampNet


@dataclass
class LampParts:
    config: LampHeadConfig
    codes: np.ndarray | None  # sorted co-occurring label pairs (models/lamp/masks.py), LaMP_pr only

    def save(self, folder: Path) -> None:
        """folder/lamp/{lamp.json, cooccurrence.npy}: copied as they are into the bundle's lamp/."""
        (folder / "lamp").mkdir(parents=True, exist_ok=True)
        write_text_atomic(folder / "lamp" / HEAD_FILE, self.config.model_dump_json(indent=2))
        if self.codes is not None:
            write_atomic(folder / "lamp" / CODES_FILE, lambda fh: np.save(fh, self.codes))


def _facts(net: LampNet, parts: LampParts) -> dict:
    return {"candidates": parts.config.candidates, "graph": parts.config.graph, "steps": parts.config.steps}


LAMP_NET = NetKind("lamp_net.json", LampNet, lambda net: net.shape, lambda net, chain, parts: parts, _facts)
