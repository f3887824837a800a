#!/usr/bin/env python
"""Peer runner for bench/experiments/tree_swap.py: PECOS's label tree, and PECOS's rankers on a given tree.

Run with the PECOS venv (bench/peers/setup_pecos.sh):

    bench/.venv-pecos/bin/python -m bench.experiments.pecos_tree_swap --workdir DIR --seed S --chain-in OURS.npz

Reads DIR/X_train.npz, Y_train.npz and X_test.npz (as pecos_xlinear.py). Writes into DIR:

    pecos_chain_<S>.npz        PECOS's tree (PIFA + hierarchical k-means, its defaults) in xtag's ClusterChain
                               layout (ptr_0..ptr_n, leaf_labels), so xtag can train on it
    pecos_swap_own_<S>.npz     top-k of PECOS's rankers on PECOS's tree
    pecos_swap_given_<S>.npz   top-k of PECOS's rankers on the tree in --chain-in (xtag's)

The conversions use numpy only: this venv has no xtag. In xtag's layout the children of a node are
contiguous; PECOS's chain is a list of CSC child-to-parent matrices, top first, the last one mapping labels to
leaf clusters.
"""

import argparse
import os
import sys

import numpy as np
import scipy.sparse as smat

from bench.helpers.peers import load_csr, topk_arrays


def chain_to_ptrs(chain) -> dict:
    """PECOS chain -> xtag ptr arrays: renumber every level top-down so each parent's children are contiguous."""
    new_of_old = np.zeros(1, np.int64)  # the root
    arrays = {}
    for t, C in enumerate(chain):
        parent_old = C.tocsr().indices.astype(np.int64)  # one parent per child
        key = new_of_old[parent_old]
        order = np.argsort(key, kind="stable")  # old child ids in their new order
        arrays[f"ptr_{t}"] = np.concatenate([[0], np.cumsum(np.bincount(key, minlength=C.shape[1]))]).astype(np.int64)
        new_of_old = np.empty(C.shape[0], np.int64)
        new_of_old[order] = np.arange(C.shape[0])
        last_order = order
    arrays["leaf_labels"] = last_order.astype(np.int64)
    return arrays


def ptrs_to_chain(path: str) -> list:
    """xtag ptr arrays -> PECOS chain (CSC child x parent matrices; the last level's children are label ids)."""
    with np.load(path) as z:
        ptrs = [z[f"ptr_{t}"] for t in range(sum(1 for k in z.files if k.startswith("ptr_")))]
        leaf_labels = z["leaf_labels"]
    chain = []
    for t, ptr in enumerate(ptrs):
        n_parents, n_children = len(ptr) - 1, int(ptr[-1])
        parents = np.repeat(np.arange(n_parents), np.diff(ptr))
        children = leaf_labels if t == len(ptrs) - 1 else np.arange(n_children)
        ones = np.ones(n_children, np.float32)
        chain.append(smat.csc_matrix((ones, (children, parents)), shape=(n_children, n_parents)))
    return chain


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chain-in", required=True, help="xtag's tree for the same seed (ClusterChain .npz)")
    ap.add_argument("--topk", type=int, default=10)
    args = ap.parse_args(argv)

    from pecos.xmc import Indexer, LabelEmbeddingFactory
    from pecos.xmc.xlinear.model import XLinearModel

    wd, s = args.workdir, args.seed
    X_tr = load_csr(os.path.join(wd, "X_train.npz"))
    Y_tr = load_csr(os.path.join(wd, "Y_train.npz"))
    X_te = load_csr(os.path.join(wd, "X_test.npz"))
    Y_tr.data[:] = 1.0
    Y_csc = Y_tr.tocsc()
    feat = LabelEmbeddingFactory.create(Y_csc, X_tr, method="pifa", threads=args.threads)
    own = Indexer.gen(
        feat, indexer_type="hierarchicalkmeans", nr_splits=16, max_leaf_size=100, seed=s, threads=args.threads
    )
    np.savez(os.path.join(wd, f"pecos_chain_{s}.npz"), **chain_to_ptrs(list(own)))
    for name, chain in (("own", own), ("given", ptrs_to_chain(args.chain_in))):
        model = XLinearModel.train(
            X_tr, Y_csc, C=chain, threads=args.threads, nr_splits=16, solver_type="L2R_L2LOSS_SVC_DUAL",
            Cp=1.0, Cn=1.0, threshold=0.1, negative_sampling_scheme="tfn", beam_size=10, only_topk=args.topk,
            post_processor="l3-hinge",
        )  # fmt: skip
        pred = model.predict(X_te, beam_size=10, only_topk=args.topk, threads=args.threads)
        idx, sc = topk_arrays(pred, args.topk)
        np.savez(os.path.join(wd, f"pecos_swap_{name}_{s}.npz"), indices=idx, scores=sc)
        print(f"[pecos] seed {s}: rankers on the {name} tree done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
