"""Fit service/http/cost.py's request cost model, per serving-cost profile, to measured CPU time and memory, and
bound it from above.

For each bundle, a seeded sample of a grid of requests (documents × characters per text (up to 99,000) × k × beam
× explain × reweight × optimize × Annif's answer) runs through the service's own code path in-process, one at a
time: ServedModel.predict (reweighted when asked) or predict_optimized, then the response's label lists
(service/http/response_json.py), the explained ones or Annif's dicts, serialised by orjson as the handler does.
The issue-47 requests are always measured, and so are six ordinary ones the defaults must admit: 10 texts of 99,000 characters at k = the label count, beam 512,
explained, and 256 texts of 3,900 characters reweighted at k 400. Each point's CPU time is the smallest of
--repeats runs of time.process_time (the process's CPU, every thread's: the engine's and onnxruntime's threads
count too); its memory is the peak RSS above the RSS before it (VmHWM, reset through /proc/self/clear_refs, after
a gc and malloc_trim). Points whose rough guess is over --max-point-ms are skipped, so the run stays bounded.

Then, per profile (Predictor.cost_hint: linear, encoder, lamp), the coefficients of cost.py's FEATURES are fitted
by non-negative least squares on relative error, and raised by one factor until every point of --floor-ms or more
is estimated at no less than half its CPU; the memory coefficients likewise, until every point of 5 MB or more is
estimated at no less than its memory. The response bytes per explained label are fitted per profile too. The
tables and every point's estimate against its measurement are saved (bench/results/request_cost.json); paste the
printed COEFFICIENTS, MEMORY and EXPLAINED_BYTES into service/http/cost.py. --refit fits a saved result's points
again without measuring (its provenance then lists both commands, and when the points were measured).

    .venv/bin/python -m bench.request_cost --bundle bundles/debtags-xl --bundle bundles/debtags-xrt \\
        --bundle bundles/debtags-lamp --texts data/debtags/test.jsonl.gz --points 30
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import itertools
import json
import random
import time
from functools import partial
from pathlib import Path

import numpy as np
import orjson
from scipy.optimize import nnls
from xtag.config.settings import Limits
from xtag.corpus.files import load_corpus
from xtag.models.bundle.loader import load_bundle
from xtag.models.inference.macro_optimal import predict_optimized, serving_config
from xtag.models.inference.reweighting import gains_of
from xtag.service.http.cost import FEATURES, Work, label_bytes, tree_shape
from xtag.service.http.response_json import label_lists
from xtag.service.state.model_slot import ServedModel

from bench.helpers.results import RESULTS_DIR, command_line, save_result

DOCUMENTS = (1, 8, 64, 256)
CHARACTERS = (200, 2000, 20000, 99000)
BEAMS = (None, 64, 512)
BODY_BYTES = 1_000_000  # the issue's goal: no request under 1 MB buys more than 2 s of CPU or 100 MB
MEMORY_FLOOR_MB = 5.0  # below this, a point's peak is the allocator's noise


def sized(joined: str, n: int, chars: int) -> list[str]:
    """n texts of `chars` characters each: windows of the joined corpus at spread offsets, so that a long text
    holds as many distinct words as a real one (a short text repeated would hold a few, and explain cheaply)."""
    doubled = joined * (chars // len(joined) + 2)
    return [doubled[(i * 104_729) % len(joined) :][:chars] for i in range(n)]


def run_once(model: ServedModel, texts: list[str], point: dict) -> int:
    """What the handler does for this request after admission; returns the response bytes."""
    k, beam = point["k"], point["beam"]
    if point["optimize"]:
        config = serving_config("macro-f1", 1.0, "bca")
        run = partial(predict_optimized, model.bundle.predictor, k=k, beam_size=beam or model.default_beam)
        preds, gains = run(texts, n_labels=model.n_labels, config=config), None
    else:
        a = model.gains("psp", 0.5, None) if point["reweight"] else None
        preds = model.predict(texts, k, beam, a)
        gains = None if a is None else gains_of(preds, a)
    if point["annif"]:  # routes/annif.py's dicts
        rows = [
            [{"uri": model.names[j], "label": model.names[j], "notation": None, "score": v} for j, v in zip(i, sc)]
            for i, sc in zip(preds.labels.tolist(), preds.scores.tolist())
        ]
    elif point["explain"]:
        rows = model.explained(texts, preds, None, gains=gains)
    else:
        rows = label_lists(model.label_prefixes, preds, None, gains)
    return len(orjson.dumps({"results": [{"id": str(i), "labels": r} for i, r in enumerate(rows)]}))


def status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def release() -> None:
    """Memory freed by the last point back to the OS, so that the next point's peak is its own."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc
        pass


def measure(model: ServedModel, texts: list[str], point: dict, repeats: int) -> tuple[float, float, int]:
    """(CPU ms: the least of `repeats`, peak MB above the RSS before: the first run's, response bytes)."""
    best, size, peak_mb = float("inf"), 0, 0.0
    for i in range(repeats):
        release()
        if i == 0:
            Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
            before = status_kb("VmRSS")
        t0 = time.process_time()
        size = run_once(model, texts, point)
        best = min(best, time.process_time() - t0)
        if i == 0:
            peak_mb = (status_kb("VmHWM") - before) / 1024
    return best * 1e3, peak_mb, size


def grid(n_labels: int, rng: random.Random, points: int) -> list[dict]:
    ks = sorted({1, 10, 100, min(n_labels, 400), min(n_labels, 1000)})
    full = [
        dict(documents=n, chars=c, k=k, beam=b, explain=e, reweight=r, optimize=o, annif=a)
        for n, c, k, b, e, r, o, a in itertools.product(
            DOCUMENTS, CHARACTERS, ks, BEAMS, (False, True), (False, True), (False, True), (False, True)
        )
        if not (r and o) and not (o and n == 1) and n * c <= BODY_BYTES and not (a and (e or r or o or b))
    ]
    rng.shuffle(full)
    issue = [  # issue 47's two requests, always measured
        dict(
            documents=10, chars=99000, k=n_labels, beam=512, explain=True, reweight=False, optimize=False, annif=False
        ),
        dict(
            documents=256,
            chars=3900,
            k=min(400, n_labels),
            beam=None,
            explain=False,
            reweight=True,
            optimize=False,
            annif=False,
        ),
    ]
    plain = dict(beam=None, explain=False, reweight=False, optimize=False, annif=False)
    ordinary = [  # what the defaults must admit, always measured too
        {**plain, "documents": 256, "chars": 400, "k": 10},
        {**plain, "documents": 256, "chars": 400, "k": 100},
        {**plain, "documents": 1, "chars": 20000, "k": 10, "explain": True},
        {**plain, "documents": 64, "chars": 400, "k": 10, "annif": True},
        {**plain, "documents": 256, "chars": 400, "k": 10, "annif": True},
        {**plain, "documents": 16, "chars": 400, "k": 10, "reweight": True},
    ]
    return issue + ordinary + full[:points]


def rough_ms(point: dict, levels: int, candidates: int = 0) -> float:
    """A prior guess, only to skip points that would take too long to measure (`candidates`: a re-ranker's C)."""
    width = max(candidates, point["k"]) if candidates else 0
    explained = point["documents"] * point["k"] * levels if point["explain"] else 0
    beam = point["beam"] or 10
    return (
        0.05 * explained * (1 + point["chars"] / 20000)
        + 2e-4 * point["documents"] * beam * levels * 8
        + 1e-4 * point["documents"] * point["k"]
        + 2e-3 * point["documents"] * point["chars"] / 100
        + 2e-5 * point["documents"] * width * width * (3 if point["explain"] else 1)
    )


def fit(X: np.ndarray, y: np.ndarray, floor: float, bound: float) -> tuple[np.ndarray, float]:
    """NNLS on relative error (points under `floor` weighed as `floor`), then every coefficient raised by one
    factor until each point of `floor` or more is estimated at no less than `bound` × its measurement."""
    w = 1.0 / np.maximum(y, floor)
    coef, _ = nnls(X * w[:, None], y * w)
    est = X @ coef
    big = y >= floor
    scale = max(1.0, float(np.max(bound * y[big] / np.maximum(est[big], 1e-9)))) if big.any() else 1.0
    return coef * scale, scale


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, action="append", required=True)
    ap.add_argument("--texts", type=Path, required=True, help="a corpus whose texts are cut or repeated to size")
    ap.add_argument("--points", type=int, default=30, help="grid points sampled per bundle (besides the issue's)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-point-ms", type=float, default=4000.0, help="skip points whose rough guess is over this")
    ap.add_argument("--floor-ms", type=float, default=10.0, help="points under this bound nothing (noise)")
    ap.add_argument("--seed", type=int, default=47)
    ap.add_argument("--result-name", default="request_cost")
    ap.add_argument(
        "--refit", action="store_true", help="measure nothing: fit again the points of bench/results/RESULT_NAME.json"
    )
    args = ap.parse_args()
    if args.refit:
        doc = json.loads((RESULTS_DIR / f"{args.result_name}.json").read_text())
        measured = doc["provenance"]
        save_fitted(doc["result"]["points"], args, [measured["command"], command_line()], measured)
        return
    corpus = load_corpus(args.texts, "auto", need_labels=False).texts[:3000]
    joined = " ".join(corpus)
    rows = []
    for path in args.bundle:
        model = ServedModel(load_bundle(path))
        model.explained(corpus[:2], model.predict(corpus[:2], 10, None, None), None)  # build the term table once
        shape, hint = tree_shape(model.bundle.predictor), model.cost_hint
        per_label = label_bytes(model.names)
        rng = random.Random(args.seed)
        for j, point in enumerate(grid(model.n_labels, rng, args.points)):
            if j >= 2 and rough_ms(point, len(shape), hint.candidates) > args.max_point_ms:  # the issue's two: always
                continue
            texts = sized(joined, point["documents"], point["chars"])
            ms, mb, size = measure(model, texts, point, 1 if j < 2 else args.repeats)
            work = Work(
                documents=len(texts),
                characters=sum(map(len, texts)),
                k=point["k"],
                beam=point["beam"] or model.default_beam,
                level_nodes=shape,
                explain=point["explain"],
                reweight=point["reweight"],
                optimize=point["optimize"],
                hint=hint,
                annif=point["annif"],
            )
            rows.append(
                {
                    "bundle": path.name,
                    "family": hint.family,
                    "issue": j < 2,
                    **point,
                    "levels": len(shape),
                    "label_bytes": per_label,
                    "cpu_ms": ms,
                    "memory_mb": mb,
                    "bytes": size,
                    "work": work,
                }
            )
            print(f"{path.name} {point} {ms:.1f} ms {mb:.1f} MB {size} B", flush=True)
    save_fitted(rows, args)


def save_fitted(rows: list[dict], args, command: list[str] | None = None, measured: dict | None = None) -> None:
    """Each profile's fit over `rows` (their "work": a Work, or its features as saved), printed and saved."""
    tables: dict[str, dict] = {}
    defaults = Limits()
    limits = {
        "cost": defaults.max_request_cost,
        "memory_mb": defaults.max_request_memory_mb,
        "bytes": defaults.max_response_bytes,
    }  # the defaults: which measured requests they admit, with the fitted estimates
    for family in sorted({r["family"] for r in rows}):
        mine = [r for r in rows if r["family"] == family]
        X = np.array([features_of(r["work"]) for r in mine], dtype=np.float64)
        y = np.array([r["cpu_ms"] for r in mine])
        mem = np.array([r["memory_mb"] for r in mine])
        coef, scale = fit(X, y, args.floor_ms, 0.5)
        mcoef, mscale = fit(X, mem, MEMORY_FLOOR_MB, 1.0)
        # explained bytes: what explanations add beyond the plain label objects, per explained label (+ per level)
        ex = [r for r in mine if r["explain"]]
        labels = np.array([r["documents"] * r["k"] for r in ex], dtype=np.float64)
        A = np.stack([labels, labels * np.array([r["levels"] for r in ex])], axis=1)
        extra = np.array([r["bytes"] - r["documents"] * r["k"] * r["label_bytes"] for r in ex], dtype=np.float64)
        byte_coef, _ = nnls(A * (1.0 / np.maximum(labels, 1))[:, None], extra / np.maximum(labels, 1))
        byte_scale = max(1.0, float(np.max(extra / np.maximum(A @ byte_coef, 1e-9)))) if len(ex) else 1.0
        byte_coef = np.ceil(byte_coef * byte_scale)  # raised until no measured answer is larger than its estimate
        big = y >= args.floor_ms
        under = y[big] / np.maximum(X[big] @ coef, 1e-9)  # measured / estimate: at most 2 by construction
        tables[family] = {
            "coefficients": coef.tolist(),
            "memory": mcoef.tolist(),
            "explained_bytes": [round(float(b)) for b in byte_coef],
            "cpu_raised_by": scale,
            "memory_raised_by": mscale,
            "worst_measured_over_estimate": float(under.max()) if big.any() else None,
        }
        for r, e, m in zip(mine, X @ coef, X @ mcoef):
            r["estimate_ms"], r["estimate_mb"] = float(e), float(m)
            r["admitted"] = e <= limits["cost"] and m <= limits["memory_mb"] and r["bytes"] <= limits["bytes"]
            r["work"] = [float(f) for f in features_of(r["work"])]
        print(f"{family}: measured / estimate CPU at most {tables[family]['worst_measured_over_estimate']}")

    def fmt(key: str) -> str:
        lines = "".join(f'    "{f}": (' + ", ".join(f"{c:.4g}" for c in t[key]) + "),\n" for f, t in tables.items())
        return "{\n" + lines + "}"

    print("\nCOEFFICIENTS = " + fmt("coefficients"))
    print("MEMORY = " + fmt("memory"))
    print("EXPLAINED_BYTES = {" + ", ".join(f'"{f}": {tuple(t["explained_bytes"])}' for f, t in tables.items()) + "}")
    payload = {"features": FEATURES, "profiles": tables, "floor_ms": args.floor_ms, "limits": limits, "points": rows}
    if measured is not None:  # a refit: when and under what load the points were measured
        payload["measured"] = {"date": measured["date"], "load_average": measured["load_average"]}
    save_result(args.result_name, payload, command=command)


def features_of(work) -> list[float]:
    return list(work.features()) if isinstance(work, Work) else list(work)


if __name__ == "__main__":
    main()
