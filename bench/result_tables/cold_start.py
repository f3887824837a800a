"""Cold start tables (issue 28): first train and first serve after install, with and without `xtag warm`."""

from __future__ import annotations

from statistics import median

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


def _median(samples: list[dict], key: str):
    values = [s[key] for s in samples if s.get(key) is not None]
    return median(values) if values else None


def _spread(samples: list[dict], key: str, fmt) -> str:
    """Median, with the range over rounds when there are several."""
    values = [s[key] for s in samples if s.get(key) is not None]
    if not values:
        return ""
    text = fmt(median(values))
    return text + (f" ({fmt(min(values))}–{fmt(max(values))})" if len(values) > 1 else "")


def _added(samples: list[dict]) -> str:
    values = [s["cache_files_added"] for s in samples if "cache_files_added" in s]
    return "/".join(str(v) for v in values)


@one_result_each
def cold_start(r: dict) -> dict[str, str]:
    rounds = r["rounds"]
    n = len(rounds["cold_train"])
    cpu = "cpu_s" in rounds["cold_train"][0]  # recorded since the debdeps runs
    rows = [
        [label, _spread(rounds[key], "wall_s", f1)]
        + ([_spread(rounds[key], "cpu_s", f1)] if cpu else [])
        + [_spread(rounds[key], "model_s", f1), _added(rounds[key])]
        for key, label in TRAIN_STEPS
    ]

    def ratio(step: str, key: str) -> str:
        return f"{_median(rounds[step], key) / _median(rounds['warm_train'], key):.2f}×"

    out = {
        "train": table(
            [f"{r['corpus']}: step", "process s"]
            + (["process CPU s"] if cpu else [])
            + ["model s", "numba cache files added, per round"],
            "lrr" + ("r" if cpu else "") + "r",
            rows,
        )
        + f"\n\nMedians over {n} rounds (range in brackets). First train after `xtag warm` / warm train: "
        f"**{ratio('first_train', 'wall_s')}** (process)"
        + (f", **{ratio('first_train', 'cpu_s')}** (process CPU)" if cpu else "")
        + f", {ratio('first_train', 'model_s')} (model time); without `xtag warm`: {ratio('cold_train', 'wall_s')}"
        + (f" (process), {ratio('cold_train', 'cpu_s')} (process CPU)" if cpu else " (process)")
        + f", {ratio('cold_train', 'model_s')} (model). Stand-in for a fresh install: "
        f"{r['stand_in_for_fresh_install']}."
    }
    if "first_serve" in rounds:
        out["serve"] = table(
            ["", "ready s", "bundle warm-up ms", "numba cache files added, per round"],
            "lrrr",
            [
                [label, _spread(rounds[key], "ready_s", f2), _spread(rounds[key], "warmup_ms", f1), _added(rounds[key])]
                for key, label in SERVE_STEPS
            ],
        )
    return out


@one_result_each
def fresh_install(r: dict) -> dict[str, str]:
    """bench/fresh_install.py: a real fresh venv's first and second train and serve, and PECOS's training."""
    steps = (
        ("warm", "`xtag warm` (what scripts/setup.sh runs after the install)"),
        ("first_train", "first `xtag train`"),
        ("second_train", "second `xtag train`"),
    )
    rows = [
        [label, f1(r[key]["wall_s"]), f1(r[key]["cpu_s"])]
        + [f1(r[key][k]) if k in r[key] else "" for k in ("model_s", "rankers_s")]
        + [str(r[key]["kernel_files_added"])]
        for key, label in steps
    ]
    rows.append(["PECOS training (same TF-IDF matrices)", "", "", "", f1(r["pecos_train_s"]), ""])
    rows += [
        [
            f"{which} `xtag serve`, until `/ready` answers 200",
            f2(r[key]["ready_s"]),
            "",
            "",
            "",
            str(r[key]["kernel_files_added"]),
        ]
        for key, which in (("first_serve", "first"), ("second_serve", "second"))
    ]
    header = ["step", "process s", "process CPU s", "model s", "PIFA + tree + rankers s", "kernel files compiled"]
    head = (
        f"{r['corpus']}: a venv made from {r['python']}, `pip install .` {f1(r['install']['pip_install_s'])} s; "
        f"every step after the install as {r['user']}"
    )
    ratios = "; ".join(f"{name}: **{f2(value)}×**" for name, value in r["ratios"].items())
    return {"table": head + "\n\n" + table(header, "lrrrrr", rows) + "\n\n" + ratios + "."}
