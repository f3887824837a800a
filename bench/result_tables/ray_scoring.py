"""Batch scoring on Ray (issue 40): the local command against 1 and 2 actors on the same 2 cores."""

from __future__ import annotations

from .common import f1, f2, one_result_each, table, thousands

RUNS = (
    ("local", "`xtag predict --corpus` (one process, 2 engine threads)"),
    ("ray_1_node", "`--ray`: 1 node of 2 CPUs (2 actors of 1 thread)"),
    ("ray_2_workers", "`--ray`: 2 nodes of 1 CPU (2 actors of 1 thread)"),
)


def _equal(run: dict) -> str:
    eq = run.get("equal_to_local")
    if eq is None:
        return "(reference)"
    return f"{thousands(eq['same_top10'])} / {thousands(eq['texts'])} ({thousands(eq['same_line'])} identical lines)"


def _cpu_ratio(run: dict, local: dict) -> str:
    """CPU seconds of the whole run (driver and actors) over the local command's: the overhead a load cannot hide."""
    if "driver_cpu_s" not in run:
        return ""  # results recorded before CPU time was
    return f"{f2((run['driver_cpu_s'] + run.get('actors_cpu_s', 0)) / local['driver_cpu_s'])}×"


@one_result_each
def ray_scoring(r: dict) -> dict[str, str]:
    runs = r["runs"]
    rows = [
        [
            label,
            f1(runs[key]["seconds"]),
            thousands(runs[key]["docs_per_s"]),
            f"{f2(runs[key]['time_vs_local'])}×",
            f1(runs[key].get("driver_cpu_s")),
            f1(runs[key].get("actors_cpu_s")) if key != "local" else "",
            _cpu_ratio(runs[key], runs["local"]),
            thousands(runs[key]["driver_peak_rss_mb"]),
            ", ".join(thousands(mb) for mb, _ in runs[key]["actor_peak_rss_mb"]) or "",
            _equal(runs[key]),
        ]
        for key, label in RUNS
    ]
    header = ["run", "s", "docs/s", "time / local", "driver CPU s", "actors' CPU s", "CPU / local"]
    header += ["driver peak RSS MB", "actors' peak RSS MB", "same top-10 as local"]
    head = (
        f"{r['corpus']} ({r['files']} gzipped files, shards of {thousands(r['shard_rows'])} lines), "
        f"bundle {r['bundle']}, k = 10"
    )
    return {"table": head + "\n\n" + table(header, "lrrrrrrrrl", rows)}
