"""XR-Linear accuracy, xtag vs PECOS, over several label-tree seeds: is a gap at one seed the seed's or the method's?

    .venv/bin/python -m bench.xlinear_seeds --workdir bench/out/xlinear_vs_pecos --data ../shared/data/debtags
    .venv/bin/python -m bench.xlinear_seeds --workdir bench/out/xlinear_vs_pecos_debdeps --data ../shared/data/debdeps

Reads the TF-IDF matrices bench/xlinear_vs_pecos.py wrote to --workdir (both libraries get the same ones),
trains each library once per seed (xtag: TreeConfig.seed, here in-process; PECOS: its clustering seed, via
bench/peers/pecos_xlinear.py in its own venv), and scores both top-10s with models/metrics.py under the XMC
convention. Only accuracy is reported: the training times of that script are measured by
xlinear_vs_pecos.py on a quiet machine. PECOS's run writes its usual files into --workdir (scratch).
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import numpy as np
from xtag.models.metrics import evaluate
from xtag.training.tree.build import TreeConfig
from xtag.training.xlinear.config import XLinearConfig
from xtag.training.xlinear.train import train_xlinear

from bench.helpers.pecos import METRICS, PECOS_PY, load_workdir, workdir_arguments
from bench.helpers.results import save_result


def pecos_top(workdir: Path, seed: int, threads: int) -> np.ndarray:
    cmd = [str(PECOS_PY), "-m", "bench.peers.pecos_xlinear", "--workdir", str(workdir), "--threads", str(threads)]
    subprocess.run(cmd + ["--repeats", "1", "--seed", str(seed), "--single-n", "50"], check=True)
    with np.load(workdir / "pecos_pred.npz") as z:
        return z["indices"].astype(np.int64)


def main() -> None:
    ap = argparse.ArgumentParser()
    workdir_arguments(ap)
    ap.add_argument("--result-name", default=None, help="default: xlinear_seeds_<data folder name>")
    args = ap.parse_args()
    w = args.workdir
    X, Y, Xt, truth = load_workdir(w, args.data)
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        config = XLinearConfig(n_jobs=args.threads, tree=TreeConfig(seed=seed))
        ours = train_xlinear(X, Y, config, progress=False).predict(Xt, k=10).labels
        for library, top in (("xtag", ours), ("PECOS", pecos_top(w, seed, args.threads))):
            metrics = evaluate(top, truth.Y, (1, 3, 5), truth.propensity, truth.convention)
            rows.append({"library": library, "seed": seed, "metrics": {m: metrics[m] for m in METRICS}})
            print(json.dumps(rows[-1]), flush=True)
    means = {
        lib: {m: float(np.mean([r["metrics"][m] for r in rows if r["library"] == lib])) for m in METRICS}
        for lib in ("xtag", "PECOS")
    }
    result = {"data": str(args.data.name), "convention": truth.convention, "rows": rows, "means": means}
    print(json.dumps(means, indent=2))
    name = args.result_name or f"xlinear_seeds_{args.data.resolve().name}"
    save_result(
        name,
        result,
        command=[f".venv/bin/python -m bench.xlinear_seeds --workdir {w} --data {args.data} --seeds {args.seeds}"],
    )


if __name__ == "__main__":
    main()
