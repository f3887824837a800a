"""`xtag update` against a full retrain (bench/update_labels.py, issue 26)."""

from __future__ import annotations

from .common import f1, f2, one_result_each, table

RUNS = (
    ("base", "base run (without the removed labels)", "base_train", None),
    ("updated", "base + `xtag update`", "update", "update"),
    ("kept", "base + `xtag update --keep-clusters`", "update_kept", "update_kept"),
    ("full", "full retrain", "retrain", None),
)
GOALS = (
    ("update_time_le_20pct", "time ≤ 20 % of the retrain's"),
    ("added_recall_ge_90pct_of_retrain", "recall@5 of the added labels ≥ 90 % of the retrain's"),
    ("old_P@5_within_0.2", "old labels' P@5 within 0.2 points of the retrain's"),
)


def _retrained(facts: dict) -> str:
    return ", ".join(f"{lv['retrained']} of {lv['nodes']} at level {lv['level']}" for lv in facts["levels"])


@one_result_each
def update_labels(r: dict) -> dict[str, str]:
    q, s, changed = r["quality"], r["seconds"], r["changed_vs_base"]
    rows = []
    for key, name, seconds, variant in RUNS:
        row, moved = q[key], changed.get(key)
        share = f" ({100 * s[seconds] / s['retrain']:.0f} %)" if variant else ""
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
    out += (
        f"\n\n{r['data']}: {r['labels_removed']} labels removed from TRAIN and added back from "
        f"{u['documents_in_update_corpus']} documents; {u['clusters_changed']} leaf clusters gained labels "
        f"({u['clusters_added_by_splits']} clusters added by splits). Rankers retrained: `xtag update` "
        f"{_retrained(u)}; `--keep-clusters` {_retrained(r['update_kept'])}. 1-minute load before the update "
        f"{load['before_update']:.1f}, before the retrain {load['before_retrain']:.1f} (2 cores). "
        "Base top-5 dropped: the base run's top-5 predictions (old labels) a model no longer makes."
    )
    for key, name, _, variant in RUNS:
        if variant:
            goals = r["goals"][key]
            met = [f"{text}: {'met' if goals[g] else '**not met**'}" for g, text in GOALS]
            out += f"\n\nGoals, {name}: " + "; ".join(met) + "."
    return {"table": out}
