"""One fold of the cross-fitting: a copy of the first stage trained without the fold's rows, and its top-C for them.

Its own module so that both ways of running the folds use it, one after the other here (cross_fit.py) or as Ray
tasks (ray_folds.py), without either importing the other.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from xtag.corpus.files import write_jsonl_gz
from xtag.models.bundle.loader import Bundle, load_bundle
from xtag.models.errors import XtagError
from xtag.models.tagging.batches import predict_corpus


def in_label_space(labels: np.ndarray, scores: np.ndarray, names: list[str], index: dict[str, int]):
    """A fold model's top-C (its own label ids) in the first stage's label space; labels the first stage lacks
    are dropped and each row's remaining candidates keep their order, padded at the end with -1 / 0."""
    ids = np.array([index.get(n, -1) for n in names] + [-1], dtype=np.int64)  # [-1]: the fold's own padding
    mapped = ids[np.where(labels >= 0, labels, len(names))]
    keep = mapped >= 0
    order = np.argsort(~keep, axis=1, kind="stable")  # kept candidates first, in their order
    out_labels = np.take_along_axis(np.where(keep, mapped, -1), order, axis=1)
    out_scores = np.take_along_axis(np.where(keep, scores, 0.0), order, axis=1).astype(np.float32)
    return out_labels, out_scores


def _write_corpus(
    path: Path, texts: list[str], Y: sp.csr_matrix, names: list[str], rows: np.ndarray, ids: list[str] | None
) -> None:
    """The fold's corpus, with the documents' ids where known: a label-text stage in the copy keeps each document's
    own label out of its encoder's and its fusion's training as the first stage did (training/label_text/stage.py)."""
    labelled = (
        {
            **({"id": ids[i]} if ids is not None else {}),
            "text": texts[i],
            "labels": [names[j] for j in Y.indices[Y.indptr[i] : Y.indptr[i + 1]]],
        }
        for i in rows
    )
    write_jsonl_gz(path, labelled, level=1, ensure_ascii=False)  # a scratch file on the user's clock


@dataclass(frozen=True)
class FoldRecipe:
    """What a fold copy needs of the first stage, small enough to send to a Ray task (the bundle's model is not):
    the bundle's path (for messages), its kind, the training config its manifest records and its label names."""

    source: Path
    kind: str
    config: dict
    names: list[str]

    @classmethod
    def of(cls, first: Bundle) -> FoldRecipe:
        recorded = first.manifest["training"]["config"]
        return cls(first.path, first.manifest["model_kind"], recorded, list(first.predictor.vocab.names))

    def start_event(self, k: int, folds: int, n_train: int, n_held: int, where: str = "") -> dict:
        return {
            "event": "lamp_cross_fit_start",
            "message": f"fold {k + 1}/{folds}: training a copy of the first stage ({self.kind}) on {n_train:,} "
            f"texts for the candidates of the {n_held:,} it does not see{where}",
        }


def fold_candidates(
    recipe: FoldRecipe,
    texts: list[str],
    Y: sp.csr_matrix,
    rows: np.ndarray,
    C: int,
    folder: Path,
    train_and_export: Callable[[Any, Path, bool], Path],
    progress: bool,
    ids: list[str] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Train the first stage's config on all rows but `rows` (in folder, through the run's `train_and_export`,
    TrainInputs), and its top-C for `rows`. The copy trains here, never on Ray of its own (`ray` is cleared):
    with --ray, the folds are what runs on the cluster. `ids`: the texts' document ids, written into the fold's
    corpus."""
    from xtag.training.config import TrainConfig

    shutil.rmtree(folder, ignore_errors=True)  # a fold killed mid-way restarts whole
    folder.mkdir(parents=True)
    _write_corpus(folder / "corpus.jsonl.gz", texts, Y, recipe.names, np.setdiff1d(np.arange(len(texts)), rows), ids)
    # the fold corpus is JSONL whatever the first stage read
    settings = {**recipe.config, "corpus": folder / "corpus.jsonl.gz", "format": "jsonl", "ray": None}
    try:
        config = TrainConfig.model_validate(settings)
        bundle = train_and_export(config, folder, progress)
    except (XtagError, ValueError) as exc:  # e.g. a path in the recorded config that no longer resolves
        raise XtagError(
            f"lamp.cross_fit: retraining the first stage {recipe.source} from the config its manifest records "
            f"failed ({exc}); fix that, or set lamp.cross_fit=0 and train LaMP on texts the first stage did not see"
        ) from exc
    model = load_bundle(bundle)
    preds = predict_corpus(model, [texts[i] for i in rows], C, progress=False, calibrated=False)
    index = {name: i for i, name in enumerate(recipe.names)}
    return in_label_space(preds.labels, preds.scores, model.predictor.vocab.names, index)
