"""Tail-label quality on debtags (test split): reweighting trade-off, batch-level BCA / Frank-Wolfe, calibration.

Usage (from the repository root; runs once, a few minutes on 2 cores, most of it training):
    .venv/bin/python -m bench.tail_debtags [--data ../shared/data/debtags] [--out bench/out/tail_debtags]

Model A ("calibrated"): XR-Linear with the hyperparameters of bundles/debtags-xl (defaults if absent), trained on
TRAIN minus a seeded 10 % validation split, calibrated (isotonic) on that split; test is only ever predicted.
Model B ("full"): bundles/debtags-xl itself (trained on all of TRAIN) when it loads, evaluated with its raw scores:
it cannot be calibrated honestly (every training document was seen in training).

With --transformer-run RUN (a finished XR-Transformer run, e.g. bench/out/xr_transformer/finetuned-150-run) and
--full-bundle its bundle, model A is that run's fine-tuned encoder with TF-IDF and Φ_cat rankers refitted on the
fit split (the encoder's cached embeddings of the training texts, checkpoints/xr/emb_<depth>.npy), calibrated on
the validation split. Deviation, stated in the results: the encoder itself was fine-tuned on all of TRAIN (up to
steps × batch texts per level), so some validation texts were seen by the encoder, though not by the rankers.

Metrics follow the XMC convention (models/metrics.py; xtag.evaluation.evaluate.ground_truth): test labels unseen in
training stay in the ground truth as misses, and macro-P/R/F1@5 average over the labels of the test split.

Writes results.json, results.md, tradeoff.png and buckets.png into --out, and the figures to
bench/results/<--result-name>.json (default: the name of --out).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import time
from pathlib import Path

import numpy as np
from xtag.corpus.files import load_corpus
from xtag.evaluation.calibrate import fit_bundle_calibration, write_calibration
from xtag.evaluation.evaluate import GroundTruth, ground_truth
from xtag.evaluation.report import plot_buckets, plot_tradeoff
from xtag.models.bundle.loader import Bundle, load_bundle
from xtag.models.errors import XtagError
from xtag.models.inference.calibration import expected_calibration_error, scored_pairs
from xtag.models.inference.macro_optimal import OptimizeConfig, optimize
from xtag.models.inference.reweighting import SCHEMES, candidate_budget, gains_for, label_weights, rerank
from xtag.models.metrics import CONVENTIONS, bucket_metrics, evaluate, frequency_buckets, relevance
from xtag.models.tagging.batches import predict_corpus
from xtag.training.config import TrainConfig
from xtag.training.export.export_run import export_run
from xtag.training.run import save_model, train_run

from bench.helpers.results import save_result
from bench.helpers.transformer import CachedEncoder

K = 5
RW_ALPHAS = tuple(round(a, 2) for a in np.arange(0.0, 1.0001, 0.05))
OPT_ALPHAS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
LIFT, MAX_DROP = 0.30, 1.0  # must-show: macro-recall@5 +30 % relative with P@5 down at most 1 point


def validation_mask(n: int, fraction: float, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random(n) < fraction


def split_train(train: Path, out: Path, fraction: float, seed: int) -> tuple[Path, Path]:
    """Seeded split of the TRAIN file's lines into fit / validation files (written once)."""
    fit, val = out / "fit.jsonl.gz", out / "val.jsonl.gz"
    if not (fit.exists() and val.exists()):
        with gzip.open(train, "rt", encoding="utf-8") as fh:
            lines = fh.readlines()
        is_val = validation_mask(len(lines), fraction, seed)
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


def transformer_model_a(
    train: Path, fit: Path, val: Path, out: Path, source_run: Path, fraction: float, seed: int, encoder: CachedEncoder
) -> tuple[Bundle, dict]:
    """Model A for an XR-Transformer run: its fine-tuned encoder, TF-IDF and Φ_cat rankers refitted on the fit
    split, exported as a bundle and calibrated on the validation split (see the module docstring's caveat)."""
    from xtag.corpus.files import build_vocab
    from xtag.models.features.tfidf import TfidfFeaturizer
    from xtag.models.xlinear.model import XLinearModel
    from xtag.models.xr_transformer.concat_features import concat_features
    from xtag.training.deep.encoder import load_tokenizer, load_trained
    from xtag.training.deep.result import SAMPLE_TEXTS
    from xtag.training.xlinear.train import train_xlinear
    from xtag.training.xr_transformer.train import XRTransformerResult

    folder, run, info = out / "bundle", out / "run", {"encoder_from": str(source_run)}
    try:
        load_bundle(folder)
        info["trained"] = "reused"
    except XtagError:
        start = time.perf_counter()
        config = TrainConfig.load(source_run / "config.json").model_copy(update={"corpus": fit})
        depth = max(int(p.stem.split("_")[1]) for p in (source_run / "checkpoints" / "xr").glob("emb_*.npy"))
        E_all = np.load(source_run / "checkpoints" / "xr" / f"emb_{depth}.npy")
        with gzip.open(train, "rt", encoding="utf-8") as fh:
            n_train = sum(1 for _ in fh)
        if E_all.shape[0] != n_train:
            raise XtagError(f"{source_run}: {E_all.shape[0]} cached embeddings for {n_train} training texts") from None
        corpus = load_corpus(fit)
        vocab = build_vocab(corpus)
        featurizer, X = TfidfFeaturizer.fit(corpus.texts, config.tfidf)
        Y, _ = corpus.label_matrix(vocab)
        E = E_all[~validation_mask(n_train, fraction, seed)]
        model = train_xlinear(concat_features(X, E), Y, config.xlinear, progress=False)
        model = XLinearModel(model.chain, model.levels, model.config.model_copy(update={"dense_features": E.shape[1]}))
        torch_encoder, enc_config = load_trained(source_run / "model" / "encoder")
        tokenizer = load_tokenizer(source_run / "model" / "encoder", enc_config.max_length)
        result = XRTransformerResult(model, torch_encoder, tokenizer, enc_config, corpus.texts[:SAMPLE_TEXTS])
        shutil.rmtree(run, ignore_errors=True)
        run.mkdir(parents=True)
        config.save(run / "config.json")
        save_model(run, vocab, featurizer, result)
        export_run(run, folder, "debtags-xrt-fit90", overwrite=True)
        info["trained"] = f"{time.perf_counter() - start:.0f} s (rankers and export; encoder reused)"
    bundle = load_bundle(folder)
    bundle.predictor.featurizer.encoder = encoder
    start = time.perf_counter()
    cal = fit_bundle_calibration(bundle, load_corpus(val), progress=False)
    write_calibration(folder, cal)
    info["calibration_seconds"] = round(time.perf_counter() - start, 1)
    info["calibration"] = cal.fitted_on
    bundle = load_bundle(folder)
    bundle.predictor.featurizer.encoder = encoder
    return bundle, info


def point(labels: np.ndarray, truth: GroundTruth) -> dict[str, float]:
    m = evaluate(labels[:, :K], truth.Y, (K,), convention=truth.convention)
    return {f"P@{K}": m[f"P@{K}"], f"macro-R@{K}": m[f"macro-R@{K}"], f"macro-F1@{K}": m[f"macro-F1@{K}"]}


def study(bundle: Bundle, test, calibrated: bool) -> dict:
    """Plain, reweighting table, BCA / FW sweeps (η = calibrated scores when `calibrated`) on the test split."""
    p = bundle.predictor
    vocab, L = p.vocab, p.n_labels
    truth = ground_truth(test, vocab)
    Y, buckets = truth.Y, frequency_buckets(truth.frequencies)  # unseen test labels: frequency 0, tail
    beam = p.model.config.beam_size
    t0 = time.perf_counter()
    plain = predict_corpus(bundle, test.texts, K, None, False, calibrated=calibrated)
    k_cand, wide = candidate_budget(K, beam, L)
    t1 = time.perf_counter()
    cand = predict_corpus(bundle, test.texts, k_cand, wide, False, calibrated=calibrated)
    t2 = time.perf_counter()
    out: dict = {
        "documents": len(test),
        "convention": truth.convention,
        "unseen_test_label_mentions": truth.unseen_mentions,
        "candidates": k_cand,
        "candidate_beam": wide,
        "eta": "calibrated" if calibrated else "raw",
        "predict_seconds": round(t1 - t0, 2),
        "candidate_predict_seconds": round(t2 - t1, 2),
    }
    base = out["plain"] = point(plain.labels, truth)
    table = out["reweighting"] = {}
    for scheme in SCHEMES:
        w = label_weights(vocab.frequency_array, vocab.n_train_docs, scheme)
        table[scheme] = [
            {"alpha": a, **(base if a == 0 else point(rerank(cand, gains_for(w, a), K)[0].labels, truth))}
            for a in RW_ALPHAS
        ]
    out["smallest_alpha"] = {}
    for scheme, rows in table.items():
        ok = [
            r
            for r in rows
            if r[f"macro-R@{K}"] >= (1 + LIFT) * base[f"macro-R@{K}"] and r[f"P@{K}"] >= base[f"P@{K}"] - MAX_DROP
        ]
        out["smallest_alpha"][scheme] = ok[0] if ok else None
    for method in ("bca", "fw"):
        runs = out[method] = []
        for a in OPT_ALPHAS:
            res = optimize(cand.labels, cand.scores, K, L, OptimizeConfig(metric="macro-f1", alpha=a, method=method))
            runs.append(
                {
                    "alpha": a,
                    **point(res.labels, truth),
                    "seconds": round(res.seconds, 2),
                    "steps": res.steps,
                    "stopped": res.stopped,
                }
            )
            if method == "bca" and a == OPT_ALPHAS[-1]:
                out["buckets_plain"] = bucket_metrics(plain.labels, Y, K, buckets, truth.convention)
                out["buckets_bca"] = bucket_metrics(res.labels, Y, K, buckets, truth.convention)
    out["comparison"] = compare(out)
    out["_curves"] = {
        **{f"reweight {s}": rows for s, rows in table.items()},
        "BCA macro-F1": [{"alpha": 0.0, **base}] + out["bca"],
        "FW macro-F1": [{"alpha": 0.0, **base}] + out["fw"],
    }
    return out


def compare(res: dict) -> dict:
    """BCA vs the best per-document reweighting (any scheme, any alpha) at equal or better P@5."""
    rw = [{"scheme": s, **r} for s, rows in res["reweighting"].items() for r in rows]
    rows = []
    for b in res["bca"]:
        rivals = [r for r in rw if r[f"P@{K}"] >= b[f"P@{K}"]]
        best = max(rivals, key=lambda r: r[f"macro-F1@{K}"]) if rivals else None
        rows.append(
            {"bca": b, "best_reweighting": best, "gain": b[f"macro-F1@{K}"] - best[f"macro-F1@{K}"] if best else None}
        )
    base = res["plain"][f"P@{K}"]
    within = [r for r in rows if r["bca"][f"P@{K}"] >= base - MAX_DROP]
    head = max(within, key=lambda r: r["bca"][f"macro-F1@{K}"]) if within else None
    return {"per_alpha": rows, "headline_within_1pt": head}


def ece_study(bundle: Bundle, test) -> dict:
    """ECE on the test split of raw vs calibrated scores, over top-5 predictions and over the widened candidates."""
    p = bundle.predictor
    Y = ground_truth(test, p.vocab).Y
    k_cand, wide = candidate_budget(K, p.model.config.beam_size, p.n_labels)
    out = {}
    for name, k, beam in ((f"top-{K}", K, None), (f"candidates ({k_cand}, beam {wide})", k_cand, wide)):
        raw = predict_corpus(bundle, test.texts, k, beam, False, calibrated=False)
        hits = relevance(raw.labels, Y)
        s, r = scored_pairs(raw.labels, raw.scores, hits)
        out[name] = {
            "pairs": int(s.size),
            "positive_rate": float(r.mean()),
            "ece_raw": expected_calibration_error(s, r),
            "ece_calibrated": expected_calibration_error(p.calibration.apply(s), r),
        }
    return out


def markdown(results: dict) -> str:
    lines = ["# Tail-label quality on debtags (test split)", ""]
    c = results["calibrated"]["setup"]
    lines += [
        f"Model A: {c['model_a']} trained on TRAIN minus a {c['val_fraction']:.0%} validation split "
        f"(training {c['trained']}), isotonic calibration fitted on that split "
        f"({c['calibration']['pairs']} candidate pairs of {c['calibration']['documents']} documents).",
        "",
        f"Metrics: {CONVENTIONS[results['convention']]}.",
        "",
    ]
    lines += [
        "## Calibration (test split, ECE %, 15 bins)",
        "",
        "| pairs | count | positive rate | raw | calibrated |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, e in results["calibrated"]["ece"].items():
        lines.append(
            f"| {name} | {e['pairs']} | {e['positive_rate']:.3f} | {e['ece_raw']:.2f} | {e['ece_calibrated']:.2f} |"
        )
    for key, res in results.items():
        if key == "convention":
            continue
        if key == "calibrated":
            res = res["study"]
        title = {"calibrated": "Model A, η = calibrated scores", "full": f"Model B ({c['model_b']}), η = raw scores"}[
            key
        ]
        b = res["plain"]
        lines += [
            "",
            f"## {title}",
            "",
            f"Plain top-{K}: P@5 {b['P@5']:.2f}, macro-R@5 {b['macro-R@5']:.2f}, macro-F1@5 {b['macro-F1@5']:.2f} "
            f"({res['documents']} documents; candidates: top {res['candidates']}, beam {res['candidate_beam']}).",
            "",
            "Reweighting (per document):",
            "",
            "| alpha | " + " | ".join(f"{s} P@5 | {s} mR@5 | {s} mF1@5" for s in SCHEMES) + " |",
            "|---:|" + "---:|" * (3 * len(SCHEMES)),
        ]
        for i, a in enumerate(RW_ALPHAS):
            cells = [f"{res['reweighting'][s][i][m]:.2f}" for s in SCHEMES for m in ("P@5", "macro-R@5", "macro-F1@5")]
            lines.append(f"| {a:g} | " + " | ".join(cells) + " |")
        lines += ["", f"Smallest alpha with macro-R@5 ≥ +{LIFT:.0%} relative and P@5 drop ≤ {MAX_DROP:g} point:", ""]
        for s, r in res["smallest_alpha"].items():
            lines.append(
                f"- {s}: "
                + (
                    f"alpha {r['alpha']:g}: P@5 {r['P@5']:.2f} ({r['P@5'] - b['P@5']:+.2f}), "
                    f"macro-R@5 {r['macro-R@5']:.2f} ({100 * (r['macro-R@5'] / b['macro-R@5'] - 1):+.1f} %)"
                    if r
                    else "none in the grid"
                )
            )
        lines += [
            "",
            "Batch-level macro-F1@5 optimisation on the whole test set (wall time of the optimisation only):",
            "",
            "| alpha | BCA P@5 | BCA mF1@5 | BCA mR@5 | BCA s | best reweighting at ≥ P@5 | its mF1@5 | FW P@5 | FW mF1@5 | FW s |",
            "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
        ]
        for row, fw in zip(res["comparison"]["per_alpha"], res["fw"]):
            bca, best = row["bca"], row["best_reweighting"]
            rival = f"{best['scheme']} α={best['alpha']:g}" if best else "none"
            lines.append(
                f"| {bca['alpha']:g} | {bca['P@5']:.2f} | {bca['macro-F1@5']:.2f} | {bca['macro-R@5']:.2f} | "
                f"{bca['seconds']:.2f} | {rival} | {best['macro-F1@5'] if best else float('nan'):.2f} | "
                f"{fw['P@5']:.2f} | {fw['macro-F1@5']:.2f} | {fw['seconds']:.2f} |"
            )
        h = res["comparison"]["headline_within_1pt"]
        if h:
            lines += [
                "",
                f"Headline: BCA alpha {h['bca']['alpha']:g}: macro-F1@5 {h['bca']['macro-F1@5']:.2f} at P@5 "
                f"{h['bca']['P@5']:.2f} in {h['bca']['seconds']:.2f} s, vs best reweighting at ≥ that P@5 "
                f"({h['best_reweighting']['scheme']} α={h['best_reweighting']['alpha']:g}) macro-F1@5 "
                f"{h['best_reweighting']['macro-F1@5']:.2f}: {h['gain']:+.2f} points."
                if h["best_reweighting"]
                else "",
                "",
            ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/data/debtags"))
    ap.add_argument("--out", type=Path, default=Path("bench/out/tail_debtags"))
    ap.add_argument("--full-bundle", type=Path, default=Path("bundles/debtags-xl"))
    ap.add_argument("--val-fraction", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--transformer-run",
        type=Path,
        default=None,
        help="XR-Transformer run whose fine-tuned encoder model A reuses (--full-bundle: its bundle)",
    )
    ap.add_argument("--result-name", default=None, help="bench/results/<name>.json (default: the name of --out)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    test = load_corpus(args.data / "test.jsonl.gz")
    train = args.data / "train.jsonl.gz"
    fit, val = split_train(train, args.out, args.val_fraction, args.seed)
    encoder = None
    if args.transformer_run is None:
        bundle, setup = calibrated_bundle(fit, val, args.out, args.full_bundle)
        setup["model_a"] = "XR-Linear"
    else:
        encoder = CachedEncoder(load_bundle(args.full_bundle).predictor.featurizer.encoder)
        bundle, setup = transformer_model_a(
            train, fit, val, args.out, args.transformer_run, args.val_fraction, args.seed, encoder
        )
        setup["model_a"] = (
            f"XR-Transformer (encoder of {args.transformer_run.name}, fine-tuned on all of TRAIN; "
            f"TF-IDF and Φ_cat rankers)"
        )
    setup["val_fraction"], setup["model_b"] = args.val_fraction, str(args.full_bundle)
    results: dict = {"calibrated": {"setup": setup, "ece": ece_study(bundle, test), "study": study(bundle, test, True)}}
    results["convention"] = results["calibrated"]["study"]["convention"]
    try:
        full = load_bundle(args.full_bundle)
        if encoder is not None:  # the same encoder weights as model A's: share the embedding cache
            full.predictor.featurizer.encoder = encoder
        results["full"] = study(full, test, False)
    except XtagError as exc:
        print(f"skipping {args.full_bundle}: {exc}")
    a = results["calibrated"]["study"]
    plot_tradeoff(
        args.out / "tradeoff.png",
        a.pop("_curves"),
        K,
        "debtags test, model A (calibrated η): reweighting vs batch-level BCA / FW, alpha 0 → 1",
    )
    plot_buckets(args.out / "buckets.png", a["buckets_plain"], K, a["buckets_bca"])
    if "full" in results:
        plot_tradeoff(
            args.out / "tradeoff_full.png",
            results["full"].pop("_curves"),
            K,
            f"debtags test, {args.full_bundle.name} (raw η): reweighting vs batch-level BCA / FW, alpha 0 → 1",
        )
    (args.out / "results.json").write_text(json.dumps(results, indent=1, default=float))
    save_result(args.result_name or args.out.resolve().name, json.loads((args.out / "results.json").read_text()))
    md = markdown(results)
    (args.out / "results.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
