"""XR-Linear trained as Ray tasks against the local trainer (bench/ray_xlinear.py, issue 40)."""

from __future__ import annotations

from .common import f1, one_result_each, table, thousands

RUNS = (
    ("local", "local (`train_xlinear`, 2 threads)"),
    ("ray", "Ray, 2 one-CPU worker processes"),
    ("killed", "Ray, a sub-tree task's worker killed mid-task"),
)


def _accuracy(run: dict, local: dict) -> str:
    if run.get("identical_to_local"):
        return f"{local['P@1']:.2f} / {local['P@5']:.2f}" + ("" if run is local else " (identical arrays)")
    return f"{run['P@1']:.2f} / {run['P@5']:.2f} (arrays differ)"


def _gathered(run: dict, local: dict) -> str:
    """The same driver's peak once it also held the whole model (as it did before it streamed the levels)."""
    if "gathered_peak_rss_mb" not in run:
        return ""
    return f"{thousands(run['gathered_peak_rss_mb'])} ({run['gathered_peak_rss_mb'] / local['peak_rss_mb']:.0%})"


def _private(run: dict, local: dict) -> str:
    """The driver's peak without the object store's shared pages (sampled; results before it was sampled: blank)."""
    if "peak_private_mb" not in run:
        return ""
    return f"{thousands(run['peak_private_mb'])} ({run['peak_private_mb'] / local['peak_rss_mb']:.0%})"


@one_result_each
def ray_xlinear(r: dict) -> dict[str, str]:
    runs, local = r["runs"], r["runs"]["local"]
    shape = r["shape"]
    head = (
        f"{thousands(shape['documents'])} documents, {thousands(shape['features'])} features, "
        f"{thousands(shape['labels'])} labels; X and Y in the object store: {f1(r['object_store_mb'])} MB; "
        f"rankers saved: {f1(r['rankers_mb'])} MB."
    )
    rows = []
    for key, name in RUNS:
        if key not in runs:
            continue
        run = runs[key]
        workers = ", ".join(thousands(m) for m in run.get("worker_peak_rss_mb", [])) or "(in the process)"
        ratio = f"{run['peak_rss_mb'] / local['peak_rss_mb']:.0%}"
        subs = (
            f"{run['subtrees']} of {min(run['labels_per_subtree']):,}-{max(run['labels_per_subtree']):,}"
            if "subtrees" in run
            else ""
        )
        rows.append(
            [
                name,
                f1(run["seconds"]),
                f"{run['seconds'] / local['seconds']:.2f}",
                thousands(run["peak_rss_mb"]),
                ratio,
                _private(run, local),
                _gathered(run, local),
                workers,
                subs,
                _accuracy(run, local),
            ]
        )
    header = [
        "run",
        "train s",
        "× local",
        "driver peak RSS MB",
        "of local",
        "private (no store pages) MB, of local",
        "had it gathered the rankers",
        "worker peaks MB",
        "sub-trees (labels)",
        "P@1 / P@5",
    ]
    return {"table": head + "\n\n" + table(header, "lrrrrrrrll", rows)}
