"""Tail-label tables: reweighting and calibrated (BCA, FW) study, then XR-Linear under the missing-label losses."""

from __future__ import annotations

from .common import (
    CONVENTION_TEXT,
    METRICS,
    bold,
    convention,
    convention_line,
    f1,
    f2,
    get,
    one_result_each,
    signed,
    table,
    thousands,
)


def _change(row: dict, plain: dict) -> tuple[str, str]:
    p = row.get("P@5_change", row["P@5"] - plain["P@5"])
    pct = row.get("macro-R@5_change_pct", 100 * (row["macro-R@5"] / plain["macro-R@5"] - 1))
    return f"{row['P@5']:.2f} ({signed(p)})", f"{row['macro-R@5']:.2f} ({signed(pct, '.1f')} %)"


@one_result_each
def tail_debtags(r: dict) -> dict[str, str]:
    out = {}
    models = [
        ("B (served bundle, raw scores)", "B", r.get("full")),
        ("A (calibrated)", "A", get(r, "calibrated", "study")),
    ]
    rows = []
    for label, short, study in models:
        if not study:
            continue
        plain = study["plain"]
        first = True
        for scheme, row in study["smallest_alpha"].items():
            if row is None:
                continue
            rows.append(
                [
                    label if first else short,
                    f"{plain['P@5']:.2f} / {plain['macro-R@5']:.2f}" if first else "",
                    scheme,
                    f"{row['alpha']:.2f}",
                    *_change(row, plain),
                ]
            )
            first = False
    out["smallest_alpha"] = table(
        ["model", "plain P@5 / macro-R@5", "scheme", "alpha", "P@5", "macro-R@5"], "lllrrr", rows
    )
    out["smallest_alpha"] += "\n\n" + convention_line([convention(s, r) for _, _, s in models if s])
    study = r["calibrated"]["study"]
    fw = {x["alpha"]: x for x in study.get("fw", [])}
    per_alpha = study["comparison"]["per_alpha"]
    within = [x["bca"] for x in per_alpha if x["bca"]["P@5"] >= study["plain"]["P@5"] - 1.0]
    headline = max(within, key=lambda b: b["macro-F1@5"])["alpha"] if within else None
    rows = []
    for x in per_alpha:
        bca, best, f = x["bca"], x.get("best_reweighting"), fw.get(x["bca"]["alpha"], {})
        rows.append(
            [
                f"{bca['alpha']:g}",
                f2(bca["P@5"]),
                bold(f2(bca["macro-F1@5"])) if bca["alpha"] == headline else f2(bca["macro-F1@5"]),
                f2(bca["seconds"]),
                f"{best['scheme']} α={best['alpha']:g}" if best else "none",
                f2(best["macro-F1@5"]) if best else "",
                f2(f.get("macro-F1@5")),
                f2(f.get("seconds")),
            ]
        )
    out["batch"] = table(
        [
            "alpha",
            "BCA P@5",
            "BCA macro-F1@5",
            "BCA s",
            "best reweighting at ≥ P@5",
            "its macro-F1@5",
            "FW macro-F1@5",
            "FW s",
        ],
        "rrrrlrrr",
        rows,
    )
    out["batch"] += "\n\n" + convention_line([convention(study, r)])
    return out


# Missing-label losses (issue 16).
LOSS_COLUMNS = (*METRICS, "macro-R@5", "coverage@5")


@one_result_each
def losses_debtags(r: dict) -> dict[str, str]:
    """bench/losses_debtags.py: XR-Linear plain vs the missing-label losses, complete and drop-labels training."""
    out = {}
    rows = []
    for key, corpus in (("complete", "complete"), ("drop_labels", "drop-labels")):
        part = r[key]
        plain = part["rows"][0]
        for row in part["rows"]:
            cells = [corpus, row["variant"], row.get("propensities", "")]
            for col in LOSS_COLUMNS:
                text = f2(row[col])
                cells.append(text if row is plain else f"{text} ({signed(row[col] - plain[col])})")
            rows.append(cells + [f1(row["train_s"])])
    header = ["training set", "loss", "propensities", *LOSS_COLUMNS, "train s"]
    drop = r["drop_labels"]["drop"]
    # The script evaluates with xtag.evaluation.evaluate.ground_truth's default convention (xmc) and records it.
    conv = convention(r["complete"]) if r["complete"].get("convention") else CONVENTION_TEXT["xmc"]
    out["table"] = (
        table(header, "lll" + "r" * (len(LOSS_COLUMNS) + 1), rows)
        + f"\n\nDrop rule: {drop['rule']}; seed {drop['seed']}. {thousands(drop['positives_before'])} training "
        f"positives → {thousands(drop['positives_after'])} (kept {drop['kept_fraction_of_positives']:.1%}); "
        f"{thousands(drop['documents_without_labels_left_out'])} of {thousands(drop['train_documents'])} documents "
        f"lost every label and were left out; {drop['labels_before']} → {drop['labels_after']} labels. "
        "Every row is measured against the complete test labels. " + convention_line([conv])
    )
    rw = r["reweighting"]
    base = rw["rows"][0]
    rw_rows = []
    for row in rw["rows"]:
        cells = [row["training"], row["reweighting"]]
        for col in ("P@5", "PSP@5", "macro-R@5", "coverage@5"):
            cells.append(f2(row[col]) if row is base else f"{f2(row[col])} ({signed(row[col] - base[col])})")
        rw_rows.append(cells)
    out["reweighting"] = table(
        ["training loss", "per-request reweighting", "P@5", "PSP@5", "macro-R@5", "coverage@5"], "llrrrr", rw_rows
    ) + (
        f"\n\nTraining on complete debtags; `{rw['best']}` is the weighted loss with the highest macro-R@5 whose "
        "P@5 stays within one point of plain training. Reweighting re-ranks a widened beam of raw model scores "
        "(models/inference/reweighting.py); changes are against plain training without reweighting."
    )
    return out
