"""Rollout tables (issue 50). bench/rollout_traffic.py: a canary ramp and a rollback under keep-alive clients
(shares, sticky keys, failed requests), and the hot path's cost with no rollout configured against main's code.
bench/rollout_gates.py: rollout policies that promote a healthy canary and roll a slow and a failing one back."""

from __future__ import annotations

from .common import ms, one_result_each, table, thousands


@one_result_each
def rollout_traffic(r: dict) -> dict[str, str]:
    """Two tables: each weight setting of the ramp; /v1/predict p50 and batch with no rollout, this code / main's."""
    return {"ramp": _ramp(r), "no_rollout": _no_rollout(r)}


def _ramp(r: dict) -> str:
    ramp = r["ramp"]
    rows = []
    for s in ramp["steps"]:
        weights = " / ".join(f"{w}" for w in s["weights"].values())
        shares = " / ".join("–" if v is None else f"{v:.2f}" for v in s["share_percent"].values())
        gap = "–" if s["max_share_gap_points"] is None else f"{s['max_share_gap_points']:.2f}"
        keys = "–" if s["keys_on_one_version_percent"] is None else f"{s['keys_on_one_version_percent']:.2f}"
        rows.append(
            [s["step"], weights, thousands(s["requests"]), shares, gap, thousands(s["keyed_requests"]), str(s["keys"]),
             keys, f"{s['admin_call_ms']:.1f}"]
        )  # fmt: skip
    head = (
        f"{r['clients']} keep-alive clients on `/v1/predict` of model `tags` (version 1 = {r['v1']}, version 2 = "
        f"{r['v2']}), half of them with an `X-Routing-Key` of {r['keys']}; {thousands(ramp['requests'])} requests, "
        f"**{ramp['failed']} failed**, p50 {ms(ramp['p50_ms'])} ms, p99 {ms(ramp['p99_ms'])} ms. Per setting: the "
        "requests sent and answered wholly within it."
    )
    header = ["setting", "weights v1 / v2 %", "requests", "share v1 / v2 %", "max gap, points", "keyed requests",
              "keys", "keys on one version %", "admin call ms"]  # fmt: skip
    return head + "\n\n" + table(header, "llrrrrrrr", rows)


def _no_rollout(r: dict) -> str:
    n = r["no_rollout"]
    names = {"before": "main's code (session start)", "this": "this code"}
    rows = [
        [names[key], thousands(n[key]["requests"]), ms(n[key]["p50_ms"]), ms(n[key]["p90_ms"]),
         thousands(n[key]["batch_docs_per_s"])]
        for key in names if key in n
    ]  # fmt: skip
    if "this_over_before" in n:
        q = n["this_over_before"]
        rows.append(["this / main's", "", f"{q['p50']:.3f}", "", f"{q['batch']:.3f}"])
    head = f"{r['v1']} alone, no rollout configured, the two servers taking turns request by request"
    return head + "\n\n" + table(["server", "requests", "p50 ms", "p90 ms", "batch docs/s (64 texts)"], "lrrrr", rows)


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
