"""Training and serving beside one CPU-bound competitor (issue 47, defect 8): before and after, with the pools."""

from __future__ import annotations

from .common import f2, ms, one_result_each, table

LABELS = {
    "lamp": ("LaMP training", "steps/s"),
    "xlinear": ("XR-Linear training", "docs/s"),
    "serve": ("`/v1/predict` p50", "ms"),
}
POOL_ROWS = (
    ("torch intra-op", "torch_intra_op"),
    ("torch inter-op", "torch_inter_op"),
    ("numba pool", "numba_pool"),
    ("XR-Linear trainer's workers", "xlinear_trainer_workers"),
    ("service predictor calls", "service_predictor_calls"),
    ("onnxruntime intra-op (encoder bundles)", "onnxruntime_intra_op"),
    ("OMP_WAIT_POLICY", "OMP_WAIT_POLICY"),
)


def _cell(value, metric: str) -> str:
    return ms(value) if metric == "p50_ms" else f2(value) if metric == "steps_per_s" else f"{value:,.0f}"


@one_result_each
def contention(r: dict) -> dict[str, str]:
    """bench/contention.py: quiet and beside `python -c 'while True: pass'`, each code's medians over the rounds."""
    present = {key.split("/")[0] for key in r["summary"]}
    what = {
        "lamp": f"LaMP on {r['lamp_corpus_docs']:,} debtags texts (steps/s between the run's first and last logged step)",
        "xlinear": f"XR-Linear on {r['xl_docs']:,} texts (docs/s of the model fit)",
        "serve": f"serving {r['requests']} one-text requests (k=5) to an XR-Linear bundle",
    }
    head = (
        f"{r['rounds']} rounds, each code and condition in turn; "
        + "; ".join(what[w] for w in LABELS if w in present)
        + f"; before = the code at {r['before_commit']}; load average (1 min) before each measure "
        f"{r['load_during']['min']}-{r['load_during']['max']} (other engineers' jobs shared the 2 CPUs)"
    )
    rows = []
    for key, s in r["summary"].items():
        workload, code = key.split("/")
        name, unit = LABELS[workload]
        base = r["summary"].get(f"{workload}/before")
        # after against before in the same condition, as a speed-up (a latency: before over after)
        faster = (
            [s[c] / base[c] if workload != "serve" else base[c] / s[c] for c in ("quiet", "competitor")]
            if base and code != "before"
            else None
        )
        rows.append(
            [
                name,
                code,
                unit,
                _cell(s["quiet"], s["metric"]),
                _cell(s["competitor"], s["metric"]),
                f"{100 * s['kept']:.0f} %",
                " / ".join(f"{x:.2f}×" for x in faster) if faster else "",
            ]
        )
    kept = table(
        ["workload", "code", "unit", "quiet", "beside one competitor", "kept", "speed vs before (quiet / competitor)"],
        "lllrrrr",
        rows,
    )
    codes = list(r["pools"])
    pools = table(
        ["pool", *codes],
        "l" + "r" * len(codes),
        [[label, *(str(r["pools"][c].get(key, "")) for c in codes)] for label, key in POOL_ROWS],
    )
    return {"table": "\n\n".join((head, kept, pools))}
