"""Hardening tables (issue 38): what one request may cost, what the service's guards cost, feedback writers."""

from __future__ import annotations

from .common import f2, ms, one_result_each, table, thousands


@one_result_each
def amplification(r: dict) -> dict[str, str]:
    """bench/amplification.py: one request's status, server CPU, answer size and RSS growth, per case."""
    rows = [
        [
            name,
            str(c["status"]),
            thousands(c["body_bytes"]),
            f2(c["server_cpu_s"]),
            f2(c["wall_s"]),
            thousands(c["response_bytes"]),
            f"{c['rss_growth_mb']:.1f}",
        ]
        for name, c in r["cases"].items()
    ]
    head = f"{r['documents']} documents in the amplification batch; bundle {r['bundle']}"
    header = ["request", "status", "body bytes", "server CPU s", "wall s", "answer bytes", "RSS growth MB"]
    return {"table": head + "\n\n" + table(header, "lrrrrrr", rows)}


@one_result_each
def request_cost(r: dict) -> dict[str, str]:
    """bench/request_cost.py: the cost model's coefficients (CPU ms per unit of work) and how well it tracks CPU."""
    rows = [[name, f"{c:.3g}"] for name, c in zip(r["features"], r["coefficients"])]
    low, high = r["ratio"], r["ratio_50ms_up"]
    fit = (
        f"{len(r['points'])} requests measured; estimate / measured CPU: {low['min']:.2f}-{low['max']:.2f} over all,"
        f" {high['min']:.2f}-{high['max']:.2f} over the requests of 50 ms or more; answer bytes per explained label"
        f" {r['explained_bytes'][0]:.0f} + {r['explained_bytes'][1]:.0f} per level"
    )
    return {"table": fit + "\n\n" + table(["work count", "CPU ms per unit"], "lr", rows)}


@one_result_each
def guard_cost(r: dict) -> dict[str, str]:
    """bench/guard_cost.py: /v1/predict p50 and batch docs/s, this code against --before-code's, rounds interleaved."""
    rows = [
        [name, ms(m["p50_ms"]), ms(m["p99_ms"]), thousands(m["batch_docs_per_s"])] for name, m in r["median"].items()
    ]
    ratio = r["after_over_before"]
    rows.append(
        ["after / before", f"{ratio['p50_ms']:.3f}", f"{ratio['p99_ms']:.3f}", f"{ratio['batch_docs_per_s']:.3f}"]
    )
    head = (
        f"{r['bundle']}, k={r['k']}; medians over {r['rounds']} rounds; per round {r['requests_per_round']} single-text requests"
        f" (one keep-alive client) and {r['batches_per_round']} batches of {r['batch']} texts (one client)"
    )
    return {"table": head + "\n\n" + table(["", "p50 ms", "p99 ms", "batch docs/s"], "lrrr", rows)}
