"""Memory around bursts (issue 47): the server's RSS before, at the peak of and after a burst, older code and this."""

from __future__ import annotations

from .common import f1, one_result_each, table


@one_result_each
def slow_bodies(r: dict) -> dict[str, str]:
    """bench/slow_bodies.py: RSS before, at the peak and after a burst of stalled bodies, per server code."""
    rows = [
        [
            name,
            f1(run["rss_mib"]["before"]),
            f1(run["rss_mib"]["peak"]),
            f1(run["rss_mib"]["after"]),
            f"{run['after_over_before']:.3f}",
            f1(run["sent_mb"]),
            " / ".join(f"{x:.1f}" for x in run["load_average"]),
        ]
        for name, run in r["runs"].items()
    ]
    head = (
        f"{r['connections']} connections, each a body of {r['body_bytes']:,} bytes sent but for its last byte, then"
        " closed; RSS in MiB, read from /proc"
    )
    header = ["server code", "RSS before", "peak", "after", "after / before", "MB sent", "load average (1/5/15 min)"]
    return {"table": head + "\n\n" + table(header, "lrrrrrr", rows)}
