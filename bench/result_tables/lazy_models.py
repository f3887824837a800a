"""Lazy load and LRU eviction table (issue 50): three models with memory for two, under 20 clients."""

from __future__ import annotations

from .common import ms, one_result_each, table


def _row(name: str, s: dict) -> list[str]:
    if not s.get("n"):
        return [name, "0", "", "", "", ""]
    return [
        name,
        str(s["n"]),
        ms(s["p50_ms"]),
        ms(s["p90_ms"]),
        ms(s["p99_ms"]),
        ms(s["max_ms"]),
    ]


@one_result_each
def lazy_models(r: dict) -> dict[str, str]:
    """bench/lazy_models.py: XTAG_EVICT=lru, one server, a cold phase then closed-loop clients over all three."""
    cold, load = r["cold"], r["load"]
    m = load["metrics"]
    head = (
        f"three copies of {r['bundle']} ({r['bundle_mb']:.0f} MB each), m0 the default (pinned); RSS with m0 alone "
        f"{r['rss_with_default_mb']:.0f} MB, XTAG_MAX_MEMORY_MB={r['max_memory_mb']} (room for m0 and one more); "
        f"RSS at the end {r['rss_end_mb']:.0f} MB. Under load: {r['clients']} clients for {r['seconds']:g} s, "
        f"{load['requests']} requests, **{load['failed']} failed** ({', '.join(f'{k}: {v}' for k, v in load['statuses'].items())}), "
        f"{len(load['connection_errors'])} connection errors; {sum(m['xtag_model_loads_total'].values()):.0f} loads, "
        f"{sum(m['xtag_model_evictions_total'].values()):.0f} evictions"
    )
    waits = m["xtag_model_load_wait_seconds_count"]
    wait_sum = m["xtag_model_load_wait_seconds_sum"]
    n_wait = sum(waits.values())
    rows = [
        _row("cold: a request that waits for its model's load (one at a time)", cold["waited"]),
        _row("cold: a request on the default beside them (loaded)", cold["warm_default"]),
        *(_row(f"load: requests on {name}", s) for name, s in load["by_model"].items()),
        _row("load: every request", load["all"]),
    ]
    latency = table(["requests", "n", "p50 ms", "p90 ms", "p99 ms", "max ms"], "lrrrrr", rows)
    mean = f"{1e3 * sum(wait_sum.values()) / n_wait:.0f} ms" if n_wait else "none"
    waited = (
        f"under load, {n_wait:.0f} requests waited for a load (server side, xtag_model_load_wait_seconds): mean {mean}"
    )
    return {"table": "\n\n".join((head, latency, waited))}
