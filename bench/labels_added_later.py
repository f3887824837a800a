"""Labels added later, from their text alone (issue 49, must-show): 1,000 labels held out of training, then added with
`xtag update RUN --labels FILE`, against the same labels in a model that trained on them.

    .venv/bin/python -m bench.labels_added_later --data ../shared/data/debdeps \
        --reference /tmp/lts/xlinear_stage_tfidf_cosine/bundle

1. A seeded 1,000 of the training labels that have a description in labels.jsonl.gz and occur in the test split are
   held out: dropped from every training document's labels (a document left with none is left out) and from the
   run's label file; written apart as held.jsonl.
2. XR-Linear with the label-text stage trained on that (`train_run`, default settings), exported; then
   `xtag update RUN --labels held.jsonl --out RUN2` as a command (its wall time, the load average beside it), exported.
3. The reference: XR-Linear with the stage trained on the full training file and label file (--reference BUNDLE, or
   trained here when not given).
4. On the test split, each document's own id excluded (label_filter.self_filters): the held labels' recall@10 of their
   test occurrences (metrics.occurrence_recall) and overall P@1 / P@5, for the run before the update, after it, and
   the reference.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from xtag.corpus.files import load_corpus
from xtag.evaluation.evaluate import ground_truth
from xtag.models.bundle.loader import load_bundle
from xtag.models.inference.label_filter import self_filters
from xtag.models.metrics import evaluate, occurrence_recall
from xtag.models.tagging.batches import predict_corpus
from xtag.training.config import TrainConfig
from xtag.training.export.export_run import export_run
from xtag.training.run import train_run

from bench.helpers.results import save_result


def _rows(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def _write(path: Path, rows: list[dict]) -> None:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as fh:
        fh.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def hold_out(data: Path, work: Path, n: int, seed: int) -> dict:
    """train.jsonl.gz and labels.jsonl.gz without `n` seeded held labels, and held.jsonl with just them."""
    train, labels = _rows(data / "train.jsonl.gz"), _rows(data / "labels.jsonl.gz")
    described = {r["id"] for r in labels if r.get("description")}
    in_test = {name for r in _rows(data / "test.jsonl.gz") for name in r["labels"]}
    in_train = {name for r in train for name in r["labels"]}
    pool = sorted(in_train & described & in_test)
    held = set(np.random.default_rng(seed).choice(pool, size=n, replace=False).tolist())
    kept, emptied = [], 0
    for row in train:
        names = [x for x in row["labels"] if x not in held]
        if names:
            kept.append({**row, "labels": names})
        else:
            emptied += 1
    work.mkdir(parents=True, exist_ok=True)
    _write(work / "train.jsonl.gz", kept)
    _write(work / "labels.jsonl.gz", [r for r in labels if r["id"] not in held])
    _write(work / "held.jsonl", [r for r in labels if r["id"] in held])
    occurrences = sum(1 for r in train for x in r["labels"] if x in held)
    return {
        "held_labels": n,
        "pool": len(pool),
        "seed": seed,
        "train_documents": len(train),
        "train_documents_kept": len(kept),
        "documents_left_without_labels": emptied,
        "held_train_occurrences": occurrences,
    }


def train_and_export(corpus: Path, labels: Path, folder: Path) -> dict:
    """XR-Linear + the label-text stage on `corpus`, exported to folder/bundle; resumes a run left without a bundle."""
    config = TrainConfig(corpus=corpus, labels=labels)  # the stage with its default encoder, the TF-IDF cosine
    load = os.getloadavg()
    if not (folder / "bundle").is_dir():
        train_run(config, folder / "run", resume=(folder / "run" / "config.json").is_file(), progress=False)
        export_run(folder / "run", folder / "bundle")
    summary = json.loads((folder / "run" / "summary.json").read_text())
    return {"train_seconds": summary["train_seconds"], "load_average_before": list(load)}


def update(work: Path) -> dict:
    """`xtag update RUN --labels held.jsonl --out RUN2` as a command, timed; RUN2 exported."""
    run, out = work / "base" / "run", work / "updated" / "run"
    if out.exists():
        raise SystemExit(f"{out}: already there; remove {work / 'updated'} to time the update again")
    command = [str(Path(sys.executable).with_name("xtag")), "update", str(run), "--labels", str(work / "held.jsonl")]
    load = os.getloadavg()
    start = time.perf_counter()
    subprocess.run([*command, "--out", str(out)], check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    summary = json.loads((out / "summary.json").read_text())
    start = time.perf_counter()
    export_run(out, work / "updated" / "bundle")
    return {
        "update_wall_seconds": wall,
        "update_seconds_in_process": summary["total_seconds"],
        "added_labels": summary["update"]["added_labels"],
        "load_average_before": list(load),
        "load_average_after": list(os.getloadavg()),
        "export_seconds": time.perf_counter() - start,
    }


def measure(bundle_path: Path, test, held: set[str]) -> tuple[dict, object]:
    """P@1, P@5 and the held labels' recall@10 on the test split, each document's own id excluded; and the top 10."""
    bundle = load_bundle(bundle_path)
    vocab = bundle.predictor.vocab
    load = os.getloadavg()
    start = time.perf_counter()
    preds = predict_corpus(bundle, test.texts, 10, progress=False, filters=self_filters(test.ids, vocab))
    seconds = time.perf_counter() - start
    truth = ground_truth(test, vocab)
    metrics = evaluate(preds.labels[:, :5], truth.Y, (1, 5), truth.propensity)
    columns = np.array([j for j, name in enumerate(truth.names) if name in held], dtype=np.int64)
    row = {
        "labels": len(vocab),
        "P@1": metrics["P@1"],
        "P@5": metrics["P@5"],
        "held_recall@10": occurrence_recall(preds.labels, truth.Y, columns, 10),
        "held_test_occurrences": int(truth.Y[:, columns].sum()),
        "held_test_documents": int((truth.Y[:, columns].sum(axis=1) > 0).sum()),
        "evaluate_seconds": seconds,
        "load_average_before": list(load),
    }
    return row, preds


def kept_scores(before, updated, n_old: int) -> dict:
    """Do the old labels keep their scores? Per document, the old labels of the updated top 10 (positions below
    n_old: an update appends) against the top 10 before it, in order; and the largest change of a shared score."""
    same, diff = 0, 0.0
    for b_labels, b_scores, u_labels, u_scores in zip(before.labels, before.scores, updated.labels, updated.scores):
        old = (u_labels >= 0) & (u_labels < n_old)
        kept = u_labels[old]
        same += bool(np.array_equal(kept, b_labels[: len(kept)]))
        shared = np.intersect1d(kept, b_labels[b_labels >= 0])
        if len(shared):
            b = dict(zip(b_labels.tolist(), b_scores.tolist()))
            u = dict(zip(u_labels.tolist(), u_scores.tolist()))
            diff = max(diff, max(abs(b[j] - u[j]) for j in shared.tolist()))
    n = len(before.labels)
    return {"documents": n, "old_order_kept": same, "max_score_change": diff}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path("../shared/data/debdeps"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/labels_added_later"))
    ap.add_argument("--reference", type=Path, help="the full model's bundle (trained here when not given)")
    ap.add_argument("--held", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="labels_added_later")
    args = ap.parse_args()
    split = hold_out(args.data, args.work, args.held, args.seed)
    print(json.dumps(split), flush=True)
    held = {r["id"] for r in map(json.loads, (args.work / "held.jsonl").read_text().splitlines())}
    base = train_and_export(args.work / "train.jsonl.gz", args.work / "labels.jsonl.gz", args.work / "base")
    print("base", json.dumps(base), flush=True)
    updated = update(args.work)
    print("update", json.dumps(updated), flush=True)
    reference = args.reference
    if reference is None:
        folder = args.work / "reference"
        train_and_export(args.data / "train.jsonl.gz", args.data / "labels.jsonl.gz", folder)
        reference = folder / "bundle"
    test = load_corpus(args.data / "test.jsonl.gz")
    rows, preds = {}, {}
    for name, bundle in (
        ("before update", args.work / "base" / "bundle"),
        ("updated", args.work / "updated" / "bundle"),
        ("reference", reference),
    ):
        rows[name], preds[name] = measure(bundle, test, held)
    kept = kept_scores(preds["before update"], preds["updated"], rows["before update"]["labels"])
    print("kept", json.dumps(kept), flush=True)
    rows["before update"]["train_seconds"] = base["train_seconds"]
    for name, row in rows.items():
        print(name, json.dumps(row), flush=True)
    payload = {
        "data": str(args.data),
        "reference": str(reference),
        "split": split,
        "update": updated,
        "rows": rows,
        "kept": kept,
    }
    save_result(args.out, payload)


if __name__ == "__main__":
    main()
