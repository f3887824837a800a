"""LaMP's cross-fitting folds on a local Ray cluster against the local run (issue 40)."""

from __future__ import annotations

from .common import f1, f2, one_result_each, table

RANKED = ("P@1", "P@3", "P@5", "PSP@5", "macro-F1@5")


@one_result_each
def lamp_ray(r: dict) -> dict[str, str]:
    rows = []
    for name, run in r["runs"].items():
        where = "on Ray (2 processes)" if name == "ray" else "one after the other, here"
        folds = " / ".join(f"{s:.0f}" for s in run["fold_task_s"])
        load = " → ".join(f"{x:.1f}" for x in run["load_average"])
        q = run["quality"]
        rows.append(
            [f"folds {where}", f1(run["folds_wall_s"]), folds, f1(run["train_s"]), *(f2(q[m]) for m in RANKED), load]
        )
    header = [
        "LaMP (cross_fit=5)",
        "folds' wall s",
        "fold s, as they ended",
        "whole training s",
        *RANKED,
        "load average",
    ]
    same = sum(bool(v) for v in r["candidates_identical"].values())
    notes = (
        f"Cluster: {r['cluster']}. The {r['folds']} folds' candidates are identical in the two runs for {same} of "
        f"{r['folds']} folds; {r['texts']:,} training texts, {r['test_docs']:,} test texts; the XR-Linear first "
        f"stage trained in {r['first_stage_train_s']:.0f} s. 'fold s' is each fold's own time (in its Ray task "
        f"for the Ray run); 'folds' wall s' the whole cross-fitting step as the driver saw it."
    )
    return {"folds": table(header, "l" + "r" * (len(header) - 1), rows) + "\n\n" + notes}
