"""bench/multi_model.py: several models in one server: what answers, what the second model costs, the default's
latency beside it, and one model's lifecycle under load on the other."""

from __future__ import annotations

from .common import f1, ms, one_result_each, table, thousands


@one_result_each
def multi_model(r: dict) -> dict[str, str]:
    """Four tables: the models listed, RSS, the default's latency (two models / one), the lifecycle under load."""
    return {
        "models": _models(r),
        "memory": _memory(r),
        "latency": _latency(r),
        "under_load": _under_load(r),
    }


def _models(r: dict) -> str:
    f = r["functional"]
    rows = [
        [m["name"], "yes" if m["default"] else "", m["state"], m["family"], str(m["label_count"]),
         f1(m["memory_bytes"] / 2**20)]
        for m in f["v1_models"]
    ]  # fmt: skip
    answers = "; ".join(f"`{path}` {a['status']} ({a['model']['name']})" for path, a in f.items() if path[0] == "/")
    projects = ", ".join(f["annif_projects"])
    head = f"GET /v1/models; predict answers: {answers}; annif-client's projects: {projects}"
    return head + "\n\n" + table(["model", "default", "state", "family", "labels", "bundle MB"], "llllrr", rows)


def _memory(r: dict) -> str:
    m = r["rss_mib"]
    rows = [
        [f"one-model server, {r['a']}", f1(m["one_model_a"])],
        [f"one-model server, {r['b']}", f1(m["one_model_b"])],
        ["sum of the two one-model servers", f1(m["sum_of_one_model_servers"])],
        [f"one server with both ({r['a']} default)", f1(m["two_models"])],
        [f"the second model's cost (two models − {r['a']} alone)", f1(m["second_model_cost"])],
        [f"{r['b']} alone − {r['a']} alone", f1(m["one_model_b_over_a"])],
    ]
    return "RSS after the same warm traffic (each model answered the same 200 texts)\n\n" + table(
        ["server", "RSS MiB"], "lr", rows
    )


def _latency(r: dict) -> str:
    lat = r["latency"]
    names = {"before": "A alone, main's code", "one_model": "A alone, this code", "two_models": "A beside B"}
    rows = [
        [names[key], str(lat[key]["requests"]), ms(lat[key]["p50_ms"]), ms(lat[key]["p90_ms"]),
         f"{lat[key]['server_cpu_ms_per_request']:.3f}", thousands(lat[key]["batch_docs_per_s"]),
         f1(lat[key]["server_cpu_us_per_batch_doc"])]
        for key in names if key in lat
    ]  # fmt: skip
    ratios = {"two_over_one": "A beside B / A alone", "one_model_after_over_before": "this code / main's (A alone)"}
    for key, label in ratios.items():
        if key in lat:
            q = {name: f"{value:.3f}" for name, value in lat[key].items()}
            rows.append([label, "", q["p50"], "", q["cpu_per_request"], q["batch"], q["cpu_per_batch_doc"]])
    head = (
        f"the default model A ({r['a']}) on /v1/predict (one text, sequential) and /v1/predict/batch (64 texts), the "
        "servers taking turns request by request; server CPU: its process's user + system time"
    )
    columns = ["server", "requests", "p50 ms", "p90 ms", "CPU ms / request", "batch docs/s", "CPU µs / batch doc"]
    return head + "\n\n" + table(columns, "lrrrrrr", rows)


def _under_load(r: dict) -> str:
    u = r["under_load"]
    rows = [[s["step"], str(s["status"]), f"{s['seconds']:.2f}"] for s in u["steps"]]
    head = (
        f"{u['clients_on_default']} clients on {r['a']} (/v1/predict) while `second` ({r['b']}) goes through these steps: "
        f"{u['default_requests']:,} requests on {r['a']}, {u['default_failed']} failed; p50 {ms(u['default_p50_ms'])} ms, "
        f"p99 {ms(u['default_p99_ms'])} ms; `second` afterwards: {u['second_after']['state']}"
    )
    return head + "\n\n" + table(["step on second", "status", "s"], "lrr", rows)
