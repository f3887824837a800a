"""XR-Linear tables: xtag beside PECOS, label-tree seeds and swaps, validation variants, the 1M-label beam."""

from __future__ import annotations

from .common import (
    METRICS,
    bold,
    convention,
    convention_line,
    f1,
    f2,
    one_result_each,
    payloads,
    sig3,
    signed,
    table,
    thousands,
)


@one_result_each
def xlinear_seeds(r: dict) -> dict[str, str]:
    """xtag and PECOS per label-tree seed, then each library's mean (bench/xlinear_seeds.py)."""
    rows = [[row["library"], str(row["seed"])] + [f2(row["metrics"][m]) for m in METRICS] for row in r["rows"]]
    for lib in ("xtag", "PECOS"):
        rows.append([bold(f"{lib}, mean"), ""] + [bold(f2(r["means"][lib][m])) for m in METRICS])
    rows.append(["mean difference", ""] + [signed(r["means"]["xtag"][m] - r["means"]["PECOS"][m]) for m in METRICS])
    text = table(["library", "tree seed", *METRICS], "ll" + "r" * len(METRICS), rows)
    return {"table": f"{r['data']}:\n\n{text}\n\n{convention_line([convention(r)])}"}


@one_result_each
def tree_swap(r: dict) -> dict[str, str]:
    """Both libraries' rankers on both libraries' trees (seed means), then what each tree is (bench/experiments/tree_swap.py)."""
    acc = [
        [tree, rankers] + [f2(r["means"][f"{tree} tree, {rankers} rankers"][m]) for m in METRICS]
        for tree in ("xtag", "PECOS")
        for rankers in ("xtag", "PECOS")
    ]
    seeds = sorted({row["seed"] for row in r["rows"]})
    accuracy = table(["tree", "rankers", *METRICS], "ll" + "r" * len(METRICS), acc)
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
    metrics = [m for m in (*METRICS, "nDCG@5", "macro-R@5") if m in ours]
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
