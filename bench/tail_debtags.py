"""Tail-label quality on debtags (test split): reweighting trade-off, batch-level BCA / Frank-Wolfe, calibration.

Usage (from the repository root; runs once, a few minutes on 2 cores, most of it training):
    .venv/bin/python bench/tail_debtags.py [--data ../shared/data/debtags] [--out bench/out/tail_debtags]

Model A ("calibrated"): XR-Linear with the hyperparameters of bundles/debtags-xl (defaults if absent), trained on
TRAIN minus a seeded 10 % validation split, calibrated (isotonic) on that split; test is only ever predicted.
Model B ("full"): bundles/debtags-xl itself (trained on all of TRAIN) when it loads, evaluated with its raw scores:
it cannot be calibrated honestly (every training document was seen in training).

Writes results.json, results.md, tradeoff.png and buckets.png into --out.
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import numpy as np

from models.bundle import Bundle, load_bundle
from models.calibration import expected_calibration_error, scored_pairs
from models.errors import XtagError
from models.inference import Predictions
from models.macro_inference import OptimizeConfig, optimize
from models.metrics import bucket_metrics, evaluate, frequency_buckets, relevance
from models.reweighting import SCHEMES, candidate_budget, gains_for, label_weights, rerank
from training.calibrate import fit_bundle_calibration, write_calibration
from training.config import TrainConfig
from training.data import load_corpus
from training.evaluate import predict_corpus
from training.export import export_run
from training.report import plot_buckets, plot_tradeoff
from training.run import train_run

K = 5
RW_ALPHAS = tuple(round(a, 2) for a in np.arange(0.0, 1.0001, 0.05))
OPT_ALPHAS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
LIFT, MAX_DROP = 0.30, 1.0  # must-show: macro-recall@5 +30 % relative with P@5 down at most 1 point


def split_train(train: Path, out: Path, fraction: float, seed: int) -> tuple[Path, Path]:
    """Seeded split of the TRAIN file's lines into fit / validation files (written once)."""
    fit, val = out / "fit.jsonl.gz", out / "val.jsonl.gz"
    if not (fit.exists() and val.exists()):
        with gzip.open(train, "rt", encoding="utf-8") as fh:
            lines = fh.readlines()
        is_val = np.random.default_rng(seed).random(len(lines)) < fraction
        for path, keep in ((fit, ~is_val), (val, is_val)):
            with gzip.open(path, "wt", encoding="utf-8") as fh:
                fh.writelines(line for line, k in zip(lines, keep) if k)
    return fit, val


def calibrated_bundle(fit: Path, val: Path, out: Path, reference: Path) -> tuple[Bundle, dict]:
    """Train (or reuse) model A on the fit split and calibrate it on the validation split."""
    folder, info = out / "bundle", {}
    try:
        load_bundle(folder)
        info["trained"] = "reused"
    except XtagError:
        base = {}
        if (reference / "manifest.json").exists():
            base = json.loads((reference / "manifest.json").read_text())["training"]["config"]
        config = TrainConfig.model_validate({**base, "corpus": str(fit)})
        start = time.perf_counter()
        train_run(config, out / "run", resume=(out / "run").exists(), progress=False)
        export_run(out / "run", folder, "debtags-xl-fit90", overwrite=True)
        info["trained"] = f"{time.perf_counter() - start:.0f} s"
    bundle = load_bundle(folder)
    start = time.perf_counter()
    cal = fit_bundle_calibration(bundle, load_corpus(val), progress=False)
    write_calibration(folder, cal)
    info["calibration_seconds"] = round(time.perf_counter() - start, 1)
    info["calibration"] = cal.fitted_on
    return load_bundle(folder), info


def point(labels: np.ndarray, Y) -> dict[str, float]:
    m = evaluate(labels[:, :K], Y, (K,))
    return {f"P@{K}": m[f"P@{K}"], f"macro-R@{K}": m[f"macro-R@{K}"], f"macro-F1@{K}": m[f"macro-F1@{K}"]}


def study(bundle: Bundle, test, calibrated: bool) -> dict:
    """Plain, reweighting table, BCA / FW sweeps (η = calibrated scores when `calibrated`) on the test split."""
    p = bundle.predictor
    vocab, L = p.vocab, p.n_labels
    Y, _ = test.label_matrix(vocab)
    beam = p.model.config.beam_size
    t0 = time.perf_counter()
    plain = predict_corpus(bundle, test.texts, K, None, False, calibrated=calibrated)
    k_cand, wide = candidate_budget(K, beam, L)
    t1 = time.perf_counter()
    cand = predict_corpus(bundle, test.texts, k_cand, wide, False, calibrated=calibrated)
    t2 = time.perf_counter()
    out: dict = {"documents": len(test), "candidates": k_cand, "candidate_beam": wide, "eta": "calibrated" if calibrated else "raw",
                 "predict_seconds": round(t1 - t0, 2), "candidate_predict_seconds": round(t2 - t1, 2)}
    base = out["plain"] = point(plain.labels, Y)
    table = out["reweighting"] = {}
    for scheme in SCHEMES:
        w = label_weights(vocab.frequency_array, vocab.n_train_docs, scheme)
        table[scheme] = [{"alpha": a, **(base if a == 0 else point(rerank(cand, gains_for(w, a), K)[0].labels, Y))}
                         for a in RW_ALPHAS]
    out["smallest_alpha"] = {}
    for scheme, rows in table.items():
        ok = [r for r in rows if r[f"macro-R@{K}"] >= (1 + LIFT) * base[f"macro-R@{K}"]
              and r[f"P@{K}"] >= base[f"P@{K}"] - MAX_DROP]
        out["smallest_alpha"][scheme] = ok[0] if ok else None
    for method in ("bca", "fw"):
        runs = out[method] = []
        for a in OPT_ALPHAS:
            res = optimize(cand.labels, cand.scores, K, L, OptimizeConfig(metric="macro-f1", alpha=a, method=method))
            runs.append({"alpha": a, **point(res.labels, Y), "seconds": round(res.seconds, 2), "steps": res.steps,
                         "stopped": res.stopped})
            if method == "bca" and a == OPT_ALPHAS[-1]:
                out["buckets_plain"] = bucket_metrics(plain.labels, Y, K, frequency_buckets(vocab.frequency_array))
                out["buckets_bca"] = bucket_metrics(res.labels, Y, K, frequency_buckets(vocab.frequency_array))
    out["comparison"] = compare(out)
    out["_curves"] = {**{f"reweight {s}": rows for s, rows in table.items()},
                      "BCA macro-F1": [{"alpha": 0.0, **base}] + out["bca"],
                      "FW macro-F1": [{"alpha": 0.0, **base}] + out["fw"]}
    return out


def compare(res: dict) -> dict:
    """BCA vs the best per-document reweighting (any scheme, any alpha) at equal or better P@5."""
    rw = [{"scheme": s, **r} for s, rows in res["reweighting"].items() for r in rows]
    rows = []
    for b in res["bca"]:
        rivals = [r for r in rw if r[f"P@{K}"] >= b[f"P@{K}"]]
        best = max(rivals, key=lambda r: r[f"macro-F1@{K}"]) if rivals else None
        rows.append({"bca": b, "best_reweighting": best,
                     "gain": b[f"macro-F1@{K}"] - best[f"macro-F1@{K}"] if best else None})
    base = res["plain"][f"P@{K}"]
    within = [r for r in rows if r["bca"][f"P@{K}"] >= base - MAX_DROP]
    head = max(within, key=lambda r: r["bca"][f"macro-F1@{K}"]) if within else None
    return {"per_alpha": rows, "headline_within_1pt": head}


def ece_study(bundle: Bundle, test) -> dict:
    """ECE on the test split of raw vs calibrated scores, over top-5 predictions and over the widened candidates."""
    p = bundle.predictor
    Y, _ = test.label_matrix(p.vocab)
    k_cand, wide = candidate_budget(K, p.model.config.beam_size, p.n_labels)
    out = {}
    for name, k, beam in ((f"top-{K}", K, None), (f"candidates ({k_cand}, beam {wide})", k_cand, wide)):
        raw = predict_corpus(bundle, test.texts, k, beam, False, calibrated=False)
        hits = relevance(raw.labels, Y)
        s, r = scored_pairs(raw.labels, raw.scores, hits)
        out[name] = {"pairs": int(s.size), "positive_rate": float(r.mean()),
                     "ece_raw": expected_calibration_error(s, r),
                     "ece_calibrated": expected_calibration_error(p.calibration.apply(s), r)}
    return out


def markdown(results: dict) -> str:
    lines = ["# Tail-label quality on debtags (test split)", ""]
    c = results["calibrated"]["setup"]
    lines += [f"Model A: XR-Linear trained on TRAIN minus a {c['val_fraction']:.0%} validation split "
              f"(training {c['trained']}), isotonic calibration fitted on that split "
              f"({c['calibration']['pairs']} candidate pairs of {c['calibration']['documents']} documents).", ""]
    lines += ["## Calibration (test split, ECE %, 15 bins)", "", "| pairs | count | positive rate | raw | calibrated |",
              "|---|---:|---:|---:|---:|"]
    for name, e in results["calibrated"]["ece"].items():
        lines.append(f"| {name} | {e['pairs']} | {e['positive_rate']:.3f} | {e['ece_raw']:.2f} | {e['ece_calibrated']:.2f} |")
    for key, res in results.items():
        if key == "calibrated":
            res = res["study"]
        title = {"calibrated": "Model A, η = calibrated scores", "full": "Model B (bundles/debtags-xl), η = raw scores"}[key]
        b = res["plain"]
        lines += ["", f"## {title}", "",
                  f"Plain top-{K}: P@5 {b['P@5']:.2f}, macro-R@5 {b['macro-R@5']:.2f}, macro-F1@5 {b['macro-F1@5']:.2f} "
                  f"({res['documents']} documents; candidates: top {res['candidates']}, beam {res['candidate_beam']}).", "",
                  "Reweighting (per document):", "", "| alpha | " + " | ".join(
                      f"{s} P@5 | {s} mR@5 | {s} mF1@5" for s in SCHEMES) + " |",
                  "|---:|" + "---:|" * (3 * len(SCHEMES))]
        for i, a in enumerate(RW_ALPHAS):
            cells = [f"{res['reweighting'][s][i][m]:.2f}" for s in SCHEMES for m in ("P@5", "macro-R@5", "macro-F1@5")]
            lines.append(f"| {a:g} | " + " | ".join(cells) + " |")
        lines += ["", f"Smallest alpha with macro-R@5 ≥ +{LIFT:.0%} relative and P@5 drop ≤ {MAX_DROP:g} point:", ""]
        for s, r in res["smallest_alpha"].items():
            lines.append(f"- {s}: " + (f"alpha {r['alpha']:g}: P@5 {r['P@5']:.2f} ({r['P@5'] - b['P@5']:+.2f}), "
                                         f"macro-R@5 {r['macro-R@5']:.2f} ({100 * (r['macro-R@5'] / b['macro-R@5'] - 1):+.1f} %)"
                                         if r else "none in the grid"))
        lines += ["", "Batch-level macro-F1@5 optimisation on the whole test set (wall time of the optimisation only):", "",
                  "| alpha | BCA P@5 | BCA mF1@5 | BCA mR@5 | BCA s | best reweighting at ≥ P@5 | its mF1@5 | FW P@5 | FW mF1@5 | FW s |",
                  "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
        for row, fw in zip(res["comparison"]["per_alpha"], res["fw"]):
            bca, best = row["bca"], row["best_reweighting"]
            rival = f"{best['scheme']} α={best['alpha']:g}" if best else "none"
            lines.append(f"| {bca['alpha']:g} | {bca['P@5']:.2f} | {bca['macro-F1@5']:.2f} | {bca['macro-R@5']:.2f} | "
                         f"{bca['seconds']:.2f} | {rival} | {best['macro-F1@5'] if best else float('nan'):.2f} | "
                         f"{fw['P@5']:.2f} | {fw['macro-F1@5']:.2f} | {fw['seconds']:.2f} |")
        h = res["comparison"]["headline_within_1pt"]
        if h:
            lines += ["", f"Headline: BCA alpha {h['bca']['alpha']:g}: macro-F1@5 {h['bca']['macro-F1@5']:.2f} at P@5 "
                          f"{h['bca']['P@5']:.2f} in {h['bca']['seconds']:.2f} s, vs best reweighting at ≥ that P@5 "
                          f"({h['best_reweighting']['scheme']} α={h['best_reweighting']['alpha']:g}) macro-F1@5 "
                          f"{h['best_reweighting']['macro-F1@5']:.2f}: {h['gain']:+.2f} points."
                      if h["best_reweighting"] else "", ""]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/data/debtags"))
    ap.add_argument("--out", type=Path, default=Path("bench/out/tail_debtags"))
    ap.add_argument("--full-bundle", type=Path, default=Path("bundles/debtags-xl"))
    ap.add_argument("--val-fraction", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    test = load_corpus(args.data / "test.jsonl.gz")
    fit, val = split_train(args.data / "train.jsonl.gz", args.out, args.val_fraction, args.seed)
    bundle, setup = calibrated_bundle(fit, val, args.out, args.full_bundle)
    setup["val_fraction"] = args.val_fraction
    results: dict = {"calibrated": {"setup": setup, "ece": ece_study(bundle, test), "study": study(bundle, test, True)}}
    try:
        full = load_bundle(args.full_bundle)
        results["full"] = study(full, test, False)
    except XtagError as exc:
        print(f"skipping {args.full_bundle}: {exc}")
    a = results["calibrated"]["study"]
    plot_tradeoff(args.out / "tradeoff.png", a.pop("_curves"), K,
                  "debtags test, model A (calibrated η): reweighting vs batch-level BCA / FW, alpha 0 → 1")
    plot_buckets(args.out / "buckets.png", a["buckets_plain"], K, a["buckets_bca"])
    if "full" in results:
        plot_tradeoff(args.out / "tradeoff_full.png", results["full"].pop("_curves"), K,
                      "debtags test, bundles/debtags-xl (raw η): reweighting vs batch-level BCA / FW, alpha 0 → 1")
    (args.out / "results.json").write_text(json.dumps(results, indent=1, default=float))
    md = markdown(results)
    (args.out / "results.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
