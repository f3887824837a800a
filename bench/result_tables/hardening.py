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
    if "code" in r:
        head += f"; served by {r['code']}"
    header = ["request", "status", "body bytes", "server CPU s", "wall s", "answer bytes", "RSS growth MB"]
    return {"table": head + "\n\n" + table(header, "lrrrrrr", rows)}


@one_result_each
def request_cost(r: dict) -> dict[str, str]:
    """bench/request_cost.py: each profile's coefficients (CPU ms and memory MB per unit of work), and every
    measured request's CPU and memory against the estimate, with whether the default limits admit it."""
    profiles = r["profiles"]
    names = list(profiles)
    header = ["work count", *(f"{n} CPU ms" for n in names), *(f"{n} MB" for n in names)]
    rows = [
        [feature, *(f"{profiles[n]['coefficients'][i]:.3g}" for n in names),
         *(f"{profiles[n]['memory'][i]:.3g}" for n in names)]
        for i, feature in enumerate(r["features"])
    ]  # fmt: skip
    worst = ", ".join(
        f"{n} {p['worst_measured_over_estimate']:.2f} (raised {p['cpu_raised_by']:.2f}x; memory {p['memory_raised_by']:.2f}x)"
        for n, p in profiles.items()
    )
    head = (
        f"Worst measured / estimated CPU over the requests of {r.get('floor_ms', 10):g} ms or more, per profile "
        f"(at most 2 by construction: the fit is raised until it holds): {worst}. Answer bytes per explained label "
        + ", ".join(f"{n} {p['explained_bytes'][0]} + {p['explained_bytes'][1]} per level" for n, p in profiles.items())
    )

    def request(p: dict) -> str:
        flags = [f for f in ("explain", "reweight", "optimize", "annif") if p[f]]
        beam = f", beam {p['beam']}" if p["beam"] else ""
        text = f"{p['documents']} x {thousands(p['chars'])} chars, k {p['k']}{beam}" + "".join(f", {f}" for f in flags)
        return f"**{text}** (issue 47)" if p.get("issue") else text

    points = sorted(r["points"], key=lambda p: (p["bundle"], not p.get("issue"), -p["cpu_ms"]))
    limits = r.get("limits", {})
    prows = [
        [
            p["bundle"],
            request(p),
            f"{p['cpu_ms']:,.1f}",
            f"{p['estimate_ms']:,.1f}",
            f"{p['cpu_ms'] / max(p['estimate_ms'], 1e-9):.2f}",
            f"{p['memory_mb']:.1f}",
            f"{p['estimate_mb']:.1f}",
            thousands(p["bytes"]),
            "yes" if p.get("admitted") else "413",
        ]
        for p in points
    ]
    pheader = ["bundle", "request", "CPU ms", "estimate ms", "CPU / estimate", "peak MB", "estimate MB", "answer bytes",
               f"admitted ({limits.get('cost', 1000):g} ms, {limits.get('memory_mb', 100):g} MB, 8 MiB)"]  # fmt: skip
    return {
        "table": head + "\n\n" + table(header, "l" + "r" * (len(header) - 1), rows),
        "points": table(pheader, "llrrrrrrr", prows),
    }


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


@one_result_each
def loop_stalls(r: dict) -> dict[str, str]:
    """bench/loop_stalls.py: /health while each heavy phase ran, and the plain paths' speed, per server code."""
    rows = []
    for code, run in r.items():
        for phase, p in run.items():
            if isinstance(p, dict):
                took = " / ".join(f"{x / 1e3:.1f}" for x in p["request_ms"])
                rows.append([code, phase, f2(p["health_max_ms"]), f2(p["health_p99_ms"]), thousands(p["health_polls"]),
                             took, f2(run.get("predict_p50_ms")), thousands(run.get("batch_docs_per_s"))])  # fmt: skip
    header = ["server code", "phase", "/health max ms", "p99 ms", "polls", "request s (each round)",
              "/v1/predict p50 ms", "batch docs/s"]  # fmt: skip
    return {"table": table(header, "llrrrrrr", rows)}
