"""A bundle file cut short under a running server (issue 47): the older code against the private copy, and what each
way of holding a bundle's arrays costs at load."""

from __future__ import annotations

from .common import f1, f2, one_result_each, table


def _fate(side: dict) -> str:
    if side["exit_status"] is None:
        ready = side["ready_after"]
        return f"alive; /ready {ready['status']}: {ready['detail']}"
    status = side["exit_status"]
    return f"dead, exit status {status}" + (" (SIGBUS)" if status == -7 else "")


@one_result_each
def bundle_truncate(r: dict) -> dict[str, str]:
    """bench/bundle_truncate.py: the server's fate after `truncate -s 128`, per side; load and memory per way."""
    n = r["requests"]
    rows = [
        [
            side,
            f2(s["ready_s"]),
            f"{s['before_truncate']['ok']}/{n}",
            f"{s['after_truncate']['ok']}/{n}",
            _fate(s),
            str(s["log_lines"]),
        ]
        for side, s in r["sides"].items()
    ]
    head = f"{r['bundle']} ({f1(r['bundle_mb'])} MB), `truncate -s 128 {r['truncated']}` while served"
    header = ["code", "spawn to ready s", "200s before", "200s after", "the server after", "log lines"]
    fate = head + "\n\n" + table(header, "lrrrll", rows)
    ways = [
        [
            way,
            " / ".join(f2(x) for x in w["load_s"]),
            " / ".join(f2(x) for x in w["copy_s"]),
            f1(w["rss_mb"]),
            f1(w["private_mb"]),
            f1(w["pss_mb_all"]),
        ]
        for way, w in r["ways"].items()
    ]
    workers = next(iter(r["ways"].values()))["workers"]
    header = [
        "the engine arrays",
        "load s (each worker)",
        "of which copy s",
        "RSS MB",
        "private MB",
        f"PSS MB of {workers} workers",
    ]
    memory = (
        f"{workers} processes loading {r['bundle']} one after the other and predicting {n} texts each"
        + "\n\n"
        + table(header, "lrrrrr", ways)
    )
    return {"fate": fate, "memory": memory}
