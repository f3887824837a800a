"""Rollout policy table (issue 50): a healthy canary promoted on its own, a slow and a failing one rolled back."""

from __future__ import annotations

from .common import ms, one_result_each, table


@one_result_each
def rollout_gates(r: dict) -> dict[str, str]:
    """bench/rollout_gates.py: three rollouts one after the other under keep-alive clients, one server."""
    head = (
        f"{r['bundle']}, four versions of it (3 made {r['slow_ms']:g} ms slow and 4 made to raise by the bench, not "
        f"the product); {r['clients']} keep-alive clients on /v1/models/debtags/predict throughout ({r['answers']:,} "
        f"answers); steps 5 → 25 → 50 → 100 %, {r['interval_s']:g} s each, gates over {r['window_s']:g} s "
        f"(min_requests {r['min_requests']}, p99 ≤ 1.5 × stable + 5 ms, 5xx ≤ stable + 1 point)"
    )
    rows = []
    for run in r["runs"]:
        reached = (
            100 if run["final_state"] == "promoted" else max((s["canary_percent"] for s in run["steps"]), default=0)
        )
        after = run.get("rollback_after_first_canary_answer_s")
        rows.append(
            [
                f"{run['version']} ({run['fault'] or 'healthy'})",
                run["final_state"],
                f"{reached} %",
                f"{run['duration_s']:.1f}",
                "" if after is None else f"{after:.2f}",
                f"{run['requests']:,}",
                f"{run['canary_requests']:,}",
                str(run["failed_requests"]),
                str(run["injected_5xx"]),
                ms(run["stable_p99_ms"]),
                ms(run["canary_p99_ms"]),
                run["reason"] or "",
            ]
        )
    header = [
        "canary",
        "ended",
        "highest step",
        "s",
        "rollback after its first answer, s",
        "requests",
        "canary's",
        "failed",
        "injected 5xx",
        "stable p99 ms",
        "canary p99 ms",
        "reason",
    ]
    verdict = "every goal met" if not r["misses"] else "missed: " + "; ".join(r["misses"])
    return {"table": "\n\n".join((head, table(header, "llrrrrrrrrrl", rows), verdict))}
