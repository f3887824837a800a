"""bench/oip.py: the Open Inference Protocol (issue 50): tritonclient's top k against /v1/predict's, and the
protocol's latency against /v1's on one server."""

from __future__ import annotations

from .common import f2, ms, one_result_each, table, thousands


@one_result_each
def oip(r: dict) -> dict[str, str]:
    """Two tables: parity (texts whose top k agree), and latency per round with the ratios."""
    return {"parity": _parity(r), "latency": _latency(r)}


def _parity(r: dict) -> str:
    p = r["parity"]
    n = p["texts"]
    rows = [
        ["one text per `infer` (tritonclient's defaults: binary input and outputs)", f"{p['same_top_k_single']} / {n}"],
        ["… label ids alone", f"{p['same_labels_single']} / {n}"],
        [f"all {n} texts in one `infer` ([{n}] input) against one /v1/predict/batch", f"{p['same_top_k_one_request']} / {n}"],
    ]  # fmt: skip
    head = (
        f"{n} texts of {r['corpus']}, k = {p['k']}, bundle {r['bundle']} (version {p['model_version']}); "
        f"tritonclient[http] {p['tritonclient_version']}; a text agrees when its label ids and float32 scores are "
        f"equal, in order ({thousands(p['labels_compared'])} labels compared); tritonclient's own p50 per one-text "
        f"call {ms(p['tritonclient_p50_ms'])} ms"
    )
    return head + "\n\n" + table(["compared", "same top k"], "lr", rows)


def _latency(r: dict) -> str:
    lat = r["latency"]
    rows = [
        [str(i + 1), f2(x["load_1m"]), ms(x["v1_p50_ms"]), ms(x["oip_p50_ms"]), f2(x["p50_ratio"]),
         ms(x["v1_p99_ms"]), ms(x["oip_p99_ms"]), thousands(x["v1_batch_docs_per_s"]),
         thousands(x["oip_batch_docs_per_s"]), f2(x["batch_ratio"])]
        for i, x in enumerate(lat["rounds"])
    ]  # fmt: skip
    rows.append(["median", "", "", "", f"**{f2(lat['p50_ratio'])}**", "", "", "", "", f"**{f2(lat['batch_ratio'])}**"])
    head = (
        f"{lat['requests']} one-text requests per way and round over one keep-alive connection (the same raw HTTP "
        f"client for both: /v1/predict's JSON, the protocol's JSON infer), then {lat['batches']} batches of "
        f"{lat['batch']} texts each way; the two ways take turns, first one then the other; ratios: the protocol's "
        "p50 over /v1's, and /v1's docs/s over the protocol's (above 1: the protocol is slower)"
    )
    header = ["round", "load 1 min", "/v1 p50 ms", "/v2 p50 ms", "p50 ratio", "/v1 p99 ms", "/v2 p99 ms",
              "/v1 batch docs/s", "/v2 batch docs/s", "batch ratio"]  # fmt: skip
    return head + "\n\n" + table(header, "rrrrrrrrrr", rows)
