"""bench/reload_leak.py --storm: server RSS before, during and after a storm of successful reloads (issue 47)."""

from __future__ import annotations

from .common import f1, one_result_each, table


@one_result_each
def reload_storm(r: dict) -> dict[str, str]:
    """One row per code run (the older code first): reloads, their statuses, RSS before / peak / after, the ratio."""
    rows = [
        [
            name,
            str(run["reloads"]),
            ", ".join(f"{n}× {status}" for status, n in run["statuses"].items()),
            f1(run["seconds"]),
            f1(run["rss_mib"]["before"]),
            f1(run["rss_mib"]["peak"]),
            f1(run["rss_mib"]["after"]),
            f"{run['after_over_before']:.3f}",
        ]
        for name, run in r["runs"].items()
    ]
    head = f"bundle {r['bundle']}; goal: RSS after / before ≤ {r['bound']:.2f}; met by this code: {'yes' if r['ok'] else 'no'}"
    header = [
        "code",
        "reloads",
        "answers",
        "seconds",
        "RSS before MiB",
        "RSS peak MiB",
        "RSS after MiB",
        "after / before",
    ]
    return {"table": head + "\n\n" + table(header, "lrlrrrrr", rows)}
