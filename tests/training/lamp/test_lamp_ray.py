"""LaMP's cross-fitting folds as Ray tasks on a real local cluster (a head and a worker as separate processes):
the candidates equal the local run's for the same seed, also when a worker is killed mid-fold, and a fold's
own error is the same one line as locally."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from xtag.models.errors import XtagError

from tests.conftest import lamp_config
from tests.ray_support import local_cluster

pytest.importorskip("ray")

FOLDS = 2


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(workers=1, cpus=1) as c:
        yield c


def _fold_inputs(corpus_file: Path, first):
    """The texts and their labels in the first stage's label space, as train_lamp hands them to the folds."""
    from xtag.corpus.files import build_vocab, load_corpus
    from xtag.training.lamp.candidates import first_stage_labels

    corpus = load_corpus(corpus_file)
    vocab = build_vocab(corpus)
    Y, _ = corpus.label_matrix(vocab)
    index = first.predictor.vocab.index
    return corpus.texts, first_stage_labels(Y.tocsr(), vocab.names, index, len(first.predictor.vocab))[0]


def _cross_fit(first, texts, Y, folder: Path, ray: str | None, events: list):
    from xtag.training.lamp.cross_fit import cross_fitted_topk
    from xtag.training.run import train_and_export

    return cross_fitted_topk(first, texts, Y, 6, FOLDS, 0, folder, train_and_export, False, events.append, ray)


@pytest.fixture(scope="module")
def local_folds(corpus_files, tiny_bundle, tmp_path_factory):
    """(labels, scores) of the folds trained one after the other here, with the seed LaMP's config defaults to."""
    from xtag.models.bundle.loader import load_bundle

    first = load_bundle(tiny_bundle)
    texts, Y = _fold_inputs(corpus_files[0], first)
    return _cross_fit(first, texts, Y, tmp_path_factory.mktemp("local") / "folds", None, [])


def test_lamp_with_ray_trains_its_folds_as_tasks_and_gets_the_local_candidates(
    cluster, corpus_files, tiny_bundle, tiny_bert, local_folds, tmp_path
):
    """`xtag train --model lamp --ray ADDRESS` (config.ray): each fold is a Ray task, and the candidates LaMP
    saves for each fold are the ones the local run computes."""
    from xtag.training.run import train_run

    config = lamp_config(
        corpus_files[0], tiny_bundle, tiny_bert, heads=2, dim=16, encoder_layers=0, epochs=1, cross_fit=FOLDS
    )
    config = config.model_copy(update={"ray": cluster.address})
    train_run(config, tmp_path / "run", progress=False)
    events = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    starts = [e["message"] for e in events if e["event"] == "lamp_cross_fit_start"]
    assert len(starts) == FOLDS and all(f"a Ray task on {cluster.address}: 2 nodes" in m for m in starts)
    done = next(e for e in events if e["event"] == "lamp_cross_fit_done")
    assert (done["trained"], done["ray"]) == (FOLDS, cluster.address)
    from xtag.training.lamp.cross_fit import fold_of

    fold = fold_of(len(local_folds[0]), FOLDS, config.lamp.seed)
    saved = tmp_path / "run" / "checkpoints" / "lamp" / "folds"
    assert sorted(p.name for p in saved.iterdir()) == ["0.npz", "1.npz"]  # nothing of the tasks' runs left here
    for k in range(FOLDS):
        with np.load(saved / f"{k}.npz") as z:
            np.testing.assert_array_equal(z["labels"], local_folds[0][fold == k])
            np.testing.assert_allclose(z["scores"], local_folds[1][fold == k], rtol=1e-6)


def test_a_worker_killed_mid_fold_is_retried_and_the_candidates_are_unchanged(
    cluster, corpus_files, tiny_bundle, local_folds, tmp_path
):
    from xtag.models.bundle.loader import load_bundle

    first = load_bundle(tiny_bundle)
    texts, Y = _fold_inputs(corpus_files[0], first)
    killed: list[int] = []
    stop = threading.Event()

    def kill_a_running_fold() -> None:
        """SIGKILL the worker node's process while it trains a fold (its name is the task's while it runs)."""
        while not stop.is_set() and not killed:
            for pid in cluster.task_pids(1):
                try:
                    running = Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::train_fold")
                except OSError:
                    continue
                if running:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    break
            time.sleep(0.05)

    killer = threading.Thread(target=kill_a_running_fold, daemon=True)
    killer.start()
    try:
        labels, scores = _cross_fit(first, texts, Y, tmp_path / "folds", cluster.address, [])
    finally:
        stop.set()
        killer.join()
    assert killed, "no fold was running on the worker node to kill"
    np.testing.assert_array_equal(labels, local_folds[0])
    np.testing.assert_allclose(scores, local_folds[1], rtol=1e-6)


def test_a_fold_that_cannot_train_on_ray_is_the_local_one_line_error(cluster, tiny_bundle, tmp_path):
    import scipy.sparse as sp
    from xtag.models.bundle.loader import load_bundle

    first = load_bundle(tiny_bundle)
    first.manifest["training"]["config"]["xlinear"]["C"] = -1.0  # as if written by another version
    texts = ["python module pip interpreter", "email smtp imap mailbox"] * 3
    Y = sp.csr_matrix((len(texts), len(first.predictor.vocab)), dtype=np.float32)
    with pytest.raises(XtagError, match=r"(?s)lamp.cross_fit: retraining the first stage .* set lamp.cross_fit=0") as e:
        _cross_fit(first, texts, Y, tmp_path / "folds", cluster.address, [])
    assert "Traceback" not in str(e.value) and "RayTaskError" not in str(e.value)
