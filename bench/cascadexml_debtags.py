"""CascadeXML on debtags, CPU only, beside XR-Linear, XR-Transformer and LightXML from their own result files.

The run is trained through the CLI (the product path), in the background, then this script finishes it.
bench/out/cascadexml/config.json holds what the CLI has no flag for (8 → 128 → 595 resolutions, top 4 of 8
clusters, top 16 of the 128):

    {"cascadexml": {"branching": 16, "max_leaf_size": 8, "top_k": [4, 16], "checkpoint_every": 100, "log_every": 20}}

    nohup .venv/bin/python -m xtag train --config bench/out/cascadexml/config.json \
        --corpus ../shared/data/debtags/train.jsonl.gz --model cascadexml --max-length 64 --epochs 1 \
        --batch-size 16 --device cpu --out bench/out/cascadexml/run > bench/out/cascadexml/train.log 2>&1 &
    .venv/bin/python -m bench.cascadexml_debtags      # resumes the run if it was interrupted, then measures

It exports the run twice (graph outputs = per-level features with the heads in numpy, and = whole-level
logits), checks the two predict alike, evaluates the features bundle on the 5,910-document test split
(`evaluate_bundle`, the served bundle: onnxruntime + numpy), and times single texts: `Predictor.predict`
at exactly 128 tokens for both graphs (as the LightXML and XR-Transformer figures were taken) and
`POST /v1/predict` on the in-thread server at the bundle's own 64 tokens. The baselines' figures are read
from bench/results/{xr_transformer_debtags_cpu,lightxml_debtags}.json with their budgets, not re-run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from xtag.corpus.files import load_corpus
from xtag.evaluation.evaluate import evaluate_bundle
from xtag.models.bundle.loader import load_bundle
from xtag.models.features.onnx_encoder import TextTokenizer
from xtag.training.config import TrainConfig
from xtag.training.export.export_run import export_run
from xtag.training.run import train_run

from bench.helpers.results import ROOT, save_result
from bench.helpers.transformer import LATENCY_TOKENS, METRICS, HttpPredict, ThreadServer, p50_ms, subset

BASELINES = (  # (result file, variant, label, budget)
    ("xr_transformer_debtags_cpu", "finetuned", "XR-Transformer", "128 tokens, 40 steps × 32 texts per level"),
    ("lightxml_debtags", "dynamic-800-lrhead", "LightXML (dynamic, heads 1e-3)", "64 tokens, 800 steps × 16 texts"),
    ("lightxml_debtags_epoch", "dynamic-epoch64", "LightXML (dynamic, heads 1e-3)", "64 tokens, one epoch × 16 texts"),
)


def baselines() -> list[dict]:
    """The other families' figures from their own result files; XR-Linear from the latest run against PECOS."""
    doc = json.loads((ROOT / "bench" / "results" / "xlinear_vs_pecos_debtags.json").read_text())["result"]
    out = [
        {
            "label": "XR-Linear (TF-IDF)",
            "budget": "no encoder",
            "source": "bench/results/xlinear_vs_pecos_debtags.json [xtag]",
            "metrics": {m: doc["xtag"][m] for m in METRICS},
            "training_s": doc["xtag"]["train_s"],
            "epochs": None,
            "predict_p50_ms": None,
            "convention": doc["convention"],
        }
    ]
    for name, variant, label, budget in BASELINES:
        path = ROOT / "bench" / "results" / f"{name}.json"
        if not path.is_file():
            print(f"baseline {label!r} left out of the table: {path} is missing", file=sys.stderr)
            continue
        v = json.loads(path.read_text())["result"][variant]
        out.append(
            {
                "label": label,
                "budget": budget,
                "source": f"bench/results/{name}.json [{variant}]",
                "metrics": v["metrics"],
                "training_s": (v.get("summary") or {}).get("total_seconds"),
                "epochs": (v.get("training") or {}).get("epochs"),
                "predict_p50_ms": (v.get("latency") or {}).get("predict_p50_ms"),
                "convention": v.get("convention"),
            }
        )
    return out


def export_both(run: Path, work: Path) -> dict[str, Path]:
    """The run exported with each graph output kind (the run's config is restored afterwards)."""
    config_path = run / "config.json"
    original = config_path.read_text()
    bundles = {}
    try:
        for outputs in ("features", "logits"):
            config = TrainConfig.model_validate_json(original)
            config.cascadexml.export.outputs = outputs
            config_path.write_text(config.model_dump_json(indent=2))
            bundles[outputs] = work / f"{outputs}-bundle"
            export_run(run, bundles[outputs], overwrite=True)
    finally:
        config_path.write_text(original)
    return bundles


def predict_latency(bundle: Path, texts: list[str]) -> dict:
    """p50 ms of the bare ONNX forward and of `Predictor.predict` (k=5), one text at exactly 128 tokens."""
    predictor = load_bundle(bundle).predictor
    encoder = predictor.featurizer
    tok = TextTokenizer.load(bundle / "encoder" / "tokenizer.json", LATENCY_TOKENS)
    encoder.onnx.tokenizer = tok
    feeds = [tok([t]) for t in texts]
    return {
        "onnx_forward_p50_ms": round(p50_ms(lambda i: encoder.onnx.forward(encoder.names, *feeds[i]), len(texts)), 3),
        "predict_p50_ms": round(p50_ms(lambda i: predictor.predict([texts[i]], k=5), len(texts)), 3),
    }


def http_latency(bundle: Path, texts: list[str]) -> float:
    """p50 ms of `POST /v1/predict` (k=5) on the in-thread server, at the bundle's own max length."""
    server = ThreadServer(bundle)
    client = HttpPredict(server.port)
    try:
        return round(p50_ms(lambda i: client(texts[i]), len(texts)), 3)
    finally:
        client.close()
        server.close()


STOPPED_S = 300  # a gap this long between two logged steps (20 apart) means the process was stopped, not slow


def active_training_seconds(log_path: Path) -> float:
    """Wall time of the training steps in the run's log, summed over its processes (a resumed run has one per
    start): from each start to its first step, then between logged steps, leaving out gaps over STOPPED_S
    (a process paused with SIGSTOP while another benchmark needed a quiet machine). Steps a killed process
    ran past its last checkpoint were redone by the next one and count twice."""
    total, last = 0.0, None
    for line in log_path.read_text().splitlines():
        event = json.loads(line)
        if event["event"] in ("cascadexml", "step"):
            if last is not None and event["time"] - last <= STOPPED_S:
                total += event["time"] - last
            last = event["time"]
        elif event["event"] == "corpus":  # a new process: its reading and vectorising are not training
            last = None
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "debtags")
    ap.add_argument("--workdir", type=Path, default=ROOT / "bench" / "out" / "cascadexml")
    ap.add_argument("--latency-texts", type=int, default=100)
    ap.add_argument("--result-name", default="cascadexml_debtags")
    ap.add_argument("--test-limit", type=int, default=None, help="first N test texts only (smoke runs)")
    args = ap.parse_args()
    work, run = args.workdir, args.workdir / "run"
    config = TrainConfig.load(run / "config.json")
    if not (run / "model").is_dir():
        train_run(config, run, resume=True, progress=True)
    summary = json.loads((run / "summary.json").read_text())
    bundles = export_both(run, work)
    test = load_corpus(subset(args.data / "test.jsonl.gz", work / "test.jsonl", args.test_limit))
    start = time.perf_counter()
    metrics, info = evaluate_bundle(load_bundle(bundles["features"]), test, progress=True)
    eval_s = time.perf_counter() - start
    sample = test.texts[:200]
    a, b = (load_bundle(bundles[k]).predictor.predict(sample, k=5) for k in ("features", "logits"))
    tok = TextTokenizer.load(bundles["features"] / "encoder" / "tokenizer.json", LATENCY_TOKENS)
    long = [t for t in test.texts if len(tok.tokenizer.encode(t).ids) >= LATENCY_TOKENS][: args.latency_texts]
    latency = {kind: predict_latency(bundles[kind], long) for kind in ("features", "logits")}
    latency["http_v1_predict_p50_ms"] = http_latency(bundles["features"], long)
    latency["http_tokens"] = config.cascadexml.max_length
    latency["texts"] = len(long)
    manifest = json.loads((bundles["features"] / "manifest.json").read_text())
    cc = config.cascadexml
    result = {
        "cascadexml": {
            "label": "CascadeXML",
            "budget": f"{cc.max_length} tokens, {summary['training']['steps']} steps × {cc.batch_size} texts",
            "metrics": {m: round(metrics[m], 2) for m in METRICS},
            "convention": info["convention"],
            "training_s": round(active_training_seconds(run / "train_log.jsonl")),
            "model_seconds_last_process": round(summary["model_seconds"]),
            "total_s": round(summary["total_seconds"]),
            "training": summary["training"],
            "resolutions": summary["resolutions"],
            "layers": summary["layers"],
            "config": json.loads(cc.model_dump_json()),
            "export": manifest.get("export"),
            "eval_seconds": round(eval_s, 1),
            "features_vs_logits_top5_equal": float(np.mean(a.labels == b.labels)),
            "latency": latency,
            "load_average_at_training_start": (work / "loadavg_start.txt").read_text().split()[:3]
            if (work / "loadavg_start.txt").is_file()
            else None,
        },
        "baselines": baselines(),
    }
    print(json.dumps(result, indent=2), flush=True)
    commands = [
        ".venv/bin/python -m xtag train --config bench/out/cascadexml/config.json --corpus "
        "../shared/data/debtags/train.jsonl.gz --model cascadexml --max-length 64 --epochs 1 --batch-size 16 "
        "--device cpu --out bench/out/cascadexml/run",
        ".venv/bin/python -m bench.cascadexml_debtags",
    ]
    save_result(args.result_name, result, command=commands)


if __name__ == "__main__":
    main()
