"""LaMP's cross-fitting folds on a local Ray cluster against the local run (issue 40): the whole LaMP training, or
the folds alone (--folds-only: the candidates' P@1 and recall instead of LaMP's)."""

from __future__ import annotations

from .common import f1, f2, one_result_each, table

RANKED = ("P@1", "P@3", "P@5", "PSP@5", "macro-F1@5")
CANDIDATES = ("candidates_P@1", "candidates_recall@50")


def _row(name: str, run: dict) -> list[str]:
    where = "on Ray (2 processes)" if name == "ray" else "one after the other, here"
    folds = " / ".join(f"{s:.0f}" for s in run["fold_task_s"])
    load = " → ".join(f"{x:.1f}" for x in run["load_average"])
    cells = [f"folds {where}", f1(run["folds_wall_s"]), folds]
    if "quality" in run:
        return [*cells, f1(run["train_s"]), *(f2(run["quality"][m]) for m in RANKED), load]
    return [*cells, *(f2(run[m]) for m in CANDIDATES), load]


@one_result_each
def lamp_ray(r: dict) -> dict[str, str]:
    rows = [_row(name, run) for name, run in r["runs"].items()]
    whole = "quality" in r["runs"]["local"]
    measured = ["whole training s", *RANKED] if whole else ["out-of-fold P@1", "out-of-fold recall@50"]
    header = ["LaMP (cross_fit=5)", "folds' wall s", "fold s, as they ended", *measured, "load average"]
    same = sum(bool(v) for v in r["candidates_identical"].values())
    notes = (
        f"Cluster: {r['cluster']}. The folds' candidates are identical in the two runs for {same} of "
        f"{r['folds']} folds; {r['texts']:,} training texts"
        + (f", {r['test_docs']:,} test texts" if whole else " (the out-of-fold columns score them)")
        + f"; the XR-Linear first stage trained in {r['first_stage_train_s']:.0f} s. 'fold s' is each fold's own "
        "time (in its Ray task for the Ray run); 'folds' wall s' the whole cross-fitting step as the driver saw it."
    )
    return {"folds": table(header, "l" + "r" * (len(header) - 1), rows) + "\n\n" + notes}
