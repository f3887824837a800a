"""Shared fixtures: tiny synthetic corpora built in code, so tests never depend on ../shared."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

TOPICS = {
    "game::fps": "shooter weapons arena multiplayer frag",
    "game::puzzle": "puzzle tiles blocks solve logic",
    "net::web": "http server browser html proxy",
    "net::mail": "email smtp imap mailbox inbox",
    "lang::python": "python module pip interpreter script",
    "lang::c": "compiler gcc pointer header library",
    "media::audio": "audio sound mixer music player",
    "media::video": "video codec stream movie encoder",
    "sci::math": "algebra matrix equation numeric solver",
    "sci::bio": "genome protein sequence dna biology",
    "x11::app": "window desktop graphical widget toolkit",
    "role::tail": "obscure rare niche tailtopic oddity",
}
FILLER = "the a tool for and with package program data system".split()


def make_rows(n: int, seed: int = 0) -> list[dict]:
    """Documents of 1-3 topics whose words identify them, plus filler words."""
    rng = random.Random(seed)
    names = sorted(t for t in TOPICS if t != "role::tail")
    rows = []
    for i in range(n):
        labels = rng.sample(names, rng.choice([1, 2, 3]))
        if i % 15 == 0:
            labels.append("role::tail")
        words = [w for lab in labels for w in rng.sample(TOPICS[lab].split(), 3)]
        words += rng.sample(FILLER, 4)
        rng.shuffle(words)
        rows.append({"id": f"doc{i}", "text": " ".join(words), "labels": sorted(labels)})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="session")
def corpus_files(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("corpus")
    return (write_jsonl(folder / "train.jsonl", make_rows(400, seed=1)),
            write_jsonl(folder / "test.jsonl", make_rows(120, seed=2)))


@pytest.fixture(scope="session")
def tiny_bundle(corpus_files, tmp_path_factory) -> Path:
    """A small XR-Linear bundle trained and exported through the public training API."""
    from models.features import TfidfConfig
    from training.config import TrainConfig
    from training.export import export_run
    from training.run import train_run
    from training.tree import TreeConfig
    from training.xlinear import XLinearConfig

    folder = tmp_path_factory.mktemp("model")
    config = TrainConfig(corpus=corpus_files[0], tfidf=TfidfConfig(min_df=1),
                         xlinear=XLinearConfig(n_jobs=1, tree=TreeConfig(branching=2, max_leaf_size=4)))
    train_run(config, folder / "run", progress=False)
    export_run(folder / "run", folder / "bundle")
    return folder / "bundle"
