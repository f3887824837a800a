"""XR-Transformer tables: accuracy and latency per variant, latency-only runs, the compiled engine's beam search."""

from __future__ import annotations

from .common import (
    METRICS,
    accuracy_table,
    bold_column_maxima,
    convention,
    e1,
    f0,
    f1,
    f2,
    get,
    ms,
    one_result_each,
    parity_texts,
    payloads,
    table,
    train_seconds,
    variants,
)


def _xrt_short_name(name: str, args: dict) -> str:
    if name.startswith("finetuned"):
        return "fine-tuned " + (name.split("-", 1)[1] if "-" in name else str(args.get("finetune_steps", "")))
    return name


def _xrt_label(name: str, args: dict) -> str:
    if name == "xlinear":
        return "XR-Linear (TF-IDF only)"
    if name == "frozen":
        return "XR-Transformer, frozen encoder"
    return f"XR-Transformer, {_xrt_short_name(name, args)} steps/level"


def xr_transformer_debtags(docs: list[dict]) -> dict[str, str]:
    rows, conventions = [], []
    for r in payloads(docs):
        args = r.get("args", {})
        for name, v in variants(r):
            s = v.get("stages")
            train = f0(train_seconds(v))
            if s:
                stages = ("finetune_seconds", "encode_seconds", "bootstrap_seconds", "ranker_seconds")
                train += " = " + " + ".join(f0(s[k]) for k in stages)
            rows.append([v.get("label", _xrt_label(name, args))] + [f2(v["metrics"][m]) for m in METRICS] + [train])
            conventions.append(convention(v, r))
            if v.get("int8_metrics"):
                rows.append(["… int8 encoder"] + [f2(v["int8_metrics"][m]) for m in METRICS] + [""])
                conventions.append(conventions[-1])
    bold_column_maxima(rows, range(1, 1 + len(METRICS)))
    out = {
        "accuracy": accuracy_table(
            ["variant", *METRICS, "training s = fine-tune + encode + bootstrap + rankers"],
            "l" + "r" * len(METRICS) + "l",
            rows,
            conventions,
        )
    }
    measured = [(r.get("args", {}), name, v) for r in payloads(docs) for name, v in variants(r) if v.get("latency")]
    if measured:
        texts = parity_texts(v for _, _, v in measured)
        cols = [
            (f"ONNX vs torch max abs diff ({texts} texts)", lambda v: e1(get(v, "export", "parity", "max_abs_diff"))),
            (
                "int8 vs fp32: max abs / cosine",
                lambda v: (
                    ""
                    if get(v, "int8_export", "int8") is None
                    else f"{v['int8_export']['int8']['vs_fp32']['max_abs_diff']:.3f} / "
                    f"{v['int8_export']['int8']['vs_fp32']['mean_cosine']:.4f}"
                ),
            ),
            (
                "int8 top-5 agreement",
                lambda v: (
                    ""
                    if get(v, "int8_export", "int8", "top5_agreement_vs_fp32") is None
                    else f"{v['int8_export']['int8']['top5_agreement_vs_fp32']:.3f}"
                ),
            ),
        ]
        cols = [c for c in cols if any(c[1](v) for _, _, v in measured)]
        lat = latency_columns([v["latency"] for _, _, v in measured], digits=1)
        out["latency"] = table(
            ["bundle"] + [h for h, _ in cols] + [h for h, _, _ in lat],
            "l" + "r" * (len(cols) + len(lat)),
            [
                [v.get("short_label", _xrt_short_name(name, args))]
                + [fn(v) for _, fn in cols]
                + [fmt(v["latency"].get(key)) for _, key, fmt in lat]
                for args, name, v in measured
            ],
        )
    return out


# Latency figures of bench/xr_transformer_debtags.py (current and earlier methods), in column order.
LATENCY = (
    ("torch ms", "torch_p50_ms", "1"),
    ("ONNX ms", "onnx_p50_ms", "d"),
    ("predict ms", "predict_p50_ms", "d"),
    ("`/v1/predict` ms", "http_p50_ms", "d"),
    ("predict, no FAISS ms", "predict_no_faiss_p50_ms", "d"),
    ("predict, flat FAISS level 1 ms", "predict_faiss_flat_p50_ms", "d"),
    ("predict minus encoder ms", "predict_without_encoder_p50_ms", "2"),
    ("predict − ONNX", "predict_overhead_over_onnx_ms", "2"),
    ("HTTP − ONNX", "http_overhead_over_onnx_ms", "2"),
    ("HTTP − ONNX, worker thread", "http_worker_overhead_over_onnx_ms", "2"),
    ("separate: HTTP − ONNX", "http_separate_overhead_over_onnx_separate_ms", "2"),
)


def latency_columns(latencies: list[dict], digits: int) -> list[tuple]:
    """(header, key, formatter) of the LATENCY columns any of `latencies` has; "d" columns get `digits` decimals."""
    fmts = {"1": f1, "2": f2, "d": f1 if digits == 1 else f2}
    return [(h, key, fmts[d]) for h, key, d in LATENCY if any(x.get(key) is not None for x in latencies)]


def xr_transformer_latency(docs: list[dict]) -> dict[str, str]:
    """One row per run (and variant): a --latency-only invocation of bench/xr_transformer_debtags.py."""
    measured = []
    for doc in docs:
        r = doc["result"]
        run = str(r["run"]) if r.get("run") is not None else (doc["provenance"].get("date") or doc["name"])[:16]
        measured += [(run.replace("T", " "), variant, lat) for variant, lat in r["latency"].items()]
    several = len({v for _, v, _ in measured}) > 1
    cols = latency_columns([lat for _, _, lat in measured], digits=2)
    head = ["run"] + (["variant"] if several else []) + [h for h, _, _ in cols]
    return {
        "table": table(
            head,
            "l" * (1 + several) + "r" * len(cols),
            [
                [run] + ([variant] if several else []) + [fmt(lat.get(key)) for _, key, fmt in cols]
                for run, variant, lat in measured
            ],
        )
    }


@one_result_each
def xr_transformer_engine(r: dict) -> dict[str, str]:
    """bench/experiments/xr_transformer_engine.py: predict minus encoder, compiled engine vs numpy beam search, one bundle."""
    b, agree = r["bundle"], r["agreement"]
    lat = lambda key: [ms(r[key]["p50_ms"]), ms(r[key]["p99_ms"]), ms(r[key]["mean_ms"])]  # noqa: E731
    times = table(
        [f"one text per request, k = {r['k']}", "p50 ms", "p99 ms", "mean ms"],
        "lrrr",
        [
            ["predict minus encoder, before: numpy beam search (models/inference/beam_search.py)", *lat("before")],
            ["predict minus encoder, after: compiled engine (models/engine/)", *lat("after")],
            [
                "before / after",
                f2(r["ratio_p50"]),
                f2(r["ratio_p99"]),
                f2(r["before"]["mean_ms"] / r["after"]["mean_ms"]),
            ],
            ["shared part alone: TF-IDF + Φ_cat assembly (embedding looked up)", *lat("features")],
            ["bare ONNX encoder (tokenise + forward), for context", *lat("onnx")],
        ],
    )
    enc = b["encoder"]
    source = [part for part in str(enc["source"]).split("/") if part]
    source = source[-2] if len(source) > 1 and source[-1] == "model" else source[-1]  # a package's model/ folder
    frozen = {True: "frozen", False: "fine-tuned", None: "encoder training not recorded"}[b.get("frozen_encoder")]
    load = r["load_average_timed"]
    facts = table(
        ["", ""],
        "ll",
        [
            [
                "bundle",
                f"{frozen} {source} (max_length {enc['max_length']}, {enc['pooling']} pooling), "
                f"{enc['features']} features ({b['features']:,} columns), levels "
                + " → ".join(f"{n:,}" for n in b["levels"])
                + f", beam {b['beam_size']}"
                + (", FAISS level 1" if b["first_level_index"] else ""),
            ],
            [
                "texts; samples per method",
                f"first {r['texts']} test texts; {r['samples_per_method']:,} ({r['rounds']} rounds, methods taking "
                f"turns in blocks of {r['block']}); ONNX {r['onnx_samples']:,} in a pass of its own",
            ],
            [
                f"top-k agreement (labels in order, scores within {agree['tolerance']:.0e})".replace("e-0", "e-"),
                f"{agree['agree']} / {agree['texts']} texts; max score difference {e1(agree['max_abs_score_diff'])}",
            ],
            [
                "load average (1 min) around the timed passes",
                f"{load['before_timing'][0]:.2f} → {load['after_before_vs_after'][0]:.2f} → {load['after_onnx'][0]:.2f}",
            ],
        ],
    )
    return {"table": times + "\n\n" + facts}
