"""XR-Transformer bundle on debtags: predict-minus-encoder time with the compiled XR-Linear engine vs the numpy beam search.

    .venv/bin/python -m bench.experiments.xr_transformer_engine                         # trains the bundle first if missing
    .venv/bin/python -m bench.experiments.xr_transformer_engine --bundle bench/out/xr_transformer_engine/bundle

Without --bundle, trains a frozen-encoder XR-Transformer (epochs=0, --max-length tokens, defaults otherwise:
tfidf+dense Φ_cat) on debtags' training split through the product path (`train_run` → `export_run`) into
--workdir, reusing what is already there. Then, on the first --texts test texts, one text per request:

- "after": the bundle's `Predictor.predict` as served (TF-IDF, Φ_cat assembly, `XLinearModel.predict` =
  xtag.models.engine.engine_beam_search on the rankers' compiled layout, calibration), the encoder replaced by a
  lookup of its own outputs (bench/xr_transformer_debtags.py's "predict minus encoder": `CachedEncoder`, each
  embedding computed alone, as served);
- "before": the same Predictor, featuriser and cache, with `XLinearModel.predict` as it was before the engine
  (commit f8a3b81): xtag.models.inference.beam_search.beam_search over the same model's levels, tree and first-level index;
- "features": `ConcatFeaturizer.transform` alone (TF-IDF + Φ_cat with the cached embedding), the part both share;
- "onnx": the bare ONNX encoder (`OnnxEncoder.encode` of the one text), timed in a pass of its own afterwards
  so that onnxruntime's spinning threads do not slow the other methods.

The methods take turns in blocks of texts (bench/xr_transformer_debtags.alternating) so that load drift on a
shared machine hits them alike. Also checks that before and after return the same top-k. Writes
bench/results/xr_transformer_engine_debtags.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from xtag.models.bundle.loader import load_bundle
from xtag.models.errors import XtagError
from xtag.models.inference.beam_search import beam_search
from xtag.models.inference.types import Predictions
from xtag.models.xr_transformer.concat_features import ConcatFeaturizer

from bench.helpers.results import save_result
from bench.helpers.timing import percentiles
from bench.helpers.transformer import CachedEncoder, alternating

ROOT = Path(__file__).resolve().parents[2]
RESULT_NAME = "xr_transformer_engine_debtags"


def ensure_bundle(args) -> Path:
    """--workdir/bundle, trained (frozen encoder) and exported first where missing; an unfinished run resumes."""
    from xtag.training.config import TrainConfig
    from xtag.training.export.export_run import export_run
    from xtag.training.run import train_run
    from xtag.training.xr_transformer.config import XRTransformerConfig

    run, bundle = args.workdir / "run", args.workdir / "bundle"
    if (bundle / "manifest.json").exists():
        return bundle
    if not (run / "model").is_dir():
        config = TrainConfig(
            corpus=args.data / "train.jsonl.gz",
            model="xr-transformer",
            xr_transformer=XRTransformerConfig(epochs=0, max_length=args.max_length),
        )
        start = time.perf_counter()
        train_run(config, run, resume=(run / "config.json").exists(), progress=True)
        print(f"trained in {time.perf_counter() - start:.0f} s", flush=True)
    export_run(run, bundle, overwrite=True)
    return bundle


class NumpySearchModel:
    """An XLinearModel's `predict` as it was before the compiled engine: xtag.models.inference.beam_search over its levels."""

    def __init__(self, model):
        self.model, self.config = model, model.config

    @property
    def n_labels(self) -> int:
        return self.model.n_labels

    def predict(self, X, k: int = 10, beam_size: int | None = None) -> Predictions:
        m = self.model
        beam = max(beam_size or m.config.beam_size, 1)
        return beam_search(X, m.levels, m.tree, beam, k, m.config.post_processor, first_level=m.first_level)


def get(d, *keys):
    """d[k1][k2]... or None where a level is missing."""
    for key in keys:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


def first_texts(path: Path, n: int) -> list[str]:
    texts = []
    with gzip.open(path, "rt") as fh:
        for line in fh:
            if len(texts) >= n:
                break
            texts.append(json.loads(line)["text"])
    return texts


def agreement(before: list[Predictions], after: list[Predictions], tolerance: float) -> dict:
    """Per text: same labels in the same order, and finite scores within `tolerance`; the rows that differ."""
    same_labels = np.array([(b.labels == a.labels).all() for b, a in zip(before, after)])
    same_sets = np.array([set(b.labels[0]) == set(a.labels[0]) for b, a in zip(before, after)])
    diffs = []
    for b, a in zip(before, after):
        finite = np.isfinite(b.scores) & np.isfinite(a.scores)
        same_pad = (np.isfinite(b.scores) == np.isfinite(a.scores)).all()
        diffs.append(float(np.abs(b.scores[finite] - a.scores[finite]).max(initial=0.0)) if same_pad else np.inf)
    diffs = np.asarray(diffs)
    # Rows whose order differs only among equal scores (l3-hinge saturates at exactly 1.0 for margins >= 1,
    # and the tie-break on the path margin saturates too): the same labels and, position by position, scores.
    ties = ~same_labels & same_sets & (diffs <= tolerance)
    differing = [
        {
            "text": int(i),
            "before": before[i].labels[0].tolist(),
            "after": after[i].labels[0].tolist(),
            "scores_after": after[i].scores[0].tolist(),
        }
        for i in np.flatnonzero(~same_labels | (diffs > tolerance))[:10]
    ]
    return {
        "texts": len(before),
        "labels_identical": int(same_labels.sum()),
        "label_sets_identical": int(same_sets.sum()),
        "scores_within_tolerance": int((diffs <= tolerance).sum()),
        "agree": int((same_labels & (diffs <= tolerance)).sum()),
        "max_abs_score_diff": float(diffs.max(initial=0.0)),
        "tolerance": tolerance,
        "order_differs_only_within_ties": int(ties.sum()),
        "differing": differing,
    }


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, default=None, help="an XR-Transformer bundle (default: train one)")
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "debtags")
    ap.add_argument("--workdir", type=Path, default=ROOT / "bench" / "out" / "xr_transformer_engine")
    ap.add_argument("--max-length", type=int, default=64, help="encoder tokens of the bundle trained here")
    ap.add_argument("--texts", type=int, default=300, help="first N test texts, each a request of its own")
    ap.add_argument("--k", type=int, default=5, help="top-k asked for (5, as in xr_transformer_debtags.py)")
    ap.add_argument(
        "--rounds", type=int, default=20, help="passes over the texts per method (5 in xr_transformer_debtags.py)"
    )
    ap.add_argument("--block", type=int, default=10, help="texts per turn of a method")
    ap.add_argument("--tolerance", type=float, default=1e-4, help="max |score difference| counted as agreement")
    ap.add_argument("--result-name", default=RESULT_NAME)
    ap.add_argument("--no-save", action="store_true", help="print the figures only (smoke runs)")
    return ap.parse_args()


def time_methods(after, before, features, onnx, texts: list[str], args: argparse.Namespace):
    """Per-text milliseconds of the served predictor, the numpy-search one and the shared features, interleaved
    (alternating), then the bare ONNX forward; and the load average before, between and after."""
    loads = [os.getloadavg()]
    times = alternating(
        {
            "after": lambda i: after.predict([texts[i]], k=args.k),
            "before": lambda i: before.predict([texts[i]], k=args.k),
            "features": lambda i: features.transform([texts[i]]),
        },
        len(texts),
        rounds=args.rounds,
        block=args.block,
    )
    loads.append(os.getloadavg())
    times.update(alternating({"onnx": lambda i: onnx.encode([texts[i]])}, len(texts), rounds=1, block=args.block))
    loads.append(os.getloadavg())
    return times, loads


def bundle_facts(bundle, bundle_path: Path, features, texts: list[str]) -> dict:
    """What the timed bundle is: encoder, tree, labels, features, search settings."""
    predictor = bundle.predictor
    model = predictor.model
    encoder_config = json.loads((bundle_path / "encoder" / "config.json").read_text())
    X = features.transform(texts[:1])
    epochs = get(bundle.manifest, "training", "config", "xr_transformer", "epochs")
    return {
        "path": str(bundle_path),
        "version": bundle.version,
        "encoder": {k: encoder_config.get(k) for k in ("source", "max_length", "pooling", "features", "dim")},
        "frozen_encoder": None if epochs is None else epochs == 0,  # from the manifest's training configuration
        "tree_levels_config": get(bundle.manifest, "training", "config", "xlinear", "tree"),
        "labels": model.n_labels,
        "levels": [level.n_nodes for level in model.levels],
        "features": X.shape[1],
        "dense_features": model.config.dense_features,
        "beam_size": model.config.beam_size,
        "post_processor": model.config.post_processor,
        "first_level_index": model.first_level is not None,
        "calibrated": predictor.calibration is not None,
    }


def main() -> None:
    args = parse_args()

    load_start = os.getloadavg()
    bundle_path = args.bundle or ensure_bundle(args)
    bundle = load_bundle(bundle_path)
    predictor = bundle.predictor
    featurizer, model = predictor.featurizer, predictor.model
    if not isinstance(featurizer, ConcatFeaturizer) or not hasattr(model, "compiled"):
        raise XtagError(f"{bundle_path}: not an XR-Transformer bundle (Φ_cat featuriser and XR-Linear rankers)")
    texts = first_texts(args.data / "test.jsonl.gz", args.texts)

    onnx = featurizer.encoder
    cached = CachedEncoder(onnx)
    start = time.perf_counter()
    for text in texts:  # each computed alone, as served
        cached.encode([text])
    encode_s = time.perf_counter() - start
    features = ConcatFeaturizer(featurizer.tfidf, cached)
    after = replace(predictor, featurizer=features)  # the served model: engine_beam_search on the compiled layout
    before = replace(predictor, featurizer=features, model=NumpySearchModel(model))

    preds_after = [after.predict([t], k=args.k) for t in texts]
    preds_before = [before.predict([t], k=args.k) for t in texts]
    agreed = agreement(preds_before, preds_after, args.tolerance)
    agreed_raw = agreement(
        [before.predict([t], k=args.k, calibrated=False) for t in texts],
        [after.predict([t], k=args.k, calibrated=False) for t in texts],
        args.tolerance,
    )
    times, loads = time_methods(after, before, features, onnx, texts, args)

    stats = {name: percentiles(t) for name, t in times.items()}
    nnz = [len(featurizer.tfidf.transform_arrays([t])[0]) for t in texts] if featurizer.tfidf else [0]
    payload = {
        "bundle": bundle_facts(bundle, bundle_path, features, texts),
        "texts": len(texts),
        "tfidf_nnz_per_text_mean": round(float(np.mean(nnz)), 1),
        "k": args.k,
        "rounds": args.rounds,
        "block": args.block,
        "samples_per_method": len(times["after"]),
        "onnx_samples": len(times["onnx"]),
        "embedding_cache_fill_s": round(encode_s, 2),
        "encoder_threads": os.environ.get("XTAG_ENCODER_THREADS"),
        "load_average_timed": {
            "before_timing": [round(x, 2) for x in loads[0]],
            "after_before_vs_after": [round(x, 2) for x in loads[1]],
            "after_onnx": [round(x, 2) for x in loads[2]],
            "at_start": [round(x, 2) for x in load_start],
        },
        "after": stats["after"],
        "before": stats["before"],
        "features": stats["features"],
        "onnx": stats["onnx"],
        "ratio_p50": round(stats["before"]["p50_ms"] / stats["after"]["p50_ms"], 2),
        "ratio_p99": round(stats["before"]["p99_ms"] / stats["after"]["p99_ms"], 2),
        "search_p50_ms": {  # p50 of the whole minus p50 of the shared features: an estimate, not a measurement
            "after": round(stats["after"]["p50_ms"] - stats["features"]["p50_ms"], 4),
            "before": round(stats["before"]["p50_ms"] - stats["features"]["p50_ms"], 4),
        },
        "agreement": agreed,
        "agreement_uncalibrated": agreed_raw,
    }
    print(json.dumps(payload, indent=2), flush=True)
    if not args.no_save:
        save_result(args.result_name, payload, benchmark="xr_transformer_engine")


if __name__ == "__main__":
    main()
