"""A tiny corpus with a label file: every topic label described, and one label (sci::astro) that no training
document carries, whose description alone says what it is; the fused bundle trained on them (session fixtures,
imported by the tests that use them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import TOPICS

NEW_LABEL = "sci::astro"
NEW_WORDS = "telescope galaxy orbit stellar planet"


# Words only the label file has: a label added later from its text alone (xtag update --labels) can only be
# found through words the stage's encoder knows, and its TF-IDF is fitted at training time.
LATER_WORDS = "ocean marine tide coral reef"


def label_rows() -> list[dict]:
    rows = [{"id": name, "name": name, "description": words} for name, words in TOPICS.items()]
    rows[-1]["description"] += f"; also {LATER_WORDS}"
    return [*rows, {"id": NEW_LABEL, "name": "astronomy", "description": NEW_WORDS}]


def train_fused(corpus: Path, labels: Path, out: Path, **label_text) -> Path:
    from xtag.models.features.tfidf import TfidfConfig
    from xtag.training.config import TrainConfig
    from xtag.training.export.export_run import export_run
    from xtag.training.run import train_run
    from xtag.training.tree.build import TreeConfig
    from xtag.training.xlinear.config import XLinearConfig

    config = TrainConfig(
        corpus=corpus,
        labels=labels,
        tfidf=TfidfConfig(min_df=1),
        xlinear=XLinearConfig(n_jobs=1, tree=TreeConfig(branching=2, max_leaf_size=4)),
        label_text={
            "heldout_fraction": 0.25,
            "tree_candidates": 3,
            "index_candidates": 3,
            "encoder": {"kind": "tfidf", "tfidf": {"min_df": 1}},  # the new label's words are in its text alone
            **label_text,
        },
    )
    train_run(config, out / "run", progress=False)
    export_run(out / "run", out / "bundle")
    return out / "bundle"


@pytest.fixture(scope="session")
def label_file(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("label_file")
    (folder / "labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in label_rows()))
    return folder / "labels.jsonl"


@pytest.fixture(scope="session")
def fused_bundle(corpus_files, label_file, tmp_path_factory) -> Path:
    return train_fused(corpus_files[0], label_file, tmp_path_factory.mktemp("fused"))
