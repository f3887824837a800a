"""The label-text stage of a run: after the tree's rankers, the encoder (hard negatives from the trained tree's top
K), the label index, and the fusion fitted on documents held out of a second tree (training/label_text/fusion.py).

Labels of the label file that no training document carries are appended after the corpus's labels (frequency 0),
so the tree's label ids stay 0..n_tree-1 and the stage covers them all (`stage_label_names`).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from xtag.models.families import TrainInputs, family
from xtag.models.inference.label_filter import own_positions
from xtag.models.label_text.fusion import Fusion
from xtag.models.label_text.index import LabelIndex
from xtag.models.label_text.loaders import LOADERS
from xtag.models.label_texts import LabelTexts
from xtag.training.label_text.contrastive import train_label_encoder
from xtag.training.label_text.fusion import fit_fusion

PREDICT_BATCH = 4096  # documents per tree or encoder call, so a large corpus never holds one huge dense block


def applies(config, label_texts: LabelTexts | None) -> bool:
    """Whether a run trains the stage: a label file whose labels say more than their ids (not names only, as
    debtags'), a family that has the stage, `label_text.enabled`, and no --ray (its model stays on disk in parts)."""
    return (
        config.label_text.enabled
        and label_texts is not None
        and any(label.has_text for label in label_texts.labels)
        and family(config.model).supports("label-text")
        and config.ray is None
    )


def stage_label_names(names: list[str], label_texts: LabelTexts) -> list[str]:
    """The corpus's labels, then the label file's others in file order: the stage's vocabulary."""
    known = set(names)
    return [*names, *(label.id for label in label_texts.labels if label.id not in known)]


@dataclass
class LabelTextStage:
    encoder: object  # models/label_text/encoder.py's encoder
    index: LabelIndex
    fusion: Fusion

    def save(self, folder: Path) -> None:
        self.encoder.save(folder / LOADERS["label-encoder"].path)
        self.index.save(folder / LOADERS["label-index"].path)
        self.fusion.save(folder / LOADERS["label-fusion"].path)

    def summary(self) -> dict:
        return {
            "label_text": {"labels": self.index.n_labels, "index": self.index.info.index, "dim": self.index.info.dim}
        }


def add_labels(model: Path, label_texts: LabelTexts, names: list[str]) -> list[str]:
    """A run's model/ folder with the label file's labels it lacks added from their text alone: embedded, appended to
    the label index (no training documents, so no tree score); the tree and every other label stay as they were, and
    keep their scores: fusion.json records the labels it was fitted over, and the added ones are ranked in a list
    of their own (models/label_text/model.py added_candidates).
    Returns the added ids (the caller appends them to labels.json in this order)."""
    from xtag.models.label_text.encoder import LabelTextEncoder

    known = set(names)
    added = [label.id for label in label_texts.labels if label.id not in known]
    if added:
        encoder = LabelTextEncoder.load(model / LOADERS["label-encoder"].path)
        folder = model / LOADERS["label-index"].path
        before = LabelIndex.load(folder)
        fusion_file = model / LOADERS["label-fusion"].path
        fusion = Fusion.load(fusion_file)
        if fusion.fitted_labels is None:  # the labels it was fitted over: those before any update
            fusion.model_copy(update={"fitted_labels": before.n_labels}).save(fusion_file)
        before.added(encode(encoder, label_texts.texts_for(added), labels=True)).save(folder)
    return added


def top_candidates(tree, X: sp.csr_matrix, k: int):
    """The tree's top k for every row of X, through the model's predict (the one inference path), in batches."""
    from xtag.models.inference.types import Predictions

    parts = [tree.predict(X[lo : lo + PREDICT_BATCH], k=k) for lo in range(0, X.shape[0], PREDICT_BATCH)]
    return Predictions(np.vstack([p.labels for p in parts]), np.vstack([p.scores for p in parts]))


def shortlist_matrix(labels: np.ndarray, n_labels: int) -> sp.csr_matrix:
    """Top-k label lists (-1: none) as a documents × labels 0/1 matrix (the encoder's hard-negative pool)."""
    rows = np.repeat(np.arange(labels.shape[0]), labels.shape[1])
    keep = labels.ravel() >= 0
    data = np.ones(int(keep.sum()), np.float32)
    return sp.csr_matrix((data, (rows[keep], labels.ravel()[keep])), shape=(labels.shape[0], n_labels))


def encode(encoder, texts: list[str], labels: bool = False) -> np.ndarray | sp.csr_matrix:
    """Embeddings in batches: dense rows, or CSR rows for the untrained TF-IDF encoder."""
    fn = encoder.encode_labels if labels else encoder.encode_documents
    parts = [fn(texts[lo : lo + PREDICT_BATCH]) for lo in range(0, len(texts), PREDICT_BATCH)]
    return sp.vstack(parts, format="csr") if encoder.sparse else np.vstack(parts)


def own_columns(doc_ids: list[str] | None, names: list[str]) -> np.ndarray | None:
    """Per document, the column of the label that is the document itself (same id), else -1; None without ids."""
    if doc_ids is None:
        return None
    return own_positions(doc_ids, {name: j for j, name in enumerate(names)})


def trained_encoder(
    run: TrainInputs, docs: np.ndarray, Y: sp.csr_matrix, texts: list[str], names: list[str], hard: sp.csr_matrix
):
    """The encoder trained on the documents `docs` (rows of run.texts; `Y` and `hard` are their rows), or the one a
    killed or resumed run finished before (checkpoints/label_text/heldout_encoder: trained with the held-out
    documents left out, as the held-out tree)."""
    from xtag.models.label_text.encoder import LabelTextEncoder

    folder = run.checkpoint_dir / "label_text" / "heldout_encoder"
    if (folder / "config.json").is_file():
        run.log({"event": "resume", "what": "label-text encoder"})
        return LabelTextEncoder.load(folder)
    encoder = train_label_encoder(
        [run.texts[i] for i in docs],
        Y,
        texts,
        run.config.label_text.encoder,
        hard_negatives=hard,
        doc_ids=None if run.doc_ids is None else [run.doc_ids[i] for i in docs],
        label_ids=names,
        log=run.log,
    )
    tmp = folder.with_name("heldout_encoder.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    encoder.save(tmp)
    tmp.rename(folder)  # whole or not at all
    return encoder


def train_stage(run: TrainInputs, X: sp.csr_matrix, tree, retrain: Callable) -> LabelTextStage:
    """The stage over `tree` (trained on X, run.Y); `retrain(X, Y, checkpoint_dir)` trains the held-out tree as the
    family trained `tree` (the family hands it in: shared training code imports no family)."""
    cfg, start = run.config.label_text, time.perf_counter()
    names = stage_label_names(run.label_names, run.label_texts)
    texts = run.label_texts.texts_for(names)
    n_tree = run.Y.shape[1]
    Y = sp.hstack([run.Y, sp.csr_matrix((run.Y.shape[0], len(names) - n_tree))], format="csr")

    rng = np.random.default_rng(cfg.seed)
    n = X.shape[0]
    held = np.sort(rng.permutation(n)[: min(cfg.max_heldout, max(1, int(n * cfg.heldout_fraction)))])
    rest = np.setdiff1d(np.arange(n), held)
    # The encoder never sees the held-out documents, as the held-out tree does not (NGAME fits its fusion on
    # held-out data): trained on them, their cosines to their own labels are inflated, and the fusion learnt to
    # trust the cosine more than it earns on unseen documents (debdeps: tfidf-linear's stage fell below the tree).
    hard = shortlist_matrix(top_candidates(tree, X[rest], cfg.tree_candidates).labels, len(names))
    run.log({"event": "label_text", "what": "hard negatives", "seconds": round(time.perf_counter() - start, 3)})
    encoder = trained_encoder(run, rest, Y[rest], texts, names, hard)
    embeddings = encode(encoder, texts, labels=True)
    frequencies = np.concatenate([np.diff(run.Y.tocsc().indptr), np.zeros(len(names) - n_tree, np.int64)])
    t = time.perf_counter()
    part = retrain(X[rest], run.Y[rest], run.checkpoint_dir / "label_text" / "heldout_tree")
    run.log(
        {"event": "label_text", "what": "held-out tree", "documents": len(rest), "seconds": time.perf_counter() - t}
    )
    part_frequencies = frequencies.copy()
    part_frequencies[:n_tree] = np.diff(run.Y[rest].tocsc().indptr)
    part_index = LabelIndex.build(embeddings, part_frequencies, cfg.index)
    own = [run.doc_ids[i] for i in held] if run.doc_ids is not None else None
    fusion = fit_fusion(
        top_candidates(part, X[held], cfg.tree_candidates),
        encode(encoder, [run.texts[i] for i in held]),
        own_columns(own, names),
        part_index,
        run.Y[held],
        cfg.index_candidates,
        run.log,
        cfg.fusion,
    ).model_copy(update={"new_label_places": cfg.new_label_places})
    index = LabelIndex.build(embeddings, frequencies, cfg.index)
    run.log(
        {
            "event": "label_text",
            "what": "done",
            "labels": len(names),
            "added": len(names) - n_tree,
            "index": index.info.index,
            "seconds": round(time.perf_counter() - start, 3),
        }
    )
    return LabelTextStage(encoder, index, fusion)
