"""Service tables: latency of one request, inlined vs worker-thread predicts, closed-loop load with reloads."""

from __future__ import annotations

import re

from .common import bold, convention, convention_line, f0, f1, f2, get, ms, one_result_each, signed, table, thousands


@one_result_each
def service_latency(r: dict) -> dict[str, str]:
    out = {}
    lat = r["latency"]
    rows = []
    first = next(iter(lat.values()))
    rows.append(
        [
            "in-process `Predictor.predict` (one text, TF-IDF included)",
            ms(get(first, "in_process_ms", "p50")),
            ms(get(first, "in_process_ms", "p99")),
            "",
        ]
    )
    for batching, figures in lat.items():
        label = "micro-batching on (default)" if batching == "on" else f"micro-batching {batching}"
        for key in sorted(
            (k for k in figures if re.fullmatch(r"http_\d+_clients?_ms", k)), key=lambda k: int(k.split("_")[1])
        ):
            n = int(key.split("_")[1])
            qps = get(figures, key, "qps")
            rows.append(
                [
                    f"HTTP, {n} client{'s' if n > 1 else ''}, {label if n == 1 else label.split(' (')[0]}",
                    ms(get(figures, key, "p50")),
                    ms(get(figures, key, "p99")),
                    f"{qps:,.0f} req/s" if qps is not None else "",
                ]
            )
    out["latency"] = table(["", "p50 ms", "p99 ms", "throughput"], "lrrr", rows)
    rw = r.get("reweighting")
    if rw:
        cells: dict[str, dict[float, dict]] = {}
        for key, value in rw["table"].items():
            scheme, alpha = key.rsplit("@", 1)
            cells.setdefault(scheme, {})[float(alpha)] = value
        alphas = sorted({a for row in cells.values() for a in row})
        names = {"power": "power (β=0.5)"}  # the default β of models/inference/reweighting.py, which the service uses
        out["reweighting"] = table(
            ["scheme"] + [f"α={a:g}" if i == 0 else f"{a:g}" for i, a in enumerate(alphas)],
            "l" * (1 + len(alphas)),
            [
                [names.get(s, s)]
                + [f"{row[a]['P@5']:.2f} / {row[a]['macro-R@5']:.2f}" if a in row else "" for a in alphas]
                for s, row in cells.items()
            ],
        )
        out["reweighting"] += "\n\n" + convention_line([convention(rw, r)])
    return out


@one_result_each
def inline_vs_worker(r: dict) -> dict[str, str]:
    out = {}
    out["lone_client"] = table(
        [
            "repeat",
            "in-process predict p50 ms",
            "`/v1/predict` inlined p50 ms",
            "via the worker p50 ms",
            "inlined − worker ms",
        ],
        "rrrrr",
        [
            [
                str(i),
                f2(x.get("predict")),
                f2(x.get("http_inline")),
                f2(x.get("http_worker")),
                signed(x["inline_minus_worker_ms"]),
            ]
            for i, x in enumerate(r.get("lone_client", []), 1)
        ],
    )
    rows = []
    for key, runs in r.items():
        m = re.fullmatch(r"clients=(\d+) inline_max_texts=(\d+)", key)
        if m:
            rows.append(
                [
                    m[1],
                    m[2],
                    " / ".join(f2(x["p50_ms"]) for x in runs),
                    " / ".join(f1(x["req_per_s"]) for x in runs),
                    "; ".join(", ".join(f"{b}: {c}" for b, c in x.get("batch_sizes", {}).items()) for x in runs),
                ]
            )
    out["closed_loop"] = table(
        [
            "clients",
            "XTAG_INLINE_MAX_TEXTS",
            "p50 ms per run",
            "req/s per run",
            "predictor calls per batch size, per run",
        ],
        "rrrrl",
        rows,
    )
    return out


@one_result_each
def service_load(r: dict) -> dict[str, str]:
    """bench/service_load.py: closed-loop clients on /v1/predict; steady, during reloads, a flood of clients
    honouring Retry-After, a retry storm; then a client beside slow-body and slow-head connections."""
    names = {"steady": "steady", "reloads": "with reloads", "flood": "flood", "storm": "retry storm"}
    rows = []
    for key, name in names.items():
        p = r.get(key)
        if not p:
            continue
        refused = p["refused_503_429"]
        rows.append(
            [
                name,
                thousands(p["clients"]),
                f0(p["seconds"]),
                thousands(p["admitted_2xx"]),
                thousands(p["admitted_per_s"]),
                ms(p["admitted_ms"]["p50"]),
                ms(p["admitted_ms"]["p99"]),
                f2(p["admitted_ms"]["p99"] / p["admitted_ms"]["p50"]) if p["admitted_ms"]["p50"] else "",
                thousands(refused) + (f" (p50 {ms(p['refused_ms']['p50'])} ms)" if refused else ""),
                thousands(p["errors"]),
                f"{f0(p['server_rss_mib']['start'])} / {f0(p['server_rss_mib']['peak'])} / "
                f"{f0(p['server_rss_mib']['end'])}",
            ]
        )
    phases = table(
        [
            "phase",
            "clients",
            "s",
            "2xx",
            "2xx/s",
            "p50 ms",
            "p99 ms",
            "p99 / p50",
            "503/429 with Retry-After",
            "errors",
            "server RSS MiB start / peak / end",
        ],
        "lrrrrrrrrrl",
        rows,
    )
    reloads = get(r, "reloads", "reloads") or []
    facts = [
        ["reloads during the run", ", ".join(f"{x['status']} in {x['seconds']:.2f} s" for x in reloads) or "none"],
    ]
    if r.get("slow"):
        facts += slow_clients(r["slow"])
    facts.append(["checks", "; ".join(f"{what}: {'yes' if ok else 'NO'}" for what, ok in r.get("checks", {}).items())])
    label = f"{bold(r['label'])}\n\n" if r.get("label") else ""
    return {"table": label + phases + "\n\n" + table(["", ""], "ll", facts)}


def slow_clients(p: dict) -> list[list[str]]:
    """Rows for service_load's slow phase: the legitimate client, and how the slow connections ended."""

    def ended(c: dict) -> str:
        words = {"-1": "still open at the end", "0": "closed without an answer"}
        how = ", ".join(f"{thousands(n)} {words.get(code, code)}" for code, n in c["ended_by"].items())
        cut = (
            f"; ended after {c['cut_after_s']['p50']:.1f} s (max {c['cut_after_s']['max']:.1f})"
            if c["cut_after_s"]
            else ""
        )
        return f"{thousands(c['connections'])} connections: {how}{cut}"

    legit = p["legitimate"]
    statuses = ", ".join(f"{n} × {code}" for code, n in legit["status"].items())
    return [
        [
            f"beside {p['slow_bodies']} slow bodies and {p['slow_heads']} slow heads ({f0(p['seconds'])} s)",
            f"{statuses}; p50 {ms(legit['ms']['p50'])} ms, max {ms(legit['ms']['max'])} ms",
        ],
        ["slow-body connections", ended(p["slow_body_connections"])],
        ["slow-head connections", ended(p["slow_head_connections"])],
    ]


@one_result_each
def service_batch(r: dict) -> dict[str, str]:
    """/v1/predict/batch over HTTP against PECOS in-process with TF-IDF (service_latency.py --pecos), interleaved."""
    med, cpu = r["median_docs_per_s"], r["median_cpu_ms_per_1000_docs"]
    rows = []
    for key, value in med.items():
        cost = cpu.get(key, cpu.get(f"{key} (server)"))
        rows.append([key, thousands(value), thousands(cost) if cost is not None else ""])
    out = {"speed": table(["", "docs/s (median)", "CPU ms per 1,000 docs (median)"], "lrr", rows)}
    contenders = [k for k in med if k.startswith("http ")]
    peers = [k for k in med if k.startswith("pecos +")]
    out["rounds"] = table(
        ["round", "load (1 min)"] + [f"{a} / {b}" for a in contenders for b in peers],
        "r" * (2 + len(contenders) * len(peers)),
        [
            [str(i), f2(row["load_average"][0])] + [f2(row[a] / row[b]) for a in contenders for b in peers]
            for i, row in enumerate(r["rounds"], start=1)
        ]
        + [["median", ""] + [f2(r["median_ratios"][f"{a} / {b}"]) for a in contenders for b in peers]],
    )
    return out


@one_result_each
def explain_latency(r: dict) -> dict[str, str]:
    """`"explain"` on /v1/predict (issue 25): p50 off against the code before it, and on; paired per round."""
    names = {
        "before": "before explanations (start commit), plain request",
        "explain off": "this code, plain request (`explain` off)",
        "explain on": 'this code, `"explain": true`',
    }
    rows = [
        [names[n], ms(f["p50_ms"]), ms(f["p99_ms"]), ms(f.get("server_took_p50_ms")), thousands(f["response_bytes"])]
        for n, f in r["http"].items()
    ]
    for what, key in (("explain off − before", "off_minus_before_p50_ms"), ("explain on − off", "on_minus_off_p50_ms")):
        if key not in r:  # run without --before-code
            continue
        rows.append(
            [f"added p50, {what} (median of per-round differences)", signed(r[key]["median"], ".3f")] + [""] * 3
        )
    inproc = r["in_process_explain_ms"]
    rows.append(["in-process explainer alone, one text", ms(inproc["p50"]), ms(inproc["p99"]), "", ""])
    graph = r.get("lamp_attention_outputs_plain_cost")  # LaMP bundles: what the attention outputs cost a prediction
    if graph is not None:
        for name, p50 in graph["p50_ms"].items():
            rows.append([f"in-process LaMP re-ranker logits, one text, graph {name}", ms(p50), "", "", ""])
        rows.append(
            ["added p50, attention outputs (logits fetched alone)", signed(graph["added_p50_ms"], ".3f")] + [""] * 3
        )
    head = f"k={r['k']}, {r['requests_per_round']} texts × {r['rounds']} rounds per configuration, one client each"
    header = ["", "p50 ms", "p99 ms", "server p50 ms", "response bytes"]
    return {"table": head + "\n\n" + table(header, "lrrrr", rows)}


@one_result_each
def inference_threads(r: dict) -> dict[str, str]:
    """Single-text /v1/predict under concurrent load: the default predictor calls at once against one (interleaved)."""
    a, b = r["median"]
    rows = [[name, thousands(m["requests_per_s"]), ms(m["p50_ms"]), ms(m["p99_ms"])] for name, m in r["median"].items()]
    head = f"{r['clients']} clients, {r['requests']} single-text requests per server per round, k={r['k']}, medians of {len(r['rounds'])} rounds"
    per_round = [
        [str(i), f2(row["load_average"]), f2(row[a]["requests_per_s"] / row[b]["requests_per_s"])]
        for i, row in enumerate(r["rounds"], start=1)
    ] + [["median", "", f2(r["median_ratio_requests_per_s"])]]
    return {
        "table": head
        + "\n\n"
        + table(["server", "req/s", "p50 ms", "p99 ms"], "lrrr", rows)
        + "\n\n"
        + table(["round", "load (1 min)", f"req/s {a} / {b}"], "rrr", per_round)
    }
