"""Out-of-fold first-stage candidates (cross-fitting), so LaMP can train on the first stage's own corpus.

A first stage scores its own training texts as no test text: on debtags XR-Linear's top 50 hold nearly
every true label of a text it was trained on, ranked high with over-confident margins, so LaMP trained
on those candidates learns to trust them. Holding texts out for LaMP instead (bench/lamp_debtags.py's
split) costs the served first stage those texts. Cross-fitting, as in stacked generalisation: the corpus
is cut in K folds; for each fold a copy of the first stage (its bundle's own training config, same
family and settings) trains on the other K-1 folds and proposes the candidates of the held-out fold.
Every text then gets candidates from a model that never saw it, while the bundle that serves is still
the first stage trained on everything. The cost is K first-stage trainings (debtags, XR-Linear: about
4 s each; a transformer first stage costs K fine-tunings).

Each fold's candidates are saved (folds/K.npz) before its run is deleted, so a resumed LaMP run reuses them.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from xtag.models.bundle.loader import Bundle
from xtag.models.errors import XtagError
from xtag.training.lamp.fold_copy import FoldRecipe, fold_candidates

AUTO_FOLDS = 5  # lamp.cross_fit=None over a first stage without a transformer: each copy sees 80 % of the texts


def cross_fit_folds(lc, first_kind: str) -> int:
    """The folds lamp.cross_fit asks for; None (auto) cross-fits first stages that retrain in seconds, not those
    whose every fold would be a transformer fine-tuning."""
    from xtag.models.families import family

    if lc.cross_fit is not None:
        return lc.cross_fit
    return 0 if family(first_kind).supports("transformer") else AUTO_FOLDS


def fold_of(n: int, folds: int, seed: int) -> np.ndarray:
    """Each row's fold, 0..folds-1: a seeded shuffle dealt round-robin, so fold sizes differ by at most one."""
    order = np.random.default_rng(seed).permutation(n)
    fold = np.empty(n, dtype=np.int64)
    fold[order] = np.arange(n) % folds
    return fold


def cross_fitted_topk(
    first: Bundle,
    texts: list[str],
    Y_first: sp.csr_matrix,
    C: int,
    folds: int,
    seed: int,
    folder: Path,
    train_and_export: Callable[[Any, Path, bool], Path],
    progress: bool,
    log: Callable[[dict], None],
    ray: str | None = None,
    ids: list[str] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Every text's top-C from a copy of the first stage that did not see it (labels in the first stage's
    label space, raw scores), trained on the other folds. `Y_first`: the texts' labels in that space.
    `ray`: a cluster address; the folds not saved yet then train as Ray tasks (training/lamp/ray_folds.py).
    `ids`: the texts' document ids, kept in each fold's corpus (fold_copy.py)."""
    if "training" not in first.manifest or "config" not in first.manifest["training"]:
        raise XtagError(
            f"{first.path}: its manifest does not record the training config, so lamp.cross_fit cannot retrain "
            "it on folds; export the first stage again with this xtag, or set lamp.cross_fit=0"
        )
    if len(texts) < 2 * folds:
        raise XtagError(f"lamp.cross_fit={folds} needs at least {2 * folds} training texts, got {len(texts)}")
    fold = fold_of(len(texts), folds, seed)
    recipe = FoldRecipe.of(first)
    done = first.manifest["training"].get("summary", {})
    took = done.get("train_seconds", done.get("total_seconds"))  # train_seconds counts a resumed run's earlier work
    expect = f"; it trained in {took:.0f} s, so expect about {took * (folds - 1):.0f} s" if took else ""
    log(
        {
            "event": "lamp_cross_fit_plan",
            "message": f"lamp.cross_fit={folds}: {folds} copies of the first stage ({recipe.kind}), "
            f"each trained on {(folds - 1) / folds:.0%} of the {len(texts):,} texts{expect} (lamp.cross_fit=0 skips "
            "this: then train LaMP on texts the first stage did not see)",
        }
    )
    labels = np.full((len(texts), C), -1, dtype=np.int64)
    scores = np.zeros((len(texts), C), dtype=np.float32)
    folder.mkdir(parents=True, exist_ok=True)

    def place(k: int, got_labels: np.ndarray, got_scores: np.ndarray, reused: bool, seconds: float) -> None:
        rows = np.flatnonzero(fold == k)
        width = min(C, got_labels.shape[1])
        labels[rows, :width], scores[rows, :width] = got_labels[:, :width], got_scores[:, :width]
        event = {"event": "lamp_cross_fit", "fold": k, "folds": folds, "held_out": len(rows), "reused": reused}
        log({**event, "seconds": round(seconds, 2)})

    todo = []
    for k in range(folds):
        start = time.perf_counter()
        if (folder / f"{k}.npz").exists():
            with np.load(folder / f"{k}.npz") as z:
                place(k, z["labels"], z["scores"], True, time.perf_counter() - start)
        else:
            todo.append(k)
    start = time.perf_counter()
    if ray and todo:
        from xtag.training.lamp.ray_folds import folds_on_ray

        trained = folds_on_ray(ray, recipe, texts, Y_first, fold, todo, C, train_and_export, progress, log, ids)
    else:
        trained = _folds_here(recipe, texts, Y_first, fold, todo, C, folder, train_and_export, progress, log, ids)
    for k, got_labels, got_scores, seconds in trained:
        tmp = folder / f"{k}.tmp.npz"  # saved as each fold ends, so a resumed run reuses it
        np.savez(tmp, labels=got_labels, scores=got_scores)
        tmp.rename(folder / f"{k}.npz")
        place(k, got_labels, got_scores, False, seconds)
    if todo:
        wall = round(time.perf_counter() - start, 2)
        log({"event": "lamp_cross_fit_done", "trained": len(todo), "seconds": wall, "ray": ray if ray else None})
    return labels, scores


def _folds_here(recipe, texts, Y, fold, todo, C, folder, train_and_export, progress, log, ids) -> Iterator[tuple]:
    """(k, labels, scores, seconds) of each fold in `todo`, trained one after the other in this process."""
    for k in todo:
        rows = np.flatnonzero(fold == k)
        log(recipe.start_event(k, int(fold.max()) + 1, len(texts) - len(rows), len(rows)))
        start = time.perf_counter()
        got = fold_candidates(recipe, texts, Y, rows, C, folder / f"fold{k}", train_and_export, progress, ids)
        shutil.rmtree(folder / f"fold{k}")
        yield k, *got, time.perf_counter() - start
