"""Cold start tables (issue 28): first train and first serve after install, with and without `xtag warm`."""

from __future__ import annotations

from .common import f1, f2, one_result_each, table

TRAIN_STEPS = (
    ("cold_train", "first `xtag train`, empty cache (no `xtag warm`: before issue 28)"),
    ("warm_step", "`xtag warm` (scripts/setup.sh, the Dockerfiles)"),
    ("first_train", "first `xtag train` after `xtag warm`"),
    ("warm_train", "second `xtag train` (warm)"),
)
SERVE_STEPS = (
    ("cold_serve", "first `xtag serve`, empty cache (before issue 28)"),
    ("first_serve", "first `xtag serve` after `xtag warm`"),
    ("warm_serve", "second `xtag serve` (warm)"),
)


@one_result_each
def cold_start(r: dict) -> dict[str, str]:
    rows = []
    for key, label in TRAIN_STEPS:
        step = r[key]
        added = step.get("cache_files_added")
        rows.append([label, f1(step["wall_s"]), f1(step.get("model_s")), "" if added is None else str(added)])
    first, warm, cold = r["first_train"], r["warm_train"], r["cold_train"]
    out = {
        "train": table(
            [f"{r['corpus']}: step", "process s", "model s", "numba cache files added"],
            "lrrr",
            rows,
        )
        + f"\n\nFirst train after `xtag warm` / warm train: **{first['wall_s'] / warm['wall_s']:.2f}×** "
        f"(process), {first['model_s'] / warm['model_s']:.2f}× (model time); without `xtag warm`: "
        f"{cold['wall_s'] / warm['wall_s']:.2f}× (process), {cold['model_s'] / warm['model_s']:.2f}× (model)."
        f" Stand-in for a fresh install: {r['stand_in_for_fresh_install']}."
    }
    if "first_serve" in r:
        out["serve"] = table(
            ["", "ready s", "bundle warm-up ms", "numba cache files added"],
            "lrrr",
            [
                [label, f2(r[key]["ready_s"]), f1(r[key]["warmup_ms"]), str(r[key]["cache_files_added"])]
                for key, label in SERVE_STEPS
            ],
        )
    return out
