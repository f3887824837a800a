"""`xtag update` against a full retrain (bench/update_labels.py, issue 26)."""

from __future__ import annotations

from .common import f1, f2, one_result_each, table

# run name in the result -> its row; the seconds key; `xtag update --clusters` value from the result's "variants"
# (results from before --clusters had no such key: "updated" was the nearest-cluster rule with refits, `refit`)
RUNS = (
    ("base", "base_train"),
    ("updated", "update"),
    ("unweighted", "update_unweighted"),
    ("refit", "update_refit"),
    ("kept", "update_kept"),
)
OLD_VARIANTS = {"updated": "refit", "kept": "keep"}
GOALS = (
    ("update_time_le_20pct", "time ≤ 20 % of the retrain's"),
    ("added_recall_ge_90pct_of_retrain", "recall@5 of the added labels ≥ 90 % of the retrain's"),
    ("old_P@5_within_0.2", "old labels' P@5 within 0.2 points of the retrain's"),
)


def _retrained(facts: dict) -> str:
    return ", ".join(f"{lv['retrained']} of {lv['nodes']} at level {lv['level']}" for lv in facts["levels"])


def _name(run: str, variants: dict) -> str:
    if run == "base":
        return "base run (without the removed labels)"
    if run == "unweighted":
        return f"base + `xtag update --clusters {variants[run]}`, gates unweighted (ablation)"
    return f"base + `xtag update --clusters {variants[run]}`"


@one_result_each
def update_labels(r: dict) -> dict[str, str]:
    q, s, changed = r["quality"], r["seconds"], r["changed_vs_base"]
    variants = r.get("variants", OLD_VARIANTS)
    runs = [(key, _name(key, variants), seconds) for key, seconds in RUNS if key in q]
    runs.append(("full", "full retrain", "retrain"))
    rows = []
    for key, name, seconds in runs:
        row, moved = q[key], changed.get(key)
        share = f" ({100 * s[seconds] / s['retrain']:.0f} %)" if key in variants else ""
        rows.append(
            [
                name,
                f1(s[seconds]) + share,
                f2(row["P@5"]),
                f2(row["PSP@5"]),
                f2(row["added_recall@5"]),
                f2(row["old_P@5"]),
                f"{moved['old_predictions_dropped_pct']:.1f} %" if moved else "",
            ]
        )
    header = ["model", "seconds", "P@5", "PSP@5", "recall@5 added", "P@5 old labels", "base top-5 dropped"]
    out = table(header, "lrrrrrr", rows)
    u, load = r["update_documents"], r["load_1min"]
    facts = {"updated": u, **{k: r.get(f"update_{k}") for k in ("refit", "kept", "unweighted")}}
    near = next((facts[k] for k, v in variants.items() if v in ("refit", "keep")), None)
    retrained = "; ".join(f"{_name(k, variants)[7:]}: {_retrained(facts[k])}" for k in variants if facts.get(k))
    out += (
        f"\n\n{r['data']}: {r['labels_removed']} labels removed from TRAIN and added back from "
        f"{u['documents_in_update_corpus']} documents; measured on {r.get('measured_on', 'TEST')}"
        + (
            f". Nearest-cluster placement: {near['clusters_changed']} leaf clusters gained labels "
            f"({near['clusters_added_by_splits']} clusters added by splits)"
            if near
            else ""
        )
        + (
            f"; `--clusters new`: {u['clusters_added']} cluster{'s' * (u['clusters_added'] != 1)} added"
            if "clusters_added" in u
            else ""
        )
        + f". Rankers retrained: {retrained}. 1-minute load before the first update {load['before_update']:.1f}, "
        f"before the retrain {load['before_retrain']:.1f} (2 cores). "
        "Base top-5 dropped: the base run's top-5 predictions (old labels) a model no longer makes."
    )
    for key, name, _ in runs:
        if key in variants:
            goals = r["goals"][key]
            met = [f"{text}: {'met' if goals[g] else '**not met**'}" for g, text in GOALS]
            out += f"\n\nGoals, {name}: " + "; ".join(met) + "."
    return {"table": out}
