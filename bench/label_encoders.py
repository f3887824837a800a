"""Which label-text encoder (issue 49): documents against label texts on debdeps, retrieval alone, one run.

Usage (from the repository root; minutes per kind on 2 shared cores):
    .venv/bin/python -m bench.label_encoders [--data ../shared/data/debdeps] [--kinds tfidf tfidf-linear ...]
        [--hard tree|both] [--set FIELD=JSON ...] [--result-name label_encoders]
    (a kind may carry its own LabelTextConfig fields: tfidf-linear:shared=true,balance=0.5)

Every kind is trained on the training file (its documents, their labels, the labels' texts from labels.jsonl.gz)
and then ranks ALL labels of the label file for each test document by cosine, the document's own id excluded
(6,382 test documents are labels themselves). Reported: P@1, P@5, recall@10 and recall@100 over every test label
occurrence; recall@10 over the occurrences of the test-only labels (never in training: 5,253, of which 4,511
have a description); training and encoding wall time; one short text through the document side (p50).
`--hard tree` hands the trainer the tree's hard negatives: an XR-Linear model trained on the training file, its
top-M labels of each training document through the one inference path (its training time reported apart).
`tfidf-bigram` is the baseline with the TF-IDF of XR-Linear (uni+bigrams) instead of the encoder's unigrams.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from xtag.corpus.files import build_vocab, load_corpus
from xtag.corpus.label_files import read_label_file
from xtag.models.features.tfidf import TfidfConfig
from xtag.models.inference.label_filter import own_positions
from xtag.training.label_text.config import LabelTextConfig
from xtag.training.label_text.contrastive import train_label_encoder

from bench.helpers.results import save_result

KINDS = ("tfidf", "tfidf-bigram", "tfidf-linear", "static-linear")


def top_labels(encoder, doc_texts: list[str], label_emb, own: np.ndarray, k: int, chunk: int = 512) -> np.ndarray:
    """The k best labels of each document by cosine, its own label (own[i] ≥ 0) excluded."""
    out = np.empty((len(doc_texts), k), dtype=np.int64)
    for lo in range(0, len(doc_texts), chunk):
        D = encoder.encode_documents(doc_texts[lo : lo + chunk])
        S = D @ label_emb.T
        S = S.toarray() if sp.issparse(S) else np.asarray(S)
        rows = np.flatnonzero(own[lo : lo + chunk] >= 0)
        S[rows, own[lo : lo + chunk][rows]] = -np.inf
        part = np.argpartition(-S, k, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(S, part, axis=1), axis=1, kind="stable")
        out[lo : lo + chunk] = np.take_along_axis(part, order, axis=1)
    return out


def metrics(top: np.ndarray, truth: list[set[int]], test_only: list[set[int]], with_text: set[int]) -> dict:
    hit = lambda row, labels, k: len(labels.intersection(row[:k].tolist()))  # noqa: E731
    n = len(truth)
    occurrences = sum(len(t) for t in truth)
    only = sum(len(t) for t in test_only)
    only_text = sum(len(t & with_text) for t in test_only)
    return {
        "P@1": round(100 * sum(hit(r, t, 1) for r, t in zip(top, truth)) / n, 2),
        "P@5": round(100 * sum(hit(r, t, 5) for r, t in zip(top, truth)) / (5 * n), 2),
        "R@10": round(100 * sum(hit(r, t, 10) for r, t in zip(top, truth)) / occurrences, 2),
        "R@100": round(100 * sum(hit(r, t, 100) for r, t in zip(top, truth)) / occurrences, 2),
        "test_only_R@10": round(100 * sum(hit(r, t, 10) for r, t in zip(top, test_only)) / only, 2),
        "test_only_R@100": round(100 * sum(hit(r, t, 100) for r, t in zip(top, test_only)) / only, 2),
        "test_only_text_R@10": round(
            100 * sum(hit(r, t & with_text, 10) for r, t in zip(top, test_only)) / only_text, 2
        ),
        "test_only_occurrences": only,
        "test_only_with_text": only_text,
    }


def measure(encoder, test_texts: list[str], all_texts: list[str], own: np.ndarray, latency_texts: int, truths) -> dict:
    """Quality of the encoder's top 100 over every label, the time to encode the labels and rank the test split,
    and one test text through the document side (p50)."""
    start = time.perf_counter()
    label_emb = encoder.encode_labels(all_texts)
    label_seconds = time.perf_counter() - start
    start = time.perf_counter()
    top = top_labels(encoder, test_texts, label_emb, own, 100)
    rank_seconds = time.perf_counter() - start
    one = []
    for text in test_texts[:latency_texts]:
        t = time.perf_counter()
        encoder.encode_documents([text])
        one.append(time.perf_counter() - t)
    return {
        **metrics(top, *truths),
        "encode_labels_seconds": round(label_seconds, 1),
        "rank_test_seconds": round(rank_seconds, 1),
        "doc_p50_ms": round(1000 * statistics.median(one), 3),
        "dim": encoder.dim,
    }


def tree_hard_negatives(X: sp.csr_matrix, Y: sp.csr_matrix, m: int) -> tuple[sp.csr_matrix, float]:
    """The tree's top-m labels of each training document (XR-Linear trained here), and its training seconds."""
    from xtag.training.xlinear.config import XLinearConfig
    from xtag.training.xlinear.train import train_xlinear

    start = time.perf_counter()
    model = train_xlinear(X, Y, XLinearConfig(), progress=False)
    seconds = time.perf_counter() - start
    labels = model.predict(X, k=m).labels
    rows = np.repeat(np.arange(X.shape[0]), m)
    cols = np.asarray(labels).reshape(-1)
    keep = cols >= 0
    return sp.csr_matrix((np.ones(int(keep.sum()), np.float32), (rows[keep], cols[keep])), Y.shape), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/debdeps"))
    parser.add_argument(
        "--kinds", nargs="+", default=list(KINDS), help=f"KIND[:FIELD=JSON,...], KIND one of {', '.join(KINDS)}"
    )
    parser.add_argument("--hard", choices=("none", "tree", "both"), default="none")
    parser.add_argument("--hard-m", type=int, default=20)
    parser.add_argument("--set", nargs="*", default=[], help="LabelTextConfig fields, KEY=JSON")
    parser.add_argument("--latency-texts", type=int, default=500)
    parser.add_argument("--result-name", default=None)
    parser.add_argument("--out", type=Path, default=None, help="also write the payload here")
    args = parser.parse_args()

    train, test = load_corpus(args.data / "train.jsonl.gz"), load_corpus(args.data / "test.jsonl.gz")
    labels = read_label_file(args.data / "labels.jsonl.gz")
    vocab = build_vocab(train)
    Y, _ = train.label_matrix(vocab)
    all_ids = [label.id for label in labels.labels]
    column = {label: j for j, label in enumerate(all_ids)}
    with_text = {j for j, label in enumerate(labels.labels) if label.description}
    train_labels = set(vocab.names)
    truth = [{column[x] for x in doc_labels} for doc_labels in test.labels]
    test_only = [{column[x] for x in doc_labels if x not in train_labels} for doc_labels in test.labels]
    own = own_positions(test.ids, column)
    all_texts = labels.texts_for(all_ids)
    overrides = {k: json.loads(v) for k, v in (s.split("=", 1) for s in args.set)}

    hard, hard_facts = None, {}
    if args.hard != "none":
        from xtag.models.features.tfidf import TfidfFeaturizer

        _, X = TfidfFeaturizer.fit(train.texts)
        hard, seconds = tree_hard_negatives(X, Y, args.hard_m)
        hard_facts = {"tree_train_seconds": round(seconds, 1), "m": args.hard_m}
        print(f"tree hard negatives: top {args.hard_m}, XR-Linear trained in {seconds:.1f} s", flush=True)

    variants = []  # (row name, LabelTextConfig fields, with the tree's negatives)
    for spec in args.kinds:
        kind, _, extra = spec.partition(":")
        fields = {"kind": "tfidf" if kind == "tfidf-bigram" else kind, **overrides}
        if kind == "tfidf-bigram":
            fields["tfidf"] = TfidfConfig().model_dump()
        fields.update({k: json.loads(v) for k, v in (f.split("=", 1) for f in extra.split(",") if f)})
        learned = fields["kind"] != "tfidf"
        if learned and args.hard in ("tree", "both"):
            variants.append((spec + " + tree negatives", fields, True))
        if not (learned and args.hard == "tree"):
            variants.append((spec, fields, False))

    rows = {}
    for name, settings, with_hard in variants:
        config = LabelTextConfig(**settings)
        events: list[dict] = []
        load_start = os.getloadavg()[0]
        start = time.perf_counter()
        encoder = train_label_encoder(
            train.texts,
            Y,
            labels.texts_for(vocab.names),
            config,
            hard_negatives=hard if with_hard else None,
            doc_ids=train.ids,
            label_ids=vocab.names,
            log=lambda e: (events.append(e), print(json.dumps(e), flush=True)),
        )
        train_seconds = time.perf_counter() - start
        row = {
            **measure(encoder, test.texts, all_texts, own, args.latency_texts, (truth, test_only, with_text)),
            "train_seconds": round(train_seconds, 1),
            "load_average": [round(load_start, 2), round(os.getloadavg()[0], 2)],
            "config": config.model_dump(mode="json", exclude={"source"}),
            "epochs": [e for e in events if e["event"] == "label_text_epoch"],
        }
        rows[name] = row
        print(name, json.dumps({k: v for k, v in row.items() if k not in ("config", "epochs")}), flush=True)

    payload = {
        "data": args.data.name,
        "train_documents": len(train),
        "test_documents": len(test),
        "labels": len(all_ids),
        "train_labels": len(vocab.names),
        "test_documents_that_are_labels": int((own >= 0).sum()),
        "hard_negatives": hard_facts,
        "rows": rows,
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(payload, indent=1) + "\n")
    if args.result_name:
        save_result(args.result_name, payload)


if __name__ == "__main__":
    main()
