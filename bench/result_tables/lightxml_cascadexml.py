"""LightXML and CascadeXML tables: accuracy beside the baselines they are compared with, ONNX parity and latency."""

from __future__ import annotations

import json

from .common import (
    METRICS,
    accuracy_table,
    convention,
    e1,
    f0,
    f1,
    f2,
    get,
    ms,
    one_result_each,
    parity_texts,
    payloads,
    table,
    train_seconds,
    variants,
)

SUBSET_METRICS = ("P@1", "P@3", "P@5", "PSP@5", "macro-R@5")


def lightxml_debtags(docs: list[dict]) -> dict[str, str]:
    rows, conventions = [], []
    for r in payloads(docs):
        for b in r.get("baselines", []):
            t = b.get("training_s")
            train = "–" if t is None else f0(t)
            train += f" (fine-tune {b['finetune_s']:.0f})" if t is not None and b.get("finetune_s") else ""
            rows.append([b["label"]] + [f2(b["metrics"][m]) for m in METRICS] + [train, b.get("epochs", "")])
            conventions.append(convention(b, r))
    measured = []
    for r in payloads(docs):
        for name, v in variants(r):
            t = v.get("training") or {}
            batch = get(v, "args", "batch_size")
            epochs = (
                ""
                if t.get("epochs") is None
                else f"{t['epochs']:.3f}"
                + (f" ({t['steps']} × {batch} texts)" if t.get("steps") is not None and batch else "")
            )
            rows.append(
                [v.get("label", f"LightXML, {name}")]
                + [f2(v["metrics"][m]) for m in METRICS]
                + [f0(train_seconds(v)), epochs]
            )
            conventions.append(convention(v, r))
            if v.get("latency"):
                measured.append((name, v))
    out = {
        "accuracy": accuracy_table(
            ["model", *METRICS, "training s", "epochs"], "l" + "r" * (len(METRICS) + 1) + "l", rows, conventions
        )
    }
    if measured:
        texts = parity_texts(v for _, v in measured)
        out["latency"] = table(
            [
                "bundle",
                f"ONNX vs torch max abs diff ({texts} texts): cluster scores / bottleneck",
                "bare ONNX forward ms",
                "tokenise + forward ms",
                "`Predictor.predict` (k=5) ms",
            ],
            "lrrrr",
            [
                [
                    v.get("short_label", name),
                    f"{e1(get(v, 'export', 'parity', 'cluster_scores', 'max_abs_diff'))} / "
                    f"{e1(get(v, 'export', 'parity', 'bottleneck', 'max_abs_diff'))}",
                    f1(v["latency"].get("onnx_forward_p50_ms")),
                    f1(v["latency"].get("tokenize_and_forward_p50_ms")),
                    f1(v["latency"].get("predict_p50_ms")),
                ]
                for name, v in measured
            ],
        )
    return out


def cascadexml_debtags(docs: list[dict]) -> dict[str, str]:
    """CascadeXML beside the other families (their figures read from their own result files, budgets named)."""
    rows, conventions, latency = [], [], []
    for r in payloads(docs):
        c = r["cascadexml"]
        lat = c["latency"]
        for v in [c, *r.get("baselines", [])]:
            p50 = get(lat, "features", "predict_p50_ms") if v is c else v.get("predict_p50_ms")
            rows.append(
                [v["label"]] + [f2(v["metrics"][m]) for m in METRICS] + [f0(v.get("training_s")), v["budget"], f1(p50)]
            )
            conventions.append(convention(v))
        worst = max((p["max_abs_diff"] for p in (get(c, "export", "parity") or {}).values()), default=None)
        for kind, label in (("features", "per-level features, heads in numpy"), ("logits", "whole-level logits")):
            latency.append(
                [
                    label + (" (served)" if get(c, "export", "outputs") == kind else ""),
                    e1(worst) if kind == get(c, "export", "outputs") else "",
                    f1(get(lat, kind, "onnx_forward_p50_ms")),
                    f1(get(lat, kind, "predict_p50_ms")),
                    f1(lat.get("http_v1_predict_p50_ms")) if kind == get(c, "export", "outputs") else "",
                ]
            )
    return {
        "accuracy": accuracy_table(
            ["model", *METRICS, "training s", "budget", "`Predictor.predict` p50 ms (128 tokens)"],
            "l" + "r" * (len(METRICS) + 1) + "lr",
            rows,
            conventions,
        ),
        "latency": table(
            [
                "graph outputs",
                "ONNX vs torch max abs diff",
                "bare ONNX forward ms (128 tokens)",
                "`Predictor.predict` ms (128 tokens)",
                "`POST /v1/predict` ms (64 tokens)",
            ],
            "lrrrr",
            latency,
        ),
    }


def lightxml_subset(docs: list[dict]) -> dict[str, str]:
    """Issue 29's one-change-at-a-time rows on a debtags subset (bench/experiments/lightxml_subset.py), CascadeXML beside them."""
    rows, conventions = [], []
    for r in payloads(docs):
        # LightXML first, each row after the rows with fewer changed settings (the table builds up), CascadeXML last.
        ordered = sorted(variants(r["variants"]), key=lambda nv: (nv[1]["family"] != "lightxml", len(nv[1]["changed"])))
        for name, v in ordered:
            b = v["budget"]
            changed = ", ".join(f"{k}={json.dumps(x)}" for k, x in v["changed"].items()) or "(none)"
            rows.append(
                [name, v["family"], changed]
                + [f2(v["metrics"][m]) for m in SUBSET_METRICS]
                + [f0(v["train_seconds"]), f"{b['train_docs']} / {b['epochs']} / {b['max_length']} / {b['batch_size']}"]
            )
            conventions.append(convention(v))
    header = ["variant", "family", "settings (besides the budget)", *SUBSET_METRICS, "training s"]
    header.append("train docs / epochs / tokens / batch")
    return {"table": accuracy_table(header, "lll" + "r" * (len(SUBSET_METRICS) + 1) + "l", rows, conventions)}


@one_result_each
def equal_budget(r: dict) -> dict[str, str]:
    """The families at one CPU budget on the whole of debtags (equal_budget_debtags.py, issue 29)."""
    header = ["model", "budget", *SUBSET_METRICS, "training s", "`/v1/predict` p50 ms"]
    rows = [
        [
            label,
            v["budget"],
            *(f2(v["metrics"][m]) for m in SUBSET_METRICS),
            f0(v["train_seconds"]),
            ms(v["http_p50_ms"]),
        ]
        for label, v in r["rows"].items()
    ]
    return {"table": table(header, "ll" + "r" * (len(SUBSET_METRICS) + 2), rows)}
