"""Encoder-graph tables: the exported, fused and int8 ONNX encoders of each transformer family, speed and accuracy."""

from __future__ import annotations

from .common import METRICS, f2, ms, one_result_each, table

ENCODER_VARIANTS = {
    "exported": "graph as exported before issue 17",
    "fused": "onnxruntime transformer fusions (fp32)",
    "int8": "fused + dynamic int8",
}


@one_result_each
def encoder_variants(r: dict) -> dict[str, str]:
    """bench/experiments/encoder_variants.py: exported vs fused vs int8 encoder graphs, bare forward, /v1/predict and accuracy."""
    rows, acc_rows = [], []
    for family, e in r["families"].items():
        fwd, http = e["bare_forward"]["p50_ms"], e["predict_http"]["p50_ms"]
        base_fwd, base_http = fwd["exported"], http["exported"]
        for name, label in ENCODER_VARIANTS.items():
            rows.append(
                [
                    f"{family}: {label}",
                    e["export"][name]["model_onnx_mb"],
                    ms(fwd[name]),
                    f"{base_fwd / fwd[name]:.2f}×",
                    ms(http[name]),
                    f"{base_http / http[name]:.2f}×",
                ]
            )
        for name, metrics in e.get("accuracy", {}).items():
            acc_rows.append([f"{family}: {ENCODER_VARIANTS[name]}"] + [f2(metrics[m]) for m in METRICS])
    first = next(iter(r["families"].values()))
    out = {
        "latency": table(
            ["bundle", "model.onnx MB", "bare forward p50 ms", "speed-up", "`/v1/predict` p50 ms", "speed-up"],
            "lrrrrr",
            [[c if isinstance(c, str) else f"{c:g}" for c in row] for row in rows],
        )
        + f"\n\nBare forward: batch 1, {r['texts']} test texts at their real length (median "
        f"{first['bare_forward']['tokens_median']} tokens, cap 128), {first['bare_forward']['samples_per_variant']} "
        f"samples per variant; `/v1/predict`: one text, k=5, sequential client over loopback, "
        f"{first['predict_http']['samples_per_variant']} samples per variant (the bundle's own max_length); "
        f"variants taking turns in blocks of {r['block']} texts, {r['rounds']} rounds."
    }
    if acc_rows:
        conventions = {m.get("convention") for e in r["families"].values() for m in e.get("accuracy", {}).values()}
        out["accuracy"] = (
            table(["bundle", *METRICS], "l" + "r" * len(METRICS), acc_rows)
            + f"\n\nMetric convention: {', '.join(sorted(c for c in conventions if c))}."
        )
    return out
