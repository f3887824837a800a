"""LaMP re-ranking tables: first stage alone vs first stage + LaMP (ranking and set metrics, added latency)."""

from __future__ import annotations

from .common import f2, ms, one_result_each, signed, table

RANKED = ("P@1", "P@3", "P@5", "PSP@5", "macro-F1@5")
SETS = ("set example-F1", "set micro-F1", "set macro-F1")


@one_result_each
def lamp_debtags(r: dict) -> dict[str, str]:
    first, lamp, lat = r["first_stage"], r["lamp"], r["latency"]
    cand, setup = r["lamp_training"]["candidates"], r["lamp_training"]["setup"]
    first_name = {"xr-transformer": "XR-Transformer"}.get(r.get("first_stage_model"), "XR-Linear")
    name = f"{first_name} + LaMP_{setup['graph']} (C = {cand['candidates']})"
    rows = [
        [f"{first_name} (first stage alone)", *(f2(first[m]) for m in RANKED + SETS), f"{first['threshold']:g}", ""],
        [name, *(f2(lamp[m]) for m in RANKED + SETS), f"{lamp['threshold']:g}", ms(lat["added_p50_ms"])],
        ["change", *(signed(lamp[m] - first[m]) for m in RANKED + SETS), "", ""],
    ]
    header = ["model", *RANKED, "example-F1", "micro-F1", "macro-F1", "threshold", "added p50 ms"]
    quality = table(header, "l" + "r" * (len(header) - 1), rows)
    split, folds = r["split"], cand.get("cross_fit_folds", 0)
    if folds:
        fold_s = sum(e["seconds"] for e in r["lamp_training"]["cross_fit_folds"])
        corpus = (
            f"Training split cut by a seeded shuffle: the first stage and LaMP both train on the same "
            f"{split['lamp_docs']:,} texts, LaMP on out-of-fold candidates (`lamp.cross_fit={folds}`: {folds} "
            f"first-stage copies, {fold_s:.0f} s in all), threshold validation {split['val_docs']:,}; test "
            f"{split['test_docs']:,}."
        )
    else:
        corpus = (
            f"Training split cut by a seeded shuffle: first stage {split['first_stage_docs']:,} texts, LaMP "
            f"{split['lamp_docs']:,} (unseen by the first stage), threshold validation {split['val_docs']:,}; test "
            f"{split['test_docs']:,}."
        )
    notes = (
        f"{corpus} Teacher forcing added {cand['teacher_forced']:,} of {cand['positives']:,} "
        f"true labels (first-stage recall@{cand['candidates']} on the LaMP texts {cand['first_stage_recall']:.3f}). "
        f"/v1/predict p50 (k = 5, {lat['texts']} test texts, one in-thread server): {ms(lat['rerank_p50_ms'])} ms "
        f'with LaMP, {ms(lat["first_stage_p50_ms"])} ms with `"rerank": false`.'
    )
    return {"quality": quality + "\n\n" + notes}


BETTER = ("P@1", "PSP@5", "macro-F1@5")


@one_result_each
def lamp_better(r: dict) -> dict[str, str]:
    """One row per LaMP variant (one setting changed from today's), validation and TEST side by side."""
    today = r["variants"].get("today")
    first = r["first_stage"]
    rows = [["XR-Linear (first stage alone)", "", *(f2(first[s][m]) for s in ("val", "test") for m in BETTER), "", ""]]
    for name, v in r["variants"].items():
        change = ", ".join(f"{k}={x}" for k, x in v["change"].items()) or "today's LaMP"
        delta = signed(v["test"]["P@1"] - today["test"]["P@1"]) if today and name != "today" else ""
        cells = [f2(v[s][m]) for s in ("val", "test") for m in BETTER]
        rows.append([f"LaMP {name}", change, *cells, delta, f"{v['lamp_train_s']:.0f}"])
    header = ["model", "change", *(f"val {m}" for m in BETTER), *(f"test {m}" for m in BETTER)]
    header += ["test P@1 vs today", "LaMP train s"]
    split = r["split"]
    notes = (
        f"XR-Linear and LaMP train on the same {split['train_docs']:,} texts (LaMP on 5-fold out-of-fold "
        f"candidates); validation {split['val_docs']:,} texts carved from TRAIN (which picks), test "
        f"{split['test_docs']:,}. Today's LaMP: "
        + ", ".join(f"{k}={x}" for k, x in r["today"].items())
        + ". Metric convention: xmc."
    )
    out = {"variants": table(header, "ll" + "r" * (len(header) - 2), rows) + "\n\n" + notes}
    if r.get("first_stage_recall_test"):
        recall_rows = [
            [name, f2(v["recall"]), f2(v["texts_with_a_true_label"]), f"{v['mean_candidates']:.1f}"]
            for name, v in r["first_stage_recall_test"].items()
        ]
        head = ["first stage's top-C on TEST", "recall (% of true labels)", "texts with a true label (%)", "mean C"]
        out["recall"] = table(head, "lrrr", recall_rows)
    return out


@one_result_each
def lamp_fast(r: dict) -> dict[str, str]:
    """One row per change (bench/lamp_fast.py), then each goal against the best row and how far it is missed."""
    header = ["row", "P@1", "PSP@5", "macro-F1@5", "added p50 ms, in-process", "/v1/predict p50 ms", "batch docs/s"]
    rows = []
    for name, row in r["rows"].items():
        added = (row.get("in_process") or {}).get("added_p50_ms")
        rows.append(
            [
                name,
                *(f2(row[m]) for m in ("P@1", "PSP@5", "macro-F1@5")),
                "" if added is None else ms(added),
                ms(row["http_p50_ms"]),
                f"{row['batch_docs_per_s']:,.0f}",
            ]
        )
    quality = table(header, "l" + "r" * (len(header) - 1), rows)
    lamp_rows = {n: row for n, row in r["rows"].items() if n != "first stage alone"}
    goals = []
    for key, goal in r["goals"].items():
        lower_is_better = key == "http_p50_ms"
        best_name, best = (min if lower_is_better else max)(lamp_rows.items(), key=lambda item: item[1][key])
        met = best[key] <= goal if lower_is_better else best[key] >= goal
        gap = "met" if met else f"missed by {abs(best[key] - goal):,.2f}"
        goals.append(f"{key} goal {goal:g}: best LaMP row {best[key]:,.2f} ({best_name}), {gap}")
    notes = (
        f"{r['test_docs']:,} test texts; batch requests of {r['batch']} documents. {r['note']}".strip()
        + "\n\n"
        + "\n".join(f"- {g}" for g in goals)
    )
    return {"quality": quality + "\n\n" + notes}


@one_result_each
def lamp_candidates(r: dict) -> dict[str, str]:
    """bench/lamp_candidates.py: the bundle at each C, on validation (where C is chosen) and on TEST."""
    header = ["C", "validation P@1", "validation PSP@5", "TEST P@1", "TEST P@5", "TEST PSP@5", "docs/s, in-process"]
    val, test = r["rows"]["validation"], r["rows"]["test"]
    rows = [
        [
            C
            + (" (trained)" if int(C) == r["trained_candidates"] else "")
            + (" **chosen**" if int(C) == r["chosen"] else ""),
            f2(val[C]["P@1"]),
            f2(val[C]["PSP@5"]),
            *(f2(test[C][m]) for m in ("P@1", "P@5", "PSP@5")),
            f"{test[C]['docs_per_s']:,.0f}",
        ]
        for C in sorted(test, key=int)
    ]
    tol = r["tolerances"]
    rule = (
        f"bundle {r['bundle']}; chosen: the smallest C whose validation P@1 and PSP@5 are within {tol['P@1']:g} and "
        f"{tol['PSP@5']:g} points of C = {r['trained_candidates']}'s"
    )
    return {"table": rule + "\n\n" + table(header, "l" + "r" * (len(header) - 1), rows)}
