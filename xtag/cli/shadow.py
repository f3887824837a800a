"""`xtag shadow report`: how each shadow compares with its primary, read from a server's /metrics.

The figures are the service's shadow series (service/state/shadow.py); with several workers each one's gauges are
averaged and the counters summed, as Prometheus would over the same scrape."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Annotated

import typer

from xtag.cli.options import echo_json, fail

app = typer.Typer(no_args_is_help=True, help="Shadow scoring: a new model scoring live traffic beside the served one.")

COUNTERS = {
    "xtag_shadow_documents_total": "documents",
    "xtag_shadow_shed_documents_total": "shed_documents",
    "xtag_shadow_unserved_documents_total": "unserved_documents",
    "xtag_shadow_errors_total": "errors",
}
MEANS = {
    "xtag_shadow_top1_agreement": "top1_agreement",
    "xtag_shadow_overlap_at_k": "overlap_at_k",
    "xtag_shadow_rank_correlation": "rank_correlation",
    "xtag_shadow_feedback_documents": "feedback_documents",
}


def pairs_from_metrics(text: str) -> list[dict]:
    """One dict per (model, shadow) pair from a Prometheus exposition: counts, agreement means and live P@k."""
    from prometheus_client.parser import text_string_to_metric_families

    counts: dict = defaultdict(lambda: defaultdict(float))
    means: dict = defaultdict(lambda: defaultdict(list))
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if "shadow" not in s.labels or "model" not in s.labels:
                continue
            pair = (s.labels["model"], s.labels["shadow"])
            if s.name in COUNTERS:
                counts[pair][COUNTERS[s.name]] += s.value
            elif s.name in MEANS:
                means[pair][MEANS[s.name]].append(s.value)
            elif s.name == "xtag_shadow_live_precision":
                means[pair][(s.labels["scored"], f"P@{s.labels['k']}")].append(s.value)
    out = []
    for pair in sorted(set(counts) | set(means)):
        row = {"model": pair[0], "shadow": pair[1], **{k: int(v) for k, v in counts[pair].items()}, "live": {}}
        for key, values in means[pair].items():
            value = round(sum(values) / len(values), 4)
            if isinstance(key, tuple):
                row["live"].setdefault(key[0], {})[key[1]] = value
            else:
                row[key] = value
        out.append(row)
    return out


def render(row: dict) -> str:
    figure = lambda key: "–" if row.get(key) is None else f"{row[key]:.3f}"  # noqa: E731
    lines = [
        f"{row['shadow']} shadowing {row['model']}: {row.get('documents', 0)} documents compared, "
        f"{row.get('shed_documents', 0)} shed, "
        + (f"{row['unserved_documents']} while the shadow was not served, " if row.get("unserved_documents") else "")
        + f"{row.get('errors', 0)} errors",
        f"  top-1 agreement {figure('top1_agreement')}   overlap@k {figure('overlap_at_k')}   "
        f"rank correlation {figure('rank_correlation')}",
    ]
    live = row["live"]
    if live:
        ks = sorted({k for values in live.values() for k in values}, key=lambda k: int(k[2:]))
        lines.append(f"  live, on {int(row.get('feedback_documents', 0))} documents with feedback: " + "  ".join(ks))
        for name in (row["model"], row["shadow"]):
            values = live.get(name, {})
            cells = "  ".join(f"{values[k]:6.2f}" if k in values else "     –" for k in ks)
            lines.append(f"    {name:<24} {cells}")
    else:
        lines.append("  live P@k: no compared document has corrected labels in the feedback store")
    return "\n".join(lines)


@app.command("report")
def report(
    url: Annotated[str, typer.Option(help="the server's base URL (its /metrics is read)")] = "http://127.0.0.1:8000",
    metrics_file: Annotated[
        Path | None, typer.Option("--metrics-file", help="read a saved /metrics exposition instead of a server")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the pairs as JSON")] = False,
    timeout: Annotated[float, typer.Option(help="seconds to wait for the server")] = 10.0,
) -> None:
    """Print each shadow's agreement with its primary and both models' live P@k (from the service's metrics)."""
    import urllib.error
    import urllib.request

    from xtag.models.errors import XtagError

    if metrics_file is not None:
        try:
            text = metrics_file.read_text()
        except OSError as exc:
            fail(XtagError(f"{metrics_file}: {exc.strerror or exc}"))
    else:
        target = url.rstrip("/") + "/metrics"
        try:
            with urllib.request.urlopen(target, timeout=timeout) as answer:  # noqa: S310  (an operator's URL)
                text = answer.read().decode()
        except (urllib.error.URLError, OSError, ValueError) as exc:
            fail(XtagError(f"{target}: cannot read the metrics ({getattr(exc, 'reason', None) or exc})"))
    rows = pairs_from_metrics(text)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        fail(XtagError("no shadow is declared on that server (no xtag_shadow_* series)"))
    typer.echo("\n\n".join(render(row) for row in rows))
