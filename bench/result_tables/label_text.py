"""The label-text stage on debdeps (bench/label_text_stage.py, issue 49): XR-Linear against XR-Linear fused with the
stage, every figure with each document's own id excluded; the issue's goals against XR-Linear of the same run."""

from __future__ import annotations

from .common import f1, f2, one_result_each, table

BASE = "xlinear"
FUSED = "xlinear+stage"


def _goals(v: dict) -> str:
    base, fused = v.get(BASE), v.get(FUSED)
    if base is None or fused is None:
        return ""
    goals = [
        ("P@1 ≥ 77.0", fused["P@1"], 77.0),
        ("PSP@5 ≥ 1.3× XR-Linear's", fused["PSP@5"] / base["PSP@5"], 1.3),
        ("test-only recall@10 ≥ 40 %", fused["test_only_recall@10"], 40.0),
        ("training ≤ 15 min", 900.0, fused["train_seconds"]),  # met when the budget is at least the time
    ]
    if "p50_ms" in fused and "p50_ms" in base:
        goals.append(("/v1/predict p50 ≤ 2× XR-Linear's", 2.0, fused["p50_ms"] / base["p50_ms"]))
        goals.append(("batch docs/s ≥ 0.3× XR-Linear's", fused["batch_docs_s"] / base["batch_docs_s"], 0.3))
    rows = [
        [name, f2(have), f2(need), "met" if have >= need else f"missed by {f2(need - have)}"]
        for name, have, need in goals
    ]
    return table(["goal", "reached (or budget)", "needed (or spent)", ""], "lrrl", rows)


@one_result_each
def label_text_stage(r: dict) -> dict[str, str]:
    """One row per variant; the goals table compares `xlinear+stage` with `xlinear`."""
    v = r["variants"]
    rows = [
        [
            name,
            f1(x["train_seconds"]),
            f2(x["P@1"]),
            f2(x["P@5"]),
            f2(x["nDCG@5"]),
            f2(x["PSP@5"]),
            f2(x["macro-R@5"]),
            f2(x["test_only_recall@10"]),
            f2(x["p50_ms"]) if "p50_ms" in x else "",
            f1(x["batch_docs_s"]) if "batch_docs_s" in x else "",
        ]
        for name, x in v.items()
    ]
    header = [
        "variant",
        "train s",
        "P@1",
        "P@5",
        "nDCG@5",
        "PSP@5",
        "macro-R@5",
        "test-only R@10",
        "p50 ms",
        "batch docs/s",
    ]
    return {"quality": table(header, "lrrrrrrrrr", rows), "goals": _goals(v)}
