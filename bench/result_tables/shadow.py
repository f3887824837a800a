"""Shadow scoring table (issue 41): agreement, live against offline P@k, and the primary's latency with the shadow."""

from __future__ import annotations

from .common import f2, ms, one_result_each, table


@one_result_each
def shadow(r: dict) -> dict[str, str]:
    """bench/shadow.py: a shadow scoring the primary's live traffic, one run, the two servers taking turns."""
    pair, live = r["pair"], r["pair"].get("live", {})
    servers = "the two servers" if "fractions" not in r else f"the {len(r['latency'])} servers"
    head = (
        f"{r['shadow']} shadowing {r['primary']} on {r['documents']} test documents replayed through "
        f"/v1/predict/batch (one document per request, k={r['k']}, {r['blocks']} blocks, {servers} in turn); "
        f"{pair['documents']} compared, {pair['shed_documents']} shed, {pair['errors']} errors"
    )
    agreement = table(
        ["top-1 agreement", "overlap@k", "rank correlation (Kendall tau-b)"],
        "rrr",
        [[f"{pair['top1_agreement']:.3f}", f"{pair['overlap_at_k']:.3f}", f"{pair['rank_correlation']:.3f}"]],
    )
    ks = [f"P@{k}" for k in (1, 3, 5)]
    rows = []
    for name in (r["primary"], r["shadow"]):
        rows.append([name, "live, on " + str(live.get("documents", 0)), *(f2(live.get(name, {}).get(k)) for k in ks)])
        rows.append([name, f"offline (`xtag evaluate`), on {r['documents']}", *(f2(r["offline"][name][k]) for k in ks)])
    quality = table(["model", "documents", *ks], "llrrr", rows)
    lat = r["latency"]
    if "fractions" not in r:
        latency = table(
            ["primary's server", "p50 ms", "p90 ms", "p99 ms"],
            "lrrr",
            [[name, ms(v["p50_ms"]), ms(v["p90_ms"]), ms(v["p99_ms"])] for name, v in lat.items()]
            + [["with / without", f"{r['p50_with_over_without']:.3f}", "", ""]],
        )
        return {"table": "\n\n".join((head, agreement, quality, latency))}
    rows = []
    for name, v in lat.items():
        f = r["fractions"].get(name)
        p = f["pair"] if f else None
        rows.append(
            [name, ms(v["p50_ms"]), ms(v["p90_ms"]), ms(v["p99_ms"]), f"{f['p50_over_without']:.3f}" if f else "1",
             str(p["documents"]) if p else "", str(p["shed_documents"]) if p else "",
             str(p.get("unsampled_documents", 0)) if p else ""]
        )  # fmt: skip
    latency = table(
        ["primary's server", "p50 ms", "p90 ms", "p99 ms", "p50 / without", "compared", "shed", "not sampled"],
        "lrrrrrrr",
        rows,
    )
    return {"table": "\n\n".join((head, agreement, quality, latency))}
