"""A separate α per tree level for the static block (issue 24's last untried variant), on debtags' validation split.

Usage (from the repository root; a few minutes on 2 cores):
    .venv/bin/python -m bench.experiments.static_alpha_levels [--data ../shared/data/debtags] [--result-name NAME]

The seeded 10 % validation split of bench/static_debtags.py (rankers on the other 90 %, the default MiniLM
table distilled with tune=none on them). One XR-Linear model per α in {0, 0.25, 0.5, 1} on [TF-IDF, α·static],
all on one tree; a per-level combination (α_1, α_2, ...) takes level t's rankers from the model trained at α_t
and multiplies their static columns by α_t, so one Φ_cat at α = 1 scores every level exactly as if level t
had seen [TF-IDF, α_t·static] (a ranker's score is linear in the block). Twice: on the tree built from
TF-IDF alone and on the tree built from Φ_cat at α 0.5 (what a `--dense static` run builds). Validation only:
no test-split number, since no combination stood out.
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from xtag.corpus.files import build_vocab, load_corpus
from xtag.evaluation.evaluate import ground_truth
from xtag.models.features.tfidf import TfidfFeaturizer
from xtag.models.inference.types import RankerLevel
from xtag.models.metrics import evaluate
from xtag.models.xlinear.model import XLinearModel
from xtag.models.xr_transformer.concat_features import concat_features
from xtag.training.static.config import StaticDenseConfig
from xtag.training.static.fit import build_static_encoder
from xtag.training.tree.build import build_tree, pifa_embeddings
from xtag.training.xlinear.config import XLinearConfig
from xtag.training.xlinear.train import train_xlinear

from bench.helpers.results import save_result
from bench.helpers.static import subset

ALPHAS = (0.0, 0.25, 0.5, 1.0)


def scaled(level: RankerLevel, d: int, alpha: float) -> RankerLevel:
    """The level with its static columns (d..) multiplied by α."""
    W = level.W.tocsc(copy=True)
    W.data[W.indptr[d] :] *= alpha
    return RankerLevel(W=W.tocsr(), bias=level.bias.copy())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/data/debtags"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--result-name", default=None)
    args = ap.parse_args()
    train = load_corpus(args.data / "train.jsonl.gz")
    mask = np.random.default_rng(args.seed).random(len(train)) < 0.1
    fit, val = subset(train, ~mask), subset(train, mask)
    vocab = build_vocab(fit)
    tfidf, Xf = TfidfFeaturizer.fit(fit.texts)
    Yf, _ = fit.label_matrix(vocab)
    encoder = build_static_encoder(fit.texts, StaticDenseConfig(tune="none"))
    Ef, Ev = encoder.encode(fit.texts), encoder.encode(val.texts)
    truth = ground_truth(val, vocab)
    d, dim = Xf.shape[1], Ef.shape[1]
    served = concat_features(tfidf.transform(val.texts), Ev, 1.0)
    grids = {}
    with tempfile.TemporaryDirectory() as work:
        for tree_alpha in (0.0, 0.5):
            features = concat_features(Xf, Ef, tree_alpha) if tree_alpha else Xf
            chain = build_tree(pifa_embeddings(features, Yf), XLinearConfig().tree)
            levels_at, config = {}, None
            for alpha in ALPHAS:
                folder = Path(work) / f"tree{tree_alpha}-a{alpha}"
                folder.mkdir()
                chain.save(folder / "chain.npz")  # train_xlinear takes the tree from its checkpoint
                X = concat_features(Xf, Ef, alpha) if alpha else Xf
                model = train_xlinear(X, Yf, XLinearConfig(), checkpoint_dir=folder, progress=False)
                if alpha:
                    levels_at[alpha], config = model.levels, model.config
                else:  # TF-IDF alone: its rankers padded with zero static columns
                    zeros = [sp.csr_matrix((lv.W.shape[0], dim), dtype=lv.W.dtype) for lv in model.levels]
                    levels_at[alpha] = [
                        RankerLevel(W=sp.hstack([lv.W, z], format="csr"), bias=lv.bias)
                        for lv, z in zip(model.levels, zeros)
                    ]
            grid = {}
            for combo in itertools.product(ALPHAS, repeat=chain.depth):
                levels = [scaled(levels_at[a][t], d, a) for t, a in enumerate(combo)]
                preds = XLinearModel(chain, levels, config).predict(served, k=5)
                m = evaluate(preds.labels, truth.Y, (1, 5), truth.propensity)
                grid[",".join(map(str, combo))] = {"P@1": round(m["P@1"], 2), "PSP@5": round(m["PSP@5"], 2)}
                print(tree_alpha, combo, grid[",".join(map(str, combo))], flush=True)
            grids[str(tree_alpha)] = grid
    payload = {"data": args.data.resolve().name, "validation_documents": len(val), "alphas": ALPHAS, "grids": grids}
    if args.result_name:
        save_result(args.result_name, payload)


if __name__ == "__main__":
    main()
