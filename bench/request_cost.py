"""Fit service/http/cost.py's request cost model to measured CPU time, and say how well it tracks it.

For each bundle, a seeded sample of a grid of requests (documents × characters per text × k × beam × explain ×
reweight × optimize) runs through the service's own code path in-process, one at a time: ServedModel.predict
(reweighted when asked) or predict_optimized, then the response's label lists (service/http/response_json.py) or the
explained ones, serialised by orjson as the handler does. Each point's CPU time is the smallest of --repeats
runs of time.process_time (the process's CPU, every thread's: the engine's threads count too). Points whose
rough estimate is over --max-point-ms are skipped, so the whole run stays bounded; the costly corners
(explaining hundreds of documents at k = 1000) are reached by the model's linearity in documents, measured on
fewer documents. Then the coefficients of service/http/cost.py's FEATURES are fitted by non-negative least squares
on relative error, the response bytes per explained label likewise, and the worst ratios of estimate to
measurement over the grid are printed and saved (bench/results/request_cost.json); paste the printed
COEFFICIENTS and EXPLAINED_BYTES into service/http/cost.py.

    .venv/bin/python -m bench.request_cost --bundle bundles/debtags-xl --bundle bundles/debdeps-xl \\
        --texts ../shared/data/debtags/test.jsonl.gz --points 60
"""

from __future__ import annotations

import argparse
import itertools
import random
import time
from functools import partial
from pathlib import Path

import numpy as np
import orjson
from scipy.optimize import nnls
from xtag.models.bundle.loader import load_bundle
from xtag.models.inference.macro_optimal import predict_optimized, serving_config
from xtag.service.http.cost import FEATURES, Work, label_bytes, tree_shape
from xtag.service.http.response_json import label_lists
from xtag.service.state.model_slot import ServedModel
from xtag.training.data.corpus import load_corpus

from bench.helpers.results import save_result

DOCUMENTS = (1, 8, 64, 256)
CHARACTERS = (200, 2000, 20000)
BEAMS = (None, 64, 512)


def sized(texts: list[str], n: int, chars: int) -> list[str]:
    """n texts of `chars` characters each: corpus texts repeated or cut (words kept whole enough)."""
    out = []
    for t in itertools.islice(itertools.cycle(texts), n):
        out.append(((t + " ") * (chars // max(len(t), 1) + 1))[:chars])
    return out


def run_once(model: ServedModel, texts: list[str], k: int, beam, explain: bool, reweight: bool, optimize: bool):
    """What the handler does for this request after admission; returns the response bytes."""
    if optimize:
        config = serving_config("macro-f1", 1.0, "bca")
        run = partial(predict_optimized, model.bundle.predictor, k=k, beam_size=beam or model.default_beam)
        preds = run(texts, n_labels=model.n_labels, config=config)
    else:
        a = model.gains("psp", 0.5, None) if reweight else None
        preds = model.predict(texts, k, beam, a)
    rows = model.explained(texts, preds, None) if explain else label_lists(model.label_prefixes, preds, None)
    return len(orjson.dumps({"results": [{"id": str(i), "labels": r} for i, r in enumerate(rows)]}))


def measure(model: ServedModel, texts: list[str], point: dict, repeats: int) -> tuple[float, int]:
    best, size = float("inf"), 0
    args = (point["k"], point["beam"], point["explain"], point["reweight"], point["optimize"])
    for _ in range(repeats):
        t0 = time.process_time()
        size = run_once(model, texts, *args)
        best = min(best, time.process_time() - t0)
    return best * 1e3, size


def grid(n_labels: int, rng: random.Random, points: int) -> list[dict]:
    ks = sorted({1, 10, 100, min(n_labels, 1000)})
    full = [
        dict(documents=n, chars=c, k=k, beam=b, explain=e, reweight=r, optimize=o)
        for n, c, k, b, e, r, o in itertools.product(
            DOCUMENTS, CHARACTERS, ks, BEAMS, (False, True), (False, True), (False, True)
        )
        if not (r and o) and not (o and n == 1) and n * c <= 2_000_000  # XTAG_MAX_BODY_BYTES bounds a body
    ]
    rng.shuffle(full)
    return full[:points]


def rough_ms(point: dict, levels: int) -> float:
    """A prior guess, only to skip points that would take too long to measure."""
    explained = point["documents"] * point["k"] * levels if point["explain"] else 0
    beam = point["beam"] or 10
    return 0.05 * explained + 2e-4 * point["documents"] * beam * levels * 8 + 1e-4 * point["documents"] * point["k"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, action="append", required=True)
    ap.add_argument("--texts", type=Path, required=True, help="a corpus whose texts are cut or repeated to size")
    ap.add_argument("--points", type=int, default=60, help="grid points sampled per bundle")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-point-ms", type=float, default=4000.0, help="skip points whose rough guess is over this")
    ap.add_argument("--seed", type=int, default=38)
    ap.add_argument("--result-name", default="request_cost")
    args = ap.parse_args()
    corpus = load_corpus(args.texts, "auto", need_labels=False).texts[:300]
    rows = []
    for path in args.bundle:
        model = ServedModel(load_bundle(path))
        model.explained(corpus[:2], model.predict(corpus[:2], 10, None, None), None)  # build the term table once
        shape = tree_shape(model.bundle.predictor)
        levels = len(shape)
        per_label = label_bytes(model.names)
        rng = random.Random(args.seed)
        for point in grid(model.n_labels, rng, args.points):
            if rough_ms(point, levels) > args.max_point_ms:
                continue
            texts = sized(corpus, point["documents"], point["chars"])
            ms, size = measure(model, texts, point, args.repeats)
            work = Work(
                documents=len(texts),
                characters=sum(map(len, texts)),
                k=point["k"],
                beam=point["beam"] or model.default_beam,
                level_nodes=shape,
                explain=point["explain"],
                reweight=point["reweight"],
                optimize=point["optimize"],
            )
            rows.append(
                {
                    "bundle": path.name,
                    **point,
                    "levels": levels,
                    "label_bytes": per_label,
                    "cpu_ms": ms,
                    "bytes": size,
                    "work": work,
                }
            )
            print(f"{path.name} {point} {ms:.1f} ms {size} B", flush=True)
    X = np.array([r["work"].features() for r in rows])
    y = np.array([r["cpu_ms"] for r in rows])
    floor = 0.5  # below half a millisecond the clock's resolution dominates: weigh such points as 0.5 ms
    w = 1.0 / np.maximum(y, floor)
    coef, _ = nnls(X * w[:, None], y * w)
    estimate = X @ coef
    ratio = np.maximum(estimate, floor) / np.maximum(y, floor)
    # explained bytes: what explanations add beyond the plain label objects, per explained label (+ per level)
    ex = [r for r in rows if r["explain"]]
    labels = np.array([r["documents"] * r["k"] for r in ex], dtype=np.float64)
    A = np.stack([labels, labels * np.array([r["levels"] for r in ex])], axis=1)
    extra = np.array([r["bytes"] - r["documents"] * r["k"] * r["label_bytes"] for r in ex], dtype=np.float64)
    bw = 1.0 / np.maximum(labels, 1)
    byte_coef, _ = nnls(A * bw[:, None], extra * bw)
    print("\nCOEFFICIENTS = (" + ", ".join(f"{c:.4g}" for c in coef) + ")")
    print(f"EXPLAINED_BYTES = ({byte_coef[0]:.0f}, {byte_coef[1]:.0f})")
    print(f"estimate / measured CPU over {len(rows)} points: min {ratio.min():.2f}, max {ratio.max():.2f}")
    heavy = y >= 50
    if heavy.any():
        print(f"  points of >= 50 ms ({heavy.sum()}): min {ratio[heavy].min():.2f}, max {ratio[heavy].max():.2f}")
    for r, e, q in zip(rows, estimate, ratio):
        r["estimate_ms"], r["ratio"] = float(e), float(q)
        r["work"] = list(r["work"].features())
    save_result(
        args.result_name,
        {
            "features": FEATURES,
            "coefficients": coef.tolist(),
            "explained_bytes": byte_coef.tolist(),
            "ratio": {"min": float(ratio.min()), "max": float(ratio.max())},
            "ratio_50ms_up": {"min": float(ratio[heavy].min()), "max": float(ratio[heavy].max())}
            if heavy.any()
            else None,
            "points": rows,
        },
    )


if __name__ == "__main__":
    main()
