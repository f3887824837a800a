"""Markdown tables of bench/RESULTS.md, one builder per benchmark, from the payloads in bench/results/*.json."""

from __future__ import annotations

import re

METRICS = ("P@1", "P@3", "P@5", "PSP@1", "PSP@3", "PSP@5")


# -- formatting ----------------------------------------------------------------------------------------------------


def f2(x) -> str:
    return "" if x is None else f"{x:.2f}"


def f1(x) -> str:
    return "" if x is None else f"{x:.1f}"


def f0(x) -> str:
    return "" if x is None else f"{x:.0f}"


def thousands(x) -> str:
    return "" if x is None else f"{x:,.0f}"


def sig3(x) -> str:
    """Three significant digits, trailing zeros kept (0.110, 16.1, 210)."""
    return "" if x is None else format(x, "#.3g").rstrip(".")


def e1(x) -> str:
    return "" if x is None else f"{x:.1e}"


def ms(x) -> str:
    """Latencies: two decimals below 10 ms, one above."""
    return "" if x is None else f"{x:.2f}" if x < 10 else f"{x:.1f}"


def signed(x, fmt: str = ".2f") -> str:
    return format(x, "+" + fmt).replace("-", "−")


def bold(text: str) -> str:
    return f"**{text}**" if text else text


def table(header: list[str], align: str, rows: list[list[str]]) -> str:
    """align: one letter per column, l or r."""
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"
    line = lambda cells: "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"  # noqa: E731
    return "\n".join([line(header), rule] + [line(r) for r in rows])


def bold_column_maxima(rows: list[list[str]], columns: range) -> None:
    """Bold the highest figure of each column in place (ties: all of them)."""
    for c in columns:
        values = [float(r[c]) for r in rows if r[c]]
        for r in rows:
            if values and r[c] and float(r[c]) == max(values):
                r[c] = bold(r[c])


def get(d: dict | None, *keys):
    """d[k1][k2]... or None where a level is missing."""
    for k in keys:
        if not isinstance(d, dict) or d.get(k) is None:
            return None
        d = d[k]
    return d


def payloads(docs: list[dict]) -> list[dict]:
    return [d["result"] for d in docs]


# Metric convention of a result (models/metrics.py): the benchmark scripts record "convention"; results from
# before issue 14 lack it and were computed under the known-labels convention.
BEFORE_XMC = "known-labels (computed before the XMC convention became the default)"


CONVENTION_TEXT = {
    "xmc": "xmc (unseen test labels count as misses; macro metrics over the test split's labels)",
    "known-labels": "known-labels (unseen test labels dropped; macro metrics over all model labels)",
}


def convention(*levels: dict | None) -> str:
    """The first "convention" recorded in `levels` (e.g. a variant, then its result), else BEFORE_XMC."""
    name = next((d["convention"] for d in levels if isinstance(d, dict) and d.get("convention")), None)
    return BEFORE_XMC if name is None else CONVENTION_TEXT.get(name, name)


def convention_line(names: list[str]) -> str:
    """One line under a table of accuracy figures naming the convention(s) its rows were computed with."""
    unique = list(dict.fromkeys(names)) or [BEFORE_XMC]
    if len(unique) == 1:
        return f"Metric convention: {unique[0]}."
    return "Metric conventions (see the convention column): " + "; ".join(unique) + "."


def one_result_each(build):
    """A builder of one result's tables; files matched together by one marker get theirs one after the other."""

    def per_file(docs: list[dict]) -> dict[str, str]:
        out: dict[str, list[str]] = {}
        for doc in docs:
            for part, text in build(doc["result"]).items():
                out.setdefault(part, []).append(text)
        return {part: "\n\n".join(texts) for part, texts in out.items()}

    per_file.__name__ = build.__name__
    return per_file


# -- XR-Linear ------------------------------------------------------------------------------------------------------


SEED_METRICS = ("P@1", "P@3", "P@5", "PSP@1", "PSP@3", "PSP@5")


@one_result_each
def xlinear_seeds(r: dict) -> dict[str, str]:
    """xtag and PECOS per label-tree seed, then each library's mean (bench/xlinear_seeds.py)."""
    rows = [[row["library"], str(row["seed"])] + [f2(row["metrics"][m]) for m in SEED_METRICS] for row in r["rows"]]
    for lib in ("xtag", "PECOS"):
        rows.append([bold(f"{lib}, mean"), ""] + [bold(f2(r["means"][lib][m])) for m in SEED_METRICS])
    rows.append(
        ["mean difference", ""] + [signed(r["means"]["xtag"][m] - r["means"]["PECOS"][m]) for m in SEED_METRICS]
    )
    text = table(["library", "tree seed", *SEED_METRICS], "ll" + "r" * len(SEED_METRICS), rows)
    return {"table": f"{r['data']}:\n\n{text}\n\n{convention_line([convention(r)])}"}


@one_result_each
def tree_swap(r: dict) -> dict[str, str]:
    """Both libraries' rankers on both libraries' trees (seed means), then what each tree is (bench/tree_swap.py)."""
    acc = [
        [tree, rankers] + [f2(r["means"][f"{tree} tree, {rankers} rankers"][m]) for m in SEED_METRICS]
        for tree in ("xtag", "PECOS")
        for rankers in ("xtag", "PECOS")
    ]
    seeds = sorted({row["seed"] for row in r["rows"]})
    accuracy = table(["tree", "rankers", *SEED_METRICS], "ll" + "r" * len(SEED_METRICS), acc)
    trees = table(
        ["tree", "seed", "levels", "leaf cosine", "co-occurring label pairs in one leaf"],
        "lllrr",
        [
            [t["tree"], str(t["seed"]), " → ".join(f"{n:,}" for n in t["levels"]), f"{t['leaf_cosine']:.4f}",
             f"{100 * t['pairs_same_leaf']:.1f} %"]
            for t in r["trees"]
        ],
    )  # fmt: skip
    head = f"{r['data']}, xtag's PIFA weighted `{r.get('pifa_weighting', 'uniform')}`, means over tree seeds {seeds}:"
    return {"table": f"{head}\n\n{accuracy}\n\n{convention_line([convention(r)])}\n\n{trees}"}


@one_result_each
def xlinear_vs_pecos(r: dict) -> dict[str, str]:
    out = {}
    ours, peer = r["xtag"], r["pecos"]
    if r.get("nnz_per_doc"):  # results from before these were recorded lack them
        out["data"] = table(
            ["", "train", "test"],
            "lrr",
            [
                ["documents", *(thousands(n) for n in r["documents"])],
                ["labels per document", *(f2(n) for n in r["labels_per_doc"])],
                ["TF-IDF non-zeros per document", *(f1(n) for n in r["nnz_per_doc"])],
                ["features; labels", f"{r['features']:,}; {r['labels']:,}", ""],
            ],
        )
    metrics = [m for m in ("P@1", "P@3", "P@5", "PSP@1", "PSP@3", "PSP@5", "nDCG@5", "macro-R@5") if m in ours]
    version = f" {peer['pecos_version']}" if peer.get("pecos_version") else ""
    out["accuracy"] = table(
        ["metric", "xtag", f"PECOS{version}"], "lrr", [[m, f2(ours[m]), f2(peer[m])] for m in metrics]
    )
    out["accuracy"] += "\n\n" + convention_line([convention(r)])
    ratios = r.get("ratios", {})
    rows = []
    for key, label, fmt in (
        ("train_s", f"training s (tree + rankers, median of {r['repeats']})", f2),
        ("single_p50_ms", "single-document p50 ms (vectorisation excluded)", f2),
        ("single_p99_ms", "single-document p99 ms", f2),
        ("docs_per_s", "batch throughput, docs/s (whole test set)", thousands),
    ):
        rows.append([label, fmt(ours[key]), fmt(peer[key]), f2(ratios.get(key, ours[key] / peer[key]))])
    gb = lambda mb: f"{mb / 1024:.2f}"  # noqa: E731
    for key, label in (
        ("train_peak_rss_mb", "peak RSS of the training process, GB (VmHWM, input matrices included)"),
        ("rss_before_train_mb", "RSS before training, GB (imports + input matrices)"),
    ):
        if key in ours and key in peer:  # results from before these were measured lack them
            rows.append([label, gb(ours[key]), gb(peer[key]), f2(ratios.get(key, ours[key] / peer[key]))])
    if "bundle_load_s" in ours:
        loads = len(r.get("bundle_loads", [])) or 1
        rows.append(
            [f"bundle load s (load_bundle in a fresh process, median of {loads})", f2(ours["bundle_load_s"]), "", ""]
        )
        rows.append(
            [
                "bundle load s with interpreter start and imports; its RSS GB; bundle GB",
                f"{ours['bundle_load_process_s']:.2f}; {gb(ours['bundle_peak_rss_mb'])}; {gb(ours['bundle_mb'])}",
                "",
                "",
            ]
        )
    out["speed"] = table(["", "xtag", "PECOS", "ratio"], "lrrr", rows)
    return out


def xlinear_validation(docs: list[dict]) -> dict[str, str]:
    rows = [v for r in payloads(docs) for v in r["variants"]]
    cols = [
        ("P@1", "P@1", f2),
        ("P@5", "P@5", f2),
        ("PSP@5", "PSP@5", f2),
        ("macro-R@5", "macro-R@5", f2),
        ("train_s", "training s", f1),
        ("note", "note", lambda x: x or ""),
    ]
    cols = [c for c in cols if any(v.get(c[0]) is not None for v in rows)]
    body = [[v.get("label", v["variant"])] + [fmt(v.get(key)) for key, _, fmt in cols] for v in rows]
    seeds = [r["tree_seeds"] for r in payloads(docs) if len(r.get("tree_seeds", [])) > 1]
    means = f"\n\nFigures are means over label-tree seeds {seeds[0]}." if seeds else ""
    return {
        "table": table(
            ["variant"] + [h for _, h, _ in cols], "l" + "".join("l" if k == "note" else "r" for k, _, _ in cols), body
        )
        + "\n\n"
        + convention_line([convention(r) for r in payloads(docs)])
        + means
    }


@one_result_each
def beam_1m(r: dict) -> dict[str, str]:
    out = {}
    levels = list(r["tree_levels"])
    if levels[-1] != r["labels"]:
        levels.append(r["labels"])
    load = f" (under load {r['load_after_tree']:.1f})" if r.get("load_after_tree") is not None else ""
    out["table"] = table(
        ["", ""],
        "ll",
        [
            ["tree levels", " → ".join(f"{n:,}" for n in levels[:-1]) + f" clusters → {levels[-1]:,} labels"],
            ["tree build (balanced 4/16-ary k-means, 20 iterations max)", f"{r['tree_build_s']:.0f} s{load}"],
            ["peak RSS after the tree", f"{r['peak_rss_gb_after_tree']:.2f} GB"],
            [
                "ranker weights held",
                (f"{r['ranker_nnz'] / 1e6:.1f} M" if r["ranker_nnz"] >= 1e6 else f"{r['ranker_nnz']:,}")
                + f" non-zeros; peak RSS {r['peak_rss_gb']:.2f} GB",
            ],
            ["single-document beam search p50 / p99", f"{r['single_p50_ms']:.2f} / {r['single_p99_ms']:.2f} ms"],
            ["batch beam search", f"{r['batch_docs_per_s']:,.0f} docs/s"],
        ],
    )
    return out


def shortlist_vs_exact(docs: list[dict]) -> dict[str, str]:
    rows = [
        [f"{x['nodes']:,}", f"{x['indexed_columns']:,}", sig3(x["exact_p50_ms"]), sig3(x["flat_faiss_p50_ms"])]
        for r in payloads(docs)
        for x in r["levels"]
    ]
    return {"table": table(["level-1 nodes", "indexed columns", "exact p50 ms", "flat FAISS p50 ms"], "rrrr", rows)}


# -- service --------------------------------------------------------------------------------------------------------


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
        names = {"power": "power (β=0.5)"}  # the default β of models/reweighting.py, which the service uses
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


# -- tail labels ----------------------------------------------------------------------------------------------------


def _change(row: dict, plain: dict) -> tuple[str, str]:
    p = row.get("P@5_change", row["P@5"] - plain["P@5"])
    pct = row.get("macro-R@5_change_pct", 100 * (row["macro-R@5"] / plain["macro-R@5"] - 1))
    return f"{row['P@5']:.2f} ({signed(p)})", f"{row['macro-R@5']:.2f} ({signed(pct, '.1f')} %)"


@one_result_each
def tail_debtags(r: dict) -> dict[str, str]:
    out = {}
    models = [
        ("B (served bundle, raw scores)", "B", r.get("full")),
        ("A (calibrated)", "A", get(r, "calibrated", "study")),
    ]
    rows = []
    for label, short, study in models:
        if not study:
            continue
        plain = study["plain"]
        first = True
        for scheme, row in study["smallest_alpha"].items():
            if row is None:
                continue
            rows.append(
                [
                    label if first else short,
                    f"{plain['P@5']:.2f} / {plain['macro-R@5']:.2f}" if first else "",
                    scheme,
                    f"{row['alpha']:.2f}",
                    *_change(row, plain),
                ]
            )
            first = False
    out["smallest_alpha"] = table(
        ["model", "plain P@5 / macro-R@5", "scheme", "alpha", "P@5", "macro-R@5"], "lllrrr", rows
    )
    out["smallest_alpha"] += "\n\n" + convention_line([convention(s, r) for _, _, s in models if s])
    study = r["calibrated"]["study"]
    fw = {x["alpha"]: x for x in study.get("fw", [])}
    per_alpha = study["comparison"]["per_alpha"]
    within = [x["bca"] for x in per_alpha if x["bca"]["P@5"] >= study["plain"]["P@5"] - 1.0]
    headline = max(within, key=lambda b: b["macro-F1@5"])["alpha"] if within else None
    rows = []
    for x in per_alpha:
        bca, best, f = x["bca"], x.get("best_reweighting"), fw.get(x["bca"]["alpha"], {})
        rows.append(
            [
                f"{bca['alpha']:g}",
                f2(bca["P@5"]),
                bold(f2(bca["macro-F1@5"])) if bca["alpha"] == headline else f2(bca["macro-F1@5"]),
                f2(bca["seconds"]),
                f"{best['scheme']} α={best['alpha']:g}" if best else "none",
                f2(best["macro-F1@5"]) if best else "",
                f2(f.get("macro-F1@5")),
                f2(f.get("seconds")),
            ]
        )
    out["batch"] = table(
        [
            "alpha",
            "BCA P@5",
            "BCA macro-F1@5",
            "BCA s",
            "best reweighting at ≥ P@5",
            "its macro-F1@5",
            "FW macro-F1@5",
            "FW s",
        ],
        "rrrrlrrr",
        rows,
    )
    out["batch"] += "\n\n" + convention_line([convention(study, r)])
    return out


# -- transformers ---------------------------------------------------------------------------------------------------


def _variants(result: dict) -> list[tuple[str, dict]]:
    return [(name, v) for name, v in result.items() if isinstance(v, dict) and "metrics" in v]


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


def _seconds(entry: dict):
    return get(entry, "summary", "total_seconds") or entry.get("train_seconds_this_invocation")


def xr_transformer_debtags(docs: list[dict]) -> dict[str, str]:
    rows, conventions = [], []
    for r in payloads(docs):
        args = r.get("args", {})
        for name, v in _variants(r):
            s = v.get("stages")
            train = f0(_seconds(v))
            if s:
                stages = ("finetune_seconds", "encode_seconds", "bootstrap_seconds", "ranker_seconds")
                train += " = " + " + ".join(f0(s[k]) for k in stages)
            rows.append([v.get("label", _xrt_label(name, args))] + [f2(v["metrics"][m]) for m in METRICS] + [train])
            conventions.append(convention(v, r))
            if v.get("int8_metrics"):
                rows.append(["… int8 encoder"] + [f2(v["int8_metrics"][m]) for m in METRICS] + [""])
                conventions.append(conventions[-1])
    bold_column_maxima(rows, range(1, 1 + len(METRICS)))
    mixed = len(set(conventions)) > 1
    out = {
        "accuracy": table(
            ["variant", *METRICS, "training s = fine-tune + encode + bootstrap + rankers"] + ["convention"] * mixed,
            "l" + "r" * len(METRICS) + "l" + "l" * mixed,
            [row + [c.split(" ")[0]] * mixed for row, c in zip(rows, conventions)],
        )
        + "\n\n"
        + convention_line(conventions)
    }
    measured = [(r.get("args", {}), name, v) for r in payloads(docs) for name, v in _variants(r) if v.get("latency")]
    if measured:
        texts = next((get(v, "export", "parity_texts") for _, _, v in measured if get(v, "export", "parity_texts")), 64)
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
    """bench/xr_transformer_engine.py: predict minus encoder, compiled engine vs numpy beam search, one bundle."""
    b, agree = r["bundle"], r["agreement"]
    lat = lambda key: [ms(r[key]["p50_ms"]), ms(r[key]["p99_ms"]), ms(r[key]["mean_ms"])]  # noqa: E731
    times = table(
        [f"one text per request, k = {r['k']}", "p50 ms", "p99 ms", "mean ms"],
        "lrrr",
        [
            ["predict minus encoder, before: numpy beam search (models/beam_search.py)", *lat("before")],
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


def lightxml_debtags(docs: list[dict]) -> dict[str, str]:
    rows, conventions = [], []
    for r in payloads(docs):
        for b in r.get("baselines", []):
            t = b.get("training_s")
            train = "–" if t is None else f0(t)
            train += f" (fine-tune {b['finetune_s']:.0f})" if t is not None and b.get("finetune_s") else ""
            rows.append([b["label"]] + [f2(b["metrics"][m]) for m in METRICS] + [train, b.get("epochs", "")])
            conventions.append(convention(b, r))
    measured = []
    for r in payloads(docs):
        for name, v in _variants(r):
            t = v.get("training") or {}
            batch = get(v, "args", "batch_size")
            epochs = (
                ""
                if t.get("epochs") is None
                else f"{t['epochs']:.3f}"
                + (f" ({t['steps']} × {batch} texts)" if t.get("steps") is not None and batch else "")
            )
            rows.append(
                [v.get("label", f"LightXML, {name}")]
                + [f2(v["metrics"][m]) for m in METRICS]
                + [f0(_seconds(v)), epochs]
            )
            conventions.append(convention(v, r))
            if v.get("latency"):
                measured.append((name, v))
    mixed = len(set(conventions)) > 1
    out = {
        "accuracy": table(
            ["model", *METRICS, "training s", "epochs"] + ["convention"] * mixed,
            "l" + "r" * (len(METRICS) + 1) + "l" + "l" * mixed,
            [row + [c.split(" ")[0]] * mixed for row, c in zip(rows, conventions)],
        )
        + "\n\n"
        + convention_line(conventions)
    }
    if measured:
        texts = next((get(v, "export", "parity_texts") for _, v in measured if get(v, "export", "parity_texts")), 64)
        out["latency"] = table(
            [
                "bundle",
                f"ONNX vs torch max abs diff ({texts} texts): cluster scores / bottleneck",
                "bare ONNX forward ms",
                "tokenise + forward ms",
                "`Predictor.predict` (k=5) ms",
            ],
            "lrrrr",
            [
                [
                    v.get("short_label", name),
                    f"{e1(get(v, 'export', 'parity', 'cluster_scores', 'max_abs_diff'))} / "
                    f"{e1(get(v, 'export', 'parity', 'bottleneck', 'max_abs_diff'))}",
                    f1(v["latency"].get("onnx_forward_p50_ms")),
                    f1(v["latency"].get("tokenize_and_forward_p50_ms")),
                    f1(v["latency"].get("predict_p50_ms")),
                ]
                for name, v in measured
            ],
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


def cascadexml_debtags(docs: list[dict]) -> dict[str, str]:
    """CascadeXML beside the other families (their figures read from their own result files, budgets named)."""
    rows, conventions, latency = [], [], []
    for r in payloads(docs):
        c = r["cascadexml"]
        lat = c["latency"]
        for v in [c, *r.get("baselines", [])]:
            p50 = get(lat, "features", "predict_p50_ms") if v is c else v.get("predict_p50_ms")
            rows.append(
                [v["label"]] + [f2(v["metrics"][m]) for m in METRICS] + [f0(v.get("training_s")), v["budget"], f1(p50)]
            )
            conventions.append(convention(v))
        worst = max((p["max_abs_diff"] for p in (get(c, "export", "parity") or {}).values()), default=None)
        for kind, label in (("features", "per-level features, heads in numpy"), ("logits", "whole-level logits")):
            latency.append(
                [
                    label + (" (served)" if get(c, "export", "outputs") == kind else ""),
                    e1(worst) if kind == get(c, "export", "outputs") else "",
                    f1(get(lat, kind, "onnx_forward_p50_ms")),
                    f1(get(lat, kind, "predict_p50_ms")),
                    f1(lat.get("http_v1_predict_p50_ms")) if kind == get(c, "export", "outputs") else "",
                ]
            )
    mixed = len(set(conventions)) > 1
    accuracy = table(
        ["model", *METRICS, "training s", "budget", "`Predictor.predict` p50 ms (128 tokens)"] + ["convention"] * mixed,
        "l" + "r" * (len(METRICS) + 1) + "lr" + "l" * mixed,
        [row + [c.split(" ")[0]] * mixed for row, c in zip(rows, conventions)],
    )
    return {
        "accuracy": accuracy + "\n\n" + convention_line(conventions),
        "latency": table(
            [
                "graph outputs",
                "ONNX vs torch max abs diff",
                "bare ONNX forward ms (128 tokens)",
                "`Predictor.predict` ms (128 tokens)",
                "`POST /v1/predict` ms (64 tokens)",
            ],
            "lrrrr",
            latency,
        ),
    }


ENCODER_VARIANTS = {
    "exported": "graph as exported before issue 17",
    "fused": "onnxruntime transformer fusions (fp32)",
    "int8": "fused + dynamic int8",
}


@one_result_each
def encoder_variants(r: dict) -> dict[str, str]:
    """bench/encoder_variants.py: exported vs fused vs int8 encoder graphs, bare forward, /v1/predict and accuracy."""
    rows, acc_rows = [], []
    for family, e in r["families"].items():
        fwd, http = e["bare_forward"]["p50_ms"], e["predict_http"]["p50_ms"]
        base_fwd, base_http = fwd["exported"], http["exported"]
        for name, label in ENCODER_VARIANTS.items():
            rows.append(
                [
                    f"{family}: {label}",
                    e["export"][name]["model_onnx_mb"],
                    ms(fwd[name]),
                    f"{base_fwd / fwd[name]:.2f}×",
                    ms(http[name]),
                    f"{base_http / http[name]:.2f}×",
                ]
            )
        for name, metrics in e.get("accuracy", {}).items():
            acc_rows.append([f"{family}: {ENCODER_VARIANTS[name]}"] + [f2(metrics[m]) for m in ACC_COLUMNS])
    first = next(iter(r["families"].values()))
    out = {
        "latency": table(
            ["bundle", "model.onnx MB", "bare forward p50 ms", "speed-up", "`/v1/predict` p50 ms", "speed-up"],
            "lrrrrr",
            [[c if isinstance(c, str) else f"{c:g}" for c in row] for row in rows],
        )
        + f"\n\nBare forward: batch 1, {r['texts']} test texts at their real length (median "
        f"{first['bare_forward']['tokens_median']} tokens, cap 128), {first['bare_forward']['samples_per_variant']} "
        f"samples per variant; `/v1/predict`: one text, k=5, sequential client over loopback, "
        f"{first['predict_http']['samples_per_variant']} samples per variant (the bundle's own max_length); "
        f"variants taking turns in blocks of {r['block']} texts, {r['rounds']} rounds."
    }
    if acc_rows:
        conventions = {m.get("convention") for e in r["families"].values() for m in e.get("accuracy", {}).values()}
        out["accuracy"] = (
            table(["bundle", *ACC_COLUMNS], "l" + "r" * len(ACC_COLUMNS), acc_rows)
            + f"\n\nMetric convention: {', '.join(sorted(c for c in conventions if c))}."
        )
    return out


ACC_COLUMNS = ("P@1", "P@3", "P@5", "PSP@1", "PSP@3", "PSP@5")


# -- Missing-label losses (issue 16) ----------------------------------------------------------------------------------

LOSS_COLUMNS = ("P@1", "P@3", "P@5", "PSP@1", "PSP@3", "PSP@5", "macro-R@5", "coverage@5")


@one_result_each
def losses_debtags(r: dict) -> dict[str, str]:
    """bench/losses_debtags.py: XR-Linear plain vs the missing-label losses, complete and drop-labels training."""
    out = {}
    rows = []
    for key, corpus in (("complete", "complete"), ("drop_labels", "drop-labels")):
        part = r[key]
        plain = part["rows"][0]
        for row in part["rows"]:
            cells = [corpus, row["variant"], row.get("propensities", "")]
            for col in LOSS_COLUMNS:
                text = f2(row[col])
                cells.append(text if row is plain else f"{text} ({signed(row[col] - plain[col])})")
            rows.append(cells + [f1(row["train_s"])])
    header = ["training set", "loss", "propensities", *LOSS_COLUMNS, "train s"]
    drop = r["drop_labels"]["drop"]
    # The script evaluates with xtag.evaluation.evaluate.ground_truth's default convention (xmc) and records it.
    conv = convention(r["complete"]) if r["complete"].get("convention") else CONVENTION_TEXT["xmc"]
    out["table"] = (
        table(header, "lll" + "r" * (len(LOSS_COLUMNS) + 1), rows)
        + f"\n\nDrop rule: {drop['rule']}; seed {drop['seed']}. {thousands(drop['positives_before'])} training "
        f"positives → {thousands(drop['positives_after'])} (kept {drop['kept_fraction_of_positives']:.1%}); "
        f"{thousands(drop['documents_without_labels_left_out'])} of {thousands(drop['train_documents'])} documents "
        f"lost every label and were left out; {drop['labels_before']} → {drop['labels_after']} labels. "
        "Every row is measured against the complete test labels. " + convention_line([conv])
    )
    rw = r["reweighting"]
    base = rw["rows"][0]
    rw_rows = []
    for row in rw["rows"]:
        cells = [row["training"], row["reweighting"]]
        for col in ("P@5", "PSP@5", "macro-R@5", "coverage@5"):
            cells.append(f2(row[col]) if row is base else f"{f2(row[col])} ({signed(row[col] - base[col])})")
        rw_rows.append(cells)
    out["reweighting"] = table(
        ["training loss", "per-request reweighting", "P@5", "PSP@5", "macro-R@5", "coverage@5"], "llrrrr", rw_rows
    ) + (
        f"\n\nTraining on complete debtags; `{rw['best']}` is the weighted loss with the highest macro-R@5 whose "
        "P@5 stays within one point of plain training. Reweighting re-ranks a widened beam of raw model scores "
        "(models/reweighting.py); changes are against plain training without reweighting."
    )
    return out


BUILDERS = {
    f.__name__: f
    for f in (
        xlinear_vs_pecos,
        xlinear_seeds,
        tree_swap,
        xlinear_validation,
        beam_1m,
        shortlist_vs_exact,
        service_latency,
        service_load,
        inline_vs_worker,
        tail_debtags,
        xr_transformer_debtags,
        xr_transformer_latency,
        xr_transformer_engine,
        lightxml_debtags,
        cascadexml_debtags,
        encoder_variants,
        losses_debtags,
    )
}
