"""The label-text stage on debdeps (bench/label_text_stage.py, issue 49): XR-Linear against XR-Linear fused with the
stage, and LaMP over it, every figure with each document's own id excluded; the issue's goals against XR-Linear of
the same run."""

from __future__ import annotations

from .common import f1, f2, one_result_each, table

BASE = "xlinear"


def _goals(v: dict, name: str) -> str:
    """Each goal of the issue for variant `name`: the value reached, the bound, met or missed by how much."""
    base, fused = v[BASE], v[name]
    goals = [  # (goal, value, bound, at least: True / at most: False)
        ("P@1 ≥ 77.0", fused["P@1"], 77.0, True),
        ("PSP@5 ≥ 1.3× XR-Linear's", fused["PSP@5"] / base["PSP@5"], 1.3, True),
        ("test-only recall@10 ≥ 40 %", fused["test_only_recall@10"], 40.0, True),
        # a second stage's training counts its first stage's (stack_train_seconds: bench/label_text_stage.py)
        ("training ≤ 15 min (s)", fused.get("stack_train_seconds", fused["train_seconds"]), 900.0, False),
    ]
    if "p50_ms" in fused and "p50_ms" in base:
        goals.append(("/v1/predict p50 ≤ 2× XR-Linear's", fused["p50_ms"] / base["p50_ms"], 2.0, False))
        goals.append(("batch docs/s ≥ 0.3× XR-Linear's", fused["batch_docs_s"] / base["batch_docs_s"], 0.3, True))
    rows = []
    for goal, value, bound, at_least in goals:
        short = bound - value if at_least else value - bound
        rows.append([goal, f2(value), f2(bound), "met" if short <= 0 else f"missed by {f2(short)}"])
    return f"{name} against {BASE} of the same run:\n\n" + table(["goal", "reached", "bound", ""], "lrrl", rows)


@one_result_each
def label_text_stage(r: dict) -> dict[str, str]:
    """One row per variant; a goals table per stage variant against `xlinear`."""
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
    goals = [_goals(v, name) for name in v if name != BASE and BASE in v]
    return {"quality": table(header, "lrrrrrrrrr", rows), "goals": "\n\n".join(goals)}
