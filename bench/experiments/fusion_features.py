"""The label-text fusion's features and fit, measured fast on debdeps (issue 49's P@1 and test-only recall goals).

    .venv/bin/python -m bench.experiments.fusion_features cache --work /tmp/h_fusion/xlinear_stage_tfidf_cosine
    .venv/bin/python -m bench.experiments.fusion_features fit --cache /tmp/h_fusion/cache.npz

`cache` resumes the stage's run in --work (bench/label_text_stage.py's work folder: its trees and encoder are reused,
not retrained) with wide candidate lists, and saves, for the held-out documents (scored by the held-out tree, as the
fusion's fit sees them) and for the test documents (the served tree): the tree's top 50, the label index's top 100,
the index's top 30 among labels with no training document, and the 50 nearest training documents by the encoder's
cosine (held-out documents: among the documents their tree trained on). `fit` then fits each fusion variant on the
held-out rows and measures it on the test rows (own id excluded) in seconds. Prints JSON, one line a variant.

A variant (--variants '{"name": {...}}'): K, M (the tree's and the index's widths), N (the index's top N among labels
with no training document, as a second list), P (the top P labels of the nearest training documents, as a third),
feats (names in `features`), kind (lr, softmax: listwise per document, hgb[:ITERS:LEAVES], mlp[:HIDDEN]), wnew (the
weight of a true label with no training document in the fit), quota (places of the top 10 after the fifth kept for
labels with no training document). Results: bench/RESULTS.md, "label_text_fusion".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

K_WIDE, M_WIDE, NEW_WIDE, NEIGHBOURS = 50, 100, 30, 50
CHUNK = 512


def top_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    from xtag.models.inference.beam_search import top_k_positions

    idx = top_k_positions(scores, k)
    return idx, np.take_along_axis(scores, idx, 1)


def searches(queries: sp.csr_matrix, labels_T: sp.csr_matrix, new: np.ndarray, docs_T: sp.csr_matrix):
    """Per query: the top M_WIDE labels, the top NEW_WIDE among `new` labels, the NEIGHBOURS nearest documents."""
    out = {k: [] for k in ("m_ids", "m_sims", "n_ids", "n_sims", "d_ids", "d_sims")}
    for lo in range(0, queries.shape[0], CHUNK):
        q = queries[lo : lo + CHUNK]
        s = (q @ labels_T).toarray().astype(np.float32)
        ids, sims = top_rows(s, M_WIDE)
        out["m_ids"].append(ids), out["m_sims"].append(sims)
        s[:, ~new] = -np.inf
        ids, sims = top_rows(s, NEW_WIDE)
        out["n_ids"].append(ids), out["n_sims"].append(sims)
        d = (q @ docs_T).toarray().astype(np.float32)
        ids, sims = top_rows(d, NEIGHBOURS)
        out["d_ids"].append(ids), out["d_sims"].append(sims)
    return {k: np.vstack(v) for k, v in out.items()}


def heldout_signals(work: Path, run_dir: Path) -> None:
    """The stage's run resumed into `run_dir` with the tree's top K_WIDE, stopped at the fusion's fit, whose inputs
    (the held-out tree's candidates, the held-out documents' embeddings, own ids, frequencies, labels) are saved."""
    from xtag.training.config import TrainConfig
    from xtag.training.label_text import stage as stage_module
    from xtag.training.run import train_run

    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.copytree(work / "run", run_dir, ignore=shutil.ignore_patterns("model"))
    config = json.loads((run_dir / "config.json").read_text())
    config["label_text"]["tree_candidates"] = K_WIDE
    (run_dir / "config.json").write_text(json.dumps(config, indent=2))
    (run_dir / "summary.json").unlink(missing_ok=True)
    captured = {}

    def capture(tree, queries, own, index, Y, *rest):
        captured.update(tree=tree, queries=queries, own=own, frequencies=index.frequencies, Y=Y)
        raise KeyboardInterrupt  # everything needed is here; the rest of the run is not

    stage_module.fit_fusion = capture
    try:
        train_run(TrainConfig.model_validate(config), run_dir, resume=True, progress=False)
    except KeyboardInterrupt:
        pass
    np.savez(
        run_dir / "heldout.npz",
        tree_labels=captured["tree"].labels,
        tree_scores=captured["tree"].scores,
        own=captured["own"],
        frequencies=captured["frequencies"],
    )
    sp.save_npz(run_dir / "heldout_queries.npz", sp.csr_matrix(captured["queries"]))
    sp.save_npz(run_dir / "heldout_Y.npz", sp.csr_matrix(captured["Y"]))


def cache(args) -> None:
    from xtag.corpus.files import load_corpus
    from xtag.evaluation.evaluate import ground_truth
    from xtag.models.bundle.loader import load_bundle
    from xtag.models.inference.label_filter import own_positions

    work, out = args.work, args.cache
    run_dir = out.parent / "run"
    if not (run_dir / "heldout.npz").is_file():
        heldout_signals(work, run_dir)
    held_cache = np.load(run_dir / "heldout.npz")
    queries_held = sp.load_npz(run_dir / "heldout_queries.npz").tocsr()
    Y_held = sp.load_npz(run_dir / "heldout_Y.npz").tocsr()

    bundle = load_bundle(work / "bundle")
    model, vocab = bundle.predictor.model, bundle.predictor.vocab
    train = load_corpus(args.data / "train.jsonl.gz")
    test = load_corpus(args.data / "test.jsonl.gz")
    n = len(train.texts)
    rng = np.random.default_rng(0)
    held = np.sort(rng.permutation(n)[: min(5000, max(1, int(n * 0.1)))])
    rest = np.setdiff1d(np.arange(n), held)
    assert len(held) == queries_held.shape[0]
    Y_train = ground_truth(train, vocab).Y.tocsr()[:, : len(vocab)]
    Y_test = ground_truth(test, vocab).Y.tocsr()

    t = time.perf_counter()
    docs = sp.vstack(
        [model.encoder.encode_documents(train.texts[lo : lo + 4096]) for lo in range(0, n, 4096)], format="csr"
    )
    labels_T = model.index.embeddings.T.tocsr()
    full_freq = model.index.frequencies
    part_freq = held_cache["frequencies"]
    held_s = searches(queries_held, labels_T, part_freq == 0, docs[rest].T.tocsr())
    held_s["d_ids"] = rest[held_s["d_ids"]]  # rows of the training corpus
    queries_test = sp.vstack(
        [model.encoder.encode_documents(test.texts[lo : lo + 4096]) for lo in range(0, len(test.texts), 4096)],
        format="csr",
    )
    test_s = searches(queries_test, labels_T, full_freq == 0, docs.T.tocsr())
    search_seconds = time.perf_counter() - t
    parts = [
        model.tree.predict(bundle.predictor.featurizer.inner.transform(test.texts[lo : lo + 4096]), k=K_WIDE)
        for lo in range(0, len(test.texts), 4096)
    ]
    tree_labels = np.vstack([p.labels for p in parts])
    tree_scores = np.vstack([p.scores for p in parts])
    names = {name: j for j, name in enumerate(vocab.names)}
    train_names = {x for labels in train.labels for x in labels}
    new_cols = np.array([j for j, name in enumerate(vocab.names) if name not in train_names], np.int64)
    arrays = {
        "held_rows": held,
        "held_tree_labels": held_cache["tree_labels"],
        "held_tree_scores": held_cache["tree_scores"],
        "held_own": held_cache["own"],
        "held_frequencies": part_freq,
        "test_tree_labels": tree_labels,
        "test_tree_scores": tree_scores,
        "test_own": own_positions(test.ids, names),
        "test_frequencies": full_freq,
        "new_columns": new_cols,
        "propensity": ground_truth(test, vocab).propensity,
    }
    for side, s in (("held", held_s), ("test", test_s)):
        arrays.update({f"{side}_{k}": v for k, v in s.items()})
    np.savez(out, **arrays)
    sp.save_npz(out.with_name("Y_held.npz"), Y_held)
    sp.save_npz(out.with_name("Y_test.npz"), Y_test)
    sp.save_npz(out.with_name("Y_train.npz"), Y_train)
    sp.save_npz(out.with_name("q_held.npz"), queries_held)
    sp.save_npz(out.with_name("q_test.npz"), queries_test)
    sp.save_npz(out.with_name("labels_T.npz"), labels_T)
    print(json.dumps({"search_seconds": round(search_seconds, 1), "load": os.getloadavg()[0]}))


class Side:
    """One side's (held-out or test) cached signals, and each candidate's raw signals looked up by (row, label)."""

    def __init__(self, c, folder: Path, side: str, knn_power: float):
        g = lambda k: c[f"{side}_{k}"]  # noqa: E731
        self.tree_labels, self.tree_scores = g("tree_labels"), g("tree_scores")
        self.m_ids, self.m_sims, self.n_ids, self.n_sims = g("m_ids"), g("m_sims"), g("n_ids"), g("n_sims")
        self.d_ids, self.d_sims, self.own, self.frequencies = g("d_ids"), g("d_sims"), g("own"), g("frequencies")
        self.n = self.tree_labels.shape[0]
        self.Y = sp.load_npz(folder / f"Y_{side}.npz").tocsr()
        self.queries = sp.load_npz(folder / f"q_{side}.npz").tocsr()
        Y_train = sp.load_npz(folder / "Y_train.npz").tocsr().astype(np.float32)
        self.n_labels = Y_train.shape[1]
        self.Y = self.Y[:, : self.n_labels] if self.Y.shape[1] >= self.n_labels else self.Y
        rows = np.repeat(np.arange(self.n), self.d_ids.shape[1])
        self.knn = {}
        for nb in (10, 50):
            sims = np.maximum(self.d_sims[:, :nb], 0) ** knn_power
            W = sp.csr_matrix(
                (sims.ravel(), (np.repeat(np.arange(self.n), nb), self.d_ids[:, :nb].ravel())),
                shape=(self.n, Y_train.shape[0]),
            )
            S = (W @ Y_train).tocsr()
            norm = np.maximum(sims.sum(1), 1e-9)
            self.knn[nb] = (sp.diags(1 / norm) @ S).tocsr()
        del rows

    def knn_top(self, nb: int, p: int) -> np.ndarray:
        S = self.knn[nb]
        out = np.full((self.n, p), -1, np.int64)
        for i in range(self.n):
            lo, hi = S.indptr[i], S.indptr[i + 1]
            if hi > lo:
                top = S.indices[lo:hi][np.argsort(-S.data[lo:hi], kind="stable")[:p]]
                out[i, : len(top)] = top
        return out


def lookup(rows_src, labels_src, values, labels, default=0.0) -> np.ndarray:
    """values at (row, label) of `labels` (n × C) from the pairs (rows_src, labels_src); `default` elsewhere."""
    L = 1 << 20
    keys = rows_src.astype(np.int64) * L + labels_src.astype(np.int64)
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], np.asarray(values)[order]
    q = np.arange(labels.shape[0])[:, None].astype(np.int64) * L + np.maximum(labels, 0)
    pos = np.clip(np.searchsorted(keys, q), 0, max(len(keys) - 1, 0))
    hit = (keys[pos] == q) & (labels >= 0) if len(keys) else np.zeros(labels.shape, bool)
    return np.where(hit, values[pos], default).astype(np.float32)


def dedupe(C: np.ndarray) -> np.ndarray:
    C = C.copy()
    order = np.argsort(C, axis=1, kind="stable")
    s = np.take_along_axis(C, order, 1)
    dup = np.zeros_like(C, bool)
    dup[:, 1:] = (s[:, 1:] == s[:, :-1]) & (s[:, 1:] >= 0)
    later = np.zeros_like(C, bool)
    np.put_along_axis(later, order, dup, 1)
    C[later] = -1
    return C


def cosines(queries: sp.csr_matrix, labels_T: sp.csr_matrix, C: np.ndarray) -> np.ndarray:
    out = np.zeros(C.shape, np.float32)
    for lo in range(0, C.shape[0], CHUNK):
        s = (queries[lo : lo + CHUNK] @ labels_T).toarray()
        out[lo : lo + CHUNK] = np.take_along_axis(s, np.maximum(C[lo : lo + CHUNK], 0), 1)
    return np.where(C >= 0, out, 0.0)


def candidates(side: Side, v: dict, labels_T) -> tuple[np.ndarray, dict]:
    K, M, N, P = v["K"], v["M"], v["N"], v["P"]
    parts = [side.tree_labels[:, :K], side.m_ids[:, :M]]
    if N:
        parts.append(side.n_ids[:, :N])
    if P:
        parts.append(side.knn_top(v.get("nb", 10), P))
    C = dedupe(np.concatenate(parts, axis=1))
    n = side.n
    rows = lambda a: np.repeat(np.arange(n), a.shape[1])  # noqa: E731
    tl = side.tree_labels[:, :K]
    ts = np.where(np.isfinite(side.tree_scores[:, :K]), side.tree_scores[:, :K], 0.0)
    raw = {}
    raw["tree_score"] = lookup(rows(tl), tl.ravel(), ts.ravel(), C)
    raw["tree_rank"] = lookup(rows(tl), tl.ravel(), np.tile(np.arange(K), n), C, default=K)
    raw["absent"] = (raw["tree_rank"] >= K).astype(np.float32)
    raw["tree_best"] = np.repeat(ts[:, :1], C.shape[1], 1)
    mi = side.m_ids[:, :M]
    raw["index_rank"] = lookup(rows(mi), mi.ravel(), np.tile(np.arange(M), n), C, default=M)
    raw["cosine"] = cosines(side.queries, labels_T, C)
    raw["cos_best"] = np.repeat(side.m_sims[:, :1], C.shape[1], 1)
    raw["frequency"] = side.frequencies[np.maximum(C, 0)].astype(np.float32)
    for nb in (10, 50):
        S = side.knn[nb].tocoo()
        raw[f"knn{nb}"] = lookup(S.row, S.col, S.data, C)
    return C, raw


def features(raw: dict, names: list[str]) -> np.ndarray:
    f = {}
    absent = raw["absent"]
    f["tree_score"] = raw["tree_score"]
    f["tree_absent"] = absent
    f["cosine"] = raw["cosine"]
    f["log_frequency"] = np.log1p(raw["frequency"])
    f["no_documents"] = (raw["frequency"] == 0).astype(np.float32)
    f["cosine_absent"] = raw["cosine"] * absent
    f["tree_rr"] = (1 - absent) / (1 + raw["tree_rank"])
    f["index_rr"] = np.where(raw["index_rank"] < raw["index_rank"].max(), 1 / (1 + raw["index_rank"]), 0.0)
    f["index_absent"] = (raw["index_rank"] >= raw["index_rank"].max()).astype(np.float32)
    f["tree_gap"] = (raw["tree_score"] - raw["tree_best"]) * (1 - absent)
    f["cos_gap"] = raw["cosine"] - raw["cos_best"]
    f["tree_x_cos"] = raw["tree_score"] * raw["cosine"]
    f["knn10"] = raw["knn10"]
    f["knn50"] = raw["knn50"]
    f["log_knn10"] = np.log(raw["knn10"] + 1e-3)
    f["knn_absent"] = raw["knn10"] * absent
    f["cos_nodocs"] = raw["cosine"] * f["no_documents"]
    f["cos_gap_nodocs"] = f["cos_gap"] * f["no_documents"]
    return np.stack([f[k] for k in names], axis=-1).astype(np.float32)


def truth_of(C: np.ndarray, Y: sp.csr_matrix) -> np.ndarray:
    Y = Y.tocsr()
    rows = np.repeat(np.arange(Y.shape[0]), np.diff(Y.indptr))
    return lookup(rows, Y.indices, np.ones(len(rows)), C) > 0


def fit_model(X, y, groups, kind: str, weight=None):
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    if kind.startswith("hgb"):  # hgb or hgb:ITERS:LEAVES
        from sklearn.ensemble import HistGradientBoostingClassifier

        _, iters, leaves = (kind + ":200:31").split(":")[:3]
        m = HistGradientBoostingClassifier(
            max_iter=int(iters), learning_rate=0.1, max_leaf_nodes=int(leaves), random_state=0, early_stopping=False
        )
        m.fit(X, y, sample_weight=weight)
        return lambda Z: m.decision_function(Z)
    scaler = StandardScaler().fit(X)
    Xs = scaler.transform(X)
    if kind.startswith("mlp"):  # mlp or mlp:HIDDEN
        from sklearn.neural_network import MLPClassifier

        hidden = int((kind + ":32").split(":")[1])
        m = MLPClassifier(hidden_layer_sizes=(hidden,), alpha=1e-3, max_iter=200, early_stopping=True, random_state=0)
        m.fit(Xs, y)
        return lambda Z: np.log(np.clip(m.predict_proba(scaler.transform(Z))[:, 1], 1e-12, 1))
    if kind == "lr":
        m = LogisticRegression(C=1.0, max_iter=2000).fit(Xs, y)
        w, b = m.coef_[0], m.intercept_[0]
    else:  # listwise softmax over each document's candidates
        from scipy.optimize import minimize

        g = groups
        starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        has_pos = np.add.reduceat(y.astype(np.float64), starts) > 0
        keep = has_pos[np.searchsorted(starts, np.arange(len(g)), side="right") - 1]
        Xk, yk, gk = Xs[keep], y[keep].astype(np.float64), g[keep]
        _, gi = np.unique(gk, return_inverse=True)
        npos = np.bincount(gi, weights=yk)

        def loss(w):
            s = Xk @ w
            mx = np.full(gi.max() + 1, -np.inf)
            np.maximum.at(mx, gi, s)
            e = np.exp(s - mx[gi])
            Z = np.bincount(gi, weights=e)
            lse = np.log(Z) + mx
            l2 = 1e-3 * (w @ w)
            val = -(yk * (s - lse[gi])).sum() / len(npos) + l2
            p = e / Z[gi]
            grad_s = (-(yk) + npos[gi] * p) / len(npos)
            return val, Xk.T @ grad_s + 2e-3 * w

        w = minimize(loss, np.zeros(Xk.shape[1]), jac=True, method="L-BFGS-B").x
        b = 0.0
    w_raw = w / scaler.scale_
    b_raw = b - (w * scaler.mean_ / scaler.scale_).sum()
    return lambda Z: Z @ w_raw + b_raw


def evaluate_side(side: Side, C, scores, propensity, new_columns, quota: int = 0) -> dict:
    """Own id excluded; `quota`: the last `quota` places of the top 10 go to the best candidates with no training
    document that the first 10 − quota did not hold."""
    from xtag.models.inference.beam_search import top_k
    from xtag.models.metrics import evaluate, occurrence_recall

    scores = np.where((C >= 0) & (C != side.own[:, None]), scores, -np.inf).astype(np.float32)
    ids, _ = top_k(scores, C, 10)
    if quota:
        head, _ = top_k(scores, C, 10 - quota)
        fresh = (side.frequencies[np.maximum(C, 0)] == 0) & ~(C[:, :, None] == head[:, None, :]).any(2)
        tail, _ = top_k(np.where(fresh, scores, -np.inf), C, quota)
        ids = np.concatenate([head, tail], axis=1)
    Y = side.Y
    m = evaluate(ids[:, :5], Y, (1, 5), propensity)
    m10 = evaluate(ids, Y, (10,), None)
    return {
        "P@10": round(m10["P@10"], 2),
        "P@1": round(m["P@1"], 2),
        "P@5": round(m["P@5"], 2),
        "PSP@5": round(m["PSP@5"], 2),
        "test_only_R@10": round(occurrence_recall(ids, Y, new_columns, 10), 2),
    }


BASE = ["tree_score", "tree_absent", "cosine", "log_frequency", "no_documents", "cosine_absent"]
VARIANTS = {
    "today (K20 M20, lr, 6 features)": dict(K=20, M=20, N=0, P=0, feats=BASE, kind="lr"),
}


def fit(args) -> None:
    c = np.load(args.cache)
    folder = args.cache.parent
    labels_T = sp.load_npz(folder / "labels_T.npz").tocsr()
    held, test = Side(c, folder, "held", args.knn_power), Side(c, folder, "test", args.knn_power)
    Y_test_full = sp.load_npz(folder / "Y_test.npz").tocsr()
    test.Y = Y_test_full
    propensity, new_columns = c["propensity"], c["new_columns"]
    variants = json.loads(args.variants) if args.variants else VARIANTS
    for name, v in variants.items():
        t = time.perf_counter()
        out = {}
        for side in (held, test):
            C, raw = candidates(side, v, labels_T)
            X = features(raw, v["feats"])
            keep = C >= 0
            if side is held:
                keep &= C != side.own[:, None]
                y = truth_of(C, side.Y)
                groups = np.repeat(np.arange(side.n), C.shape[1]).reshape(C.shape)[keep]
                weight = np.where(y & (X[..., v["feats"].index("no_documents")] > 0), v.get("wnew", 1.0), 1.0)
                score = fit_model(X[keep], y[keep], groups, v["kind"], weight[keep])
                out["held_recall_of_candidates"] = round(100 * y[keep].sum() / side.Y.sum(), 2)
            else:
                s = score(X.reshape(-1, X.shape[-1])).reshape(C.shape)
                out.update(evaluate_side(side, C, s, propensity, new_columns, v.get("quota", 0)))
                cand_new = np.isin(C, new_columns)
                out["test_only_in_candidates"] = round(
                    100 * float((truth_of(C, Y_test_full) & cand_new).sum()) / Y_test_full[:, new_columns].sum(), 2
                )
        out["seconds"] = round(time.perf_counter() - t, 1)
        out["load"] = round(os.getloadavg()[0], 2)
        print(json.dumps({"variant": name, **{k: float(x) for k, x in out.items()}}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("step", choices=["cache", "fit"])
    ap.add_argument("--work", type=Path, default=Path("/tmp/h_fusion/xlinear_stage_tfidf_cosine"))
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data/debdeps"))
    ap.add_argument("--cache", type=Path, default=Path("/tmp/h_fusion/cache/cache.npz"))
    ap.add_argument("--variants", default=None, help="JSON {name: {K, M, N, P, nb, feats, kind}}")
    ap.add_argument("--knn-power", type=float, default=1.0)
    args = ap.parse_args()
    args.cache.parent.mkdir(parents=True, exist_ok=True)
    if args.step == "cache":
        cache(args)
    else:
        fit(args)


if __name__ == "__main__":
    main()
