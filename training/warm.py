"""Compile the trainer's Numba kernels once, at install, so a user's first `xtag train` loads them from numba's
on-disk cache instead of compiling them (issue 28: 28.4 s cold against 19.2 s warm on debdeps).

It trains a real run on a tiny corpus made here: the kernels then compile for exactly the argument types a
real run passes them, which a hand-made call per kernel could get subtly wrong (and numba would compile again).
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from pathlib import Path

from xtag.training.config import TrainConfig
from xtag.training.run import train_run

N_LABELS, N_DOCS = 24, 240


def _rows() -> list[dict]:
    """Documents of two labels each, whose words name their labels: enough labels for a three-level tree."""
    rng = random.Random(0)
    rows = []
    for i in range(N_DOCS):
        labels = rng.sample(range(N_LABELS), 2)
        words = [f"w{label}x{rng.randrange(3)}" for label in labels for _ in range(3)] + ["tool", "data"]
        rows.append({"id": str(i), "text": " ".join(words), "labels": [f"l{label}" for label in labels]})
    return rows


def warm_training() -> float:
    """Train the default model kind with its default settings (a smaller tree: the types do not change) on
    the tiny corpus, in a temporary folder; returns the seconds it took."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="xtag-warm-") as tmp:
        corpus = Path(tmp) / "train.jsonl"
        corpus.write_text("".join(json.dumps(row) + "\n" for row in _rows()))
        config = TrainConfig.model_validate(
            {"corpus": corpus, "tfidf": {"min_df": 1}, "xlinear": {"tree": {"branching": 2, "max_leaf_size": 4}}}
        )
        train_run(config, Path(tmp) / "run", progress=False)
    return time.perf_counter() - start
