"""Which half makes an XR-Linear accuracy gap against PECOS: the label tree or the rankers?

    .venv/bin/python -m bench.experiments.tree_swap --workdir bench/out/xlinear_vs_pecos_debdeps --data ../shared/data/debdeps \
        [--pifa-weighting uniform]

Per seed, both libraries train their rankers on both trees (xtag's and PECOS's, each built by its library
from the same matrices: PECOS's from its own PIFA, xtag's from the one --pifa-weighting names;
bench/experiments/pecos_tree_swap.py converts between the two layouts), and both trees are described by what a
tree is for, in xtag's PIFA space:
- `leaf_cosine`: mean cosine of a label's PIFA embedding to its leaf cluster's centroid (the k-means objective);
- `pairs_same_leaf`: the share of co-occurring label pairs of the training documents that share a leaf
  (pairs of labels a document has together are what one beam must reach together);
- the leaf sizes.
Accuracy is scored with models/metrics.py under the corpus's convention, top-10 from beam 10 for both.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from xtag.models.label_tree import ClusterChain
from xtag.models.metrics import evaluate
from xtag.training.tree.build import PifaWeighting, TreeConfig, build_tree, pifa_embeddings
from xtag.training.xlinear.config import XLinearConfig
from xtag.training.xlinear.train import train_xlinear

from bench.helpers.pecos import METRICS, PECOS_PY, load_workdir, workdir_arguments
from bench.helpers.results import save_result


def tree_stats(chain: ClusterChain, E: sp.csr_matrix, Y: sp.csr_matrix) -> dict:
    """The leaf level's k-means objective and co-occurrence share in the space of E (module docstring)."""
    leaf = chain.ancestors(chain.depth - 1)  # every label's leaf cluster
    n_leaves = chain.level_size(chain.depth - 1)
    member = sp.csr_matrix((np.ones(len(leaf), np.float32), (leaf, np.arange(len(leaf)))), shape=(n_leaves, len(leaf)))
    centroids = sp.csr_matrix(member @ E)
    norms = np.sqrt(np.asarray(centroids.multiply(centroids).sum(axis=1)).ravel())
    cos = np.asarray(E.multiply(centroids[leaf]).sum(axis=1)).ravel() / np.maximum(norms[leaf], 1e-12)
    Yb = Y.copy()
    Yb.data[:] = 1
    per_doc = np.diff(Yb.indptr).astype(np.float64)
    pairs = float((per_doc * (per_doc - 1) / 2).sum())
    L = (Yb @ member.T).tocsr()  # documents x leaves: how many of its labels each leaf holds
    same = float((L.data * (L.data - 1) / 2).sum())
    sizes = np.diff(chain.ptrs[-1])
    return {
        "levels": [chain.level_size(t) for t in range(1, chain.depth + 1)],
        "leaf_cosine": float(cos.mean()),
        "pairs_same_leaf": same / max(pairs, 1.0),
        "leaf_size_min_max": [int(sizes.min()), int(sizes.max())],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    workdir_arguments(ap)
    ap.add_argument("--pifa-weighting", default=TreeConfig().pifa_weighting, choices=PifaWeighting.__args__)
    ap.add_argument("--result-name", default=None, help="default: tree_swap_<data folder name>_<pifa weighting>")
    args = ap.parse_args()
    w = args.workdir
    X, Y, Xt, truth = load_workdir(w, args.data)
    E = pifa_embeddings(X, Y, args.pifa_weighting)

    def score(top: np.ndarray) -> dict:
        m = evaluate(top, truth.Y, (1, 3, 5), truth.propensity, truth.convention)
        return {k: m[k] for k in METRICS}

    rows, trees = [], []
    for seed in (int(s) for s in args.seeds.split(",")):
        config = XLinearConfig(n_jobs=args.threads, tree=TreeConfig(seed=seed, pifa_weighting=args.pifa_weighting))
        ours = build_tree(E, config.tree, threads=args.threads)
        with tempfile.TemporaryDirectory() as tmp:
            ours_path = Path(tmp) / "ours.npz"
            ours.save(ours_path)
            cmd = [
                str(PECOS_PY),
                "-m",
                "bench.experiments.pecos_tree_swap",
                "--workdir",
                str(w),
                "--seed",
                str(seed),
            ]
            subprocess.run(cmd + ["--threads", str(args.threads), "--chain-in", str(ours_path)], check=True)
        theirs = ClusterChain.load(w / f"pecos_chain_{seed}.npz")
        for tree_name, chain in (("xtag", ours), ("PECOS", theirs)):
            trees.append({"seed": seed, "tree": tree_name, **tree_stats(chain, E, Y)})
            print(json.dumps(trees[-1]), flush=True)
            with tempfile.TemporaryDirectory() as tmp:
                chain.save(Path(tmp) / "chain.npz")  # train_xlinear resumes from a checkpoint's tree
                model = train_xlinear(X, Y, config, checkpoint_dir=Path(tmp), progress=False)
            rows.append(
                {"seed": seed, "tree": tree_name, "rankers": "xtag", "metrics": score(model.predict(Xt, k=10).labels)}
            )
            print(json.dumps(rows[-1]), flush=True)
            peer = "own" if tree_name == "PECOS" else "given"
            with np.load(w / f"pecos_swap_{peer}_{seed}.npz") as z:
                rows.append(
                    {
                        "seed": seed,
                        "tree": tree_name,
                        "rankers": "PECOS",
                        "metrics": score(z["indices"].astype(np.int64)),
                    }
                )
            print(json.dumps(rows[-1]), flush=True)
    means = {
        f"{tree} tree, {rankers} rankers": {
            m: float(np.mean([r["metrics"][m] for r in rows if r["tree"] == tree and r["rankers"] == rankers]))
            for m in METRICS
        }
        for tree in ("xtag", "PECOS")
        for rankers in ("xtag", "PECOS")
    }
    tree_means = {
        tree: {
            k: float(np.mean([s[k] for s in trees if s["tree"] == tree])) for k in ("leaf_cosine", "pairs_same_leaf")
        }
        for tree in ("xtag", "PECOS")
    }
    print(json.dumps({"means": means, "trees": tree_means}, indent=2))
    result = {
        "data": args.data.name,
        "pifa_weighting": args.pifa_weighting,
        "convention": truth.convention,
        "rows": rows,
        "trees": trees,
        "means": means,
        "tree_means": tree_means,
    }
    name = args.result_name or f"tree_swap_{args.data.resolve().name}_{args.pifa_weighting}"
    command = f".venv/bin/python -m bench.experiments.tree_swap --workdir {w} --data {args.data} --pifa-weighting {args.pifa_weighting}"
    save_result(name, result, command=[command])


if __name__ == "__main__":
    main()
