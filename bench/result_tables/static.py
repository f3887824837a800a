"""XR-Linear with the static token block in Φ_cat (issue 24): one row per tune, beside XR-Linear alone."""

from __future__ import annotations

from .common import CONVENTION_TEXT, bold_column_maxima, f1, f2, ms, one_result_each, table, thousands

COLUMNS = ("P@1", "P@3", "P@5", "PSP@5", "macro-R@5")


def _seconds(row: dict, event: str, tune: str | None = None) -> float | None:
    """Seconds of the first static_distill / static_tune event (of that tune) the row's build logged."""
    for e in row.get("static_events", []):
        if e["event"] == event and (tune is None or e.get("tune") == tune):
            return e["seconds"]
    return None


@one_result_each
def static_debtags(r: dict) -> dict[str, str]:
    """bench/static_debtags.py: accuracy on the test split, α chosen on the validation split, cost and speed."""
    rows = []
    speed = r.get("speed_interleaved", {})
    for name, row in r["rows"].items():
        row = {**row, **speed.get(name, {})}  # the interleaved figures, where measured, replace the in-run ones
        tune = name.removeprefix("static-") if name.startswith("static-") else None
        validation = row.get("validation", {}).get(str(row.get("alpha")), {})
        tune_s = [_seconds(row, "static_tune", t) for t in ("corpus", "task") if tune and t in tune]
        rows.append(
            [
                "XR-Linear (TF-IDF)" if tune is None else f"XR-Linear + static, tune={tune}",
                "" if tune is None else f"{row['alpha']:g}",
                f2(validation.get("P@1")),
                *(f2(row[c]) for c in COLUMNS),
                f1(row.get("train_seconds", row["run_seconds"])),
                f1(_seconds(row, "static_distill")),
                " + ".join(f1(s) for s in tune_s if s is not None),
                ms(row["predict_p50_ms"]),
                thousands(row["batch_docs_per_s"]),
                f2(row["bundle_mb"]),
                f2(row["static_mb"]) if row["static_mb"] else "",
            ]
        )
    bold_column_maxima(rows, range(3, 3 + len(COLUMNS)))
    header = ["model", "α", "val P@1", *COLUMNS, "train s", "distil s", "tune s", "p50 ms", "batch docs/s"]
    header += ["bundle MB", "static MB"]
    return {
        "table": table(header, "l" + "r" * (len(header) - 1), rows)
        + "\n\nα is chosen on a seeded 10 % validation split of the training file (val P@1: its P@1 there); "
        "train s includes distillation and tuning; p50 is in-process `Predictor.predict` of one text (1,000 test "
        "texts), batch docs/s batched prediction of the test split (256 a batch)"
        + (", the bundles taking turns text by text (interleaved)" if speed else "")
        + f". Metric convention: {CONVENTION_TEXT['xmc']}."
    }


@one_result_each
def static_alpha_levels(r: dict) -> dict[str, str]:
    """bench/experiments/static_alpha_levels.py: validation P@1 (PSP@5) per (α level 1, α level 2), one grid per tree."""
    alphas = r["alphas"]
    out = []
    for tree_alpha, grid in r["grids"].items():
        name = "TF-IDF alone" if float(tree_alpha) == 0 else f"Φ_cat at α {tree_alpha}"
        best = max(grid.values(), key=lambda v: v["P@1"])["P@1"]
        rows = []
        for a1 in alphas:
            cells = []
            for a2 in alphas:
                v = grid[f"{a1},{a2}"]
                p1 = f"**{f2(v['P@1'])}**" if v["P@1"] == best else f2(v["P@1"])
                cells.append(f"{p1} ({f2(v['PSP@5'])})")
            rows.append([f"α₁ = {a1}", *cells])
        header = [f"tree from {name}", *[f"α₂ = {a}" for a in alphas]]
        out.append(table(header, "l" + "r" * len(alphas), rows))
    note = (
        f"\n\nValidation P@1 (PSP@5) on {r['validation_documents']:,} {r['data']} documents; α₁ level 1's rankers "
        "(the clusters), α₂ level 2's (the labels); α = 0: TF-IDF alone at that level."
    )
    return {"table": "\n\n".join(out) + note}
