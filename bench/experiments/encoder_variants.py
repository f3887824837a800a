"""CPU encoder variants in one run: the graph export wrote before issue 17 vs the fused one vs dynamic int8.

Each variant is a bundle exported from the same run through the product path (`export_run` with
optimize/precision), so the figures are those of what `xtag export` ships. In one process, taking turns
in blocks so that load on the shared machine hits every variant alike (blocks of 100 texts: with blocks
of 10 every variant's calls right after a switch, while the previous session's threads still spin,
weighed on its median):
  - bare forward (onnxruntime session.run, batch 1) on debtags test texts at their real length (cap 128);
  - `/v1/predict` p50 over loopback HTTP, one `xtag serve` server per variant, same texts, k=5;
  - P@1..5 / PSP@1..5 of each bundle on the test split (XMC convention, evaluation/evaluate.py).

    .venv/bin/python -m bench.experiments.encoder_variants --xr-run bench/out/xr_transformer_engine/run \
        --lightxml-run bench/out/lightxml_issue17/dynamic-run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

import numpy as np
from xtag.corpus.files import load_corpus
from xtag.evaluation.evaluate import evaluate_bundle
from xtag.models.bundle.loader import load_bundle
from xtag.models.features.onnx_encoder import OnnxEncoder, TextTokenizer
from xtag.training.export.export_run import export_run

from bench.helpers.results import save_result
from bench.helpers.server import Conn, free_port, start_server

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = {
    "exported": {"optimize": False},
    "fused": {"optimize": True},
    "int8": {"optimize": True, "precision": "int8"},
}
METRICS = ("P@1", "P@3", "P@5", "PSP@1", "PSP@3", "PSP@5")


def export_variants(run: Path, work: Path) -> dict[str, Path]:
    """One bundle per variant from `run` (re-used when already written)."""
    out = {}
    for name, options in VARIANTS.items():
        bundle = work / f"{run.parent.name}-{name}"
        if not (bundle / "manifest.json").is_file():
            start = time.perf_counter()
            export_run(run, bundle, overwrite=True, **options)
            print(f"exported {bundle} in {time.perf_counter() - start:.0f} s", flush=True)
        out[name] = bundle
    return out


def p50(times: list[float]) -> float:
    return round(statistics.median(times) * 1e3, 3)


def bare_forward(bundles: dict[str, Path], texts: list[str], rounds: int, block: int) -> dict:
    """p50 ms of one session.run per text (batch 1, real length up to 128 tokens), variants taking turns."""
    encoders = {n: OnnxEncoder.load(b / "encoder") for n, b in bundles.items()}
    tok = TextTokenizer.load(next(iter(bundles.values())) / "encoder" / "tokenizer.json", 128)
    feeds = [tok([t]) for t in texts]
    outputs = {n: [o.name for o in e.session.get_outputs()] for n, e in encoders.items()}
    times: dict[str, list[float]] = {n: [] for n in encoders}
    for n, e in encoders.items():  # warm-up
        for ids, mask in feeds[:5]:
            e.forward(outputs[n], ids, mask)
    for _ in range(rounds):
        for lo in range(0, len(feeds), block):
            for n, e in encoders.items():
                for ids, mask in feeds[lo : lo + block]:
                    start = time.perf_counter()
                    e.forward(outputs[n], ids, mask)
                    times[n].append(time.perf_counter() - start)
    return {
        "tokens_median": int(np.median([ids.shape[1] for ids, _ in feeds])),
        "samples_per_variant": len(times[next(iter(times))]),
        "p50_ms": {n: p50(t) for n, t in times.items()},
    }


async def _http(ports: dict[str, int], bodies: list[bytes], rounds: int, block: int) -> dict[str, list[float]]:
    conns = {n: await Conn.open(p) for n, p in ports.items()}
    times: dict[str, list[float]] = {n: [] for n in ports}
    for c in conns.values():  # warm-up
        for body in bodies[:5]:
            await c.request("POST", "/v1/predict", body)
    for _ in range(rounds):
        for lo in range(0, len(bodies), block):
            for n, c in conns.items():
                for body in bodies[lo : lo + block]:
                    start = time.perf_counter()
                    status, _ = await c.request("POST", "/v1/predict", body)
                    times[n].append(time.perf_counter() - start)
                    if status != 200:
                        raise RuntimeError(f"{n}: HTTP {status}")
    for c in conns.values():
        c.close()
    return times


def http_predict(bundles: dict[str, Path], texts: list[str], rounds: int, block: int) -> dict:
    """p50 ms of a sequential client's `/v1/predict` (one text, k=5), one server per variant, taking turns."""
    ports = {n: free_port() for n in bundles}
    procs = [start_server(b, ports[n], "true") for n, b in bundles.items()]
    try:
        bodies = [json.dumps({"text": t, "k": 5}).encode() for t in texts]
        times = asyncio.run(_http(ports, bodies, rounds, block))
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
    return {"samples_per_variant": len(next(iter(times.values()))), "p50_ms": {n: p50(t) for n, t in times.items()}}


def accuracy(bundles: dict[str, Path], test, names: tuple[str, ...]) -> dict:
    out = {}
    for n in names:
        metrics, info = evaluate_bundle(load_bundle(bundles[n]), test, progress=False)
        out[n] = {m: round(metrics[m], 2) for m in METRICS} | {"convention": info["convention"]}
    return out


def export_facts(bundle: Path) -> dict:
    manifest = json.loads((bundle / "manifest.json").read_text())
    report = manifest.get("export", {})
    size = (bundle / "encoder" / "model.onnx").stat().st_size
    return {"parity": report.get("parity"), "int8": report.get("int8"), "model_onnx_mb": round(size / 2**20, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--xr-run", type=Path, required=True)
    ap.add_argument("--lightxml-run", type=Path, default=None)
    ap.add_argument("--test", type=Path, default=ROOT.parent / "shared" / "data" / "debtags" / "test.jsonl.gz")
    ap.add_argument("--work", type=Path, default=ROOT / "bench" / "out" / "encoder_variants")
    ap.add_argument("--texts", type=int, default=100, help="test texts timed (the first N)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--block", type=int, default=100, help="texts per variant before the next takes its turn")
    ap.add_argument("--no-accuracy", action="store_true")
    ap.add_argument("--result-name", default="encoder_variants_debtags", help="bench/results/<name>.json")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    test = load_corpus(args.test)
    texts = test.texts[: args.texts]
    runs = {"xr-transformer": args.xr_run, **({"lightxml": args.lightxml_run} if args.lightxml_run else {})}
    result: dict = {"texts": len(texts), "rounds": args.rounds, "block": args.block, "families": {}}
    for family, run in runs.items():
        bundles = export_variants(run, args.work)
        entry = {"run": run.name, "export": {n: export_facts(b) for n, b in bundles.items()}}
        entry["bare_forward"] = bare_forward(bundles, texts, args.rounds, args.block)
        print(json.dumps({family: entry["bare_forward"]}), flush=True)
        entry["predict_http"] = http_predict(bundles, texts, args.rounds, args.block)
        print(json.dumps({family: entry["predict_http"]}), flush=True)
        if not args.no_accuracy:
            entry["accuracy"] = accuracy(bundles, test, ("fused", "int8"))
            print(json.dumps({family: entry["accuracy"]}), flush=True)
        result["families"][family] = entry
    save_result(args.result_name, result)


if __name__ == "__main__":
    main()
