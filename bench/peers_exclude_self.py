"""The peers on debdeps with each document's own id excluded (issue 49's convention): PECOS XR-Linear and Omikuji
Bonsai on one shared TF-IDF, scored by xtag's metrics code with the same exclusion as `xtag evaluate --exclude-self`.

    .venv/bin/python -m bench.peers_exclude_self --workdir /tmp/peers-dd

A package never depends on itself, so a peer's prediction of the document's own id is always wrong; the peers
predict their top 11, the document's own id is dropped, and the top 10 are scored. Also the test-only labels'
recall@10 (labels no training document carries: 0 for any model that learns labels from documents alone, which
these rows show). The peers run in their own venv (bench/peers/setup_pecos.sh: libpecos and omikuji), one after
the other, each timing its own training.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import numpy as np
from xtag.corpus.files import load_corpus
from xtag.evaluation.evaluate import ground_truth
from xtag.models.features.tfidf import TfidfConfig
from xtag.models.inference.label_filter import LabelFilter, self_filters
from xtag.models.metrics import evaluate, occurrence_recall

from bench.helpers.pecos import PECOS_PY, ROOT, featurize
from bench.helpers.results import save_result

KS = (1, 3, 5, 10)
PEERS = {  # peer -> (runner module, its prediction file, its extra arguments)
    "pecos_xrlinear": ("bench.peers.pecos_xlinear", "pecos_pred.npz", ["--topk", "11", "--single-n", "200"]),
    "omikuji_bonsai": ("bench.peers.omikuji_bonsai", "omikuji_pred.npz", ["--topk", "11"]),
}


def without_own(pred: np.ndarray, filters: list[LabelFilter | None], k: int) -> np.ndarray:
    """The top k of each row that its `--exclude-self` filter allows (rows keep their order; -1 pads)."""
    out = np.full((pred.shape[0], k), -1, dtype=np.int64)
    for i, f in enumerate(filters):
        row = (pred[i][pred[i] >= 0] if f is None else pred[i][f.allowed(pred[i])])[:k]
        out[i, : len(row)] = row
    return out


def scores(pred: np.ndarray, truth, test_only: np.ndarray) -> dict:
    metrics = evaluate(pred, truth.Y, KS, truth.propensity, truth.convention)
    keep = ("P@1", "P@5", "nDCG@5", "PSP@5", "macro-R@5", "R@10")
    row = {m: round(metrics[m], 2) for m in keep if m in metrics}
    row["test_only_R@10"] = round(occurrence_recall(pred, truth.Y, test_only, 10), 2)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "debdeps")
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ngram-max", type=int, default=TfidfConfig().ngram_max)
    ap.add_argument("--min-df", type=int, default=TfidfConfig().min_df)
    ap.add_argument("--reuse", action="store_true", help="score the predictions already in --workdir")
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    vocab, _, shape = featurize(args)
    test = load_corpus(args.data / "test.jsonl.gz")
    truth = ground_truth(test, vocab)
    test_only = np.arange(len(vocab), truth.Y.shape[1])  # the unseen columns ground_truth appends
    own = self_filters(test.ids, vocab)  # as `xtag evaluate --exclude-self` (models/inference/label_filter.py)
    rows, runs = {}, {}
    for peer, (module, pred_file, extra) in PEERS.items():
        if not (args.reuse and (args.workdir / pred_file).exists()):
            cmd = [str(PECOS_PY), "-m", module, "--workdir", str(args.workdir), "--threads", str(args.threads)]
            subprocess.run(cmd + extra, check=True, cwd=ROOT)
        pred = np.load(args.workdir / pred_file)["indices"].astype(np.int64)
        rows[peer] = scores(without_own(pred, own, max(KS)), truth, test_only)
        rows[peer + " (own id kept)"] = scores(pred[:, : max(KS)], truth, test_only)
        result_file = args.workdir / pred_file.replace("_pred.npz", "_result.json")
        runs[peer] = {k: v for k, v in json.loads(result_file.read_text()).items() if k not in ("details",)}
        print(peer, rows[peer], f"train {runs[peer]['train_s']:.0f} s", flush=True)
    save_result(
        "peers_exclude_self",
        {"rows": rows, "runs": runs, "shape": shape, "documents_that_are_labels": sum(f is not None for f in own)},
    )


if __name__ == "__main__":
    main()
