"""The evaluation report behind `xtag evaluate`: where a model stands on tail labels, and what it can trade.

Beyond the metrics table it gives per-label results (CSV), metrics by label-frequency bucket
(models/metrics.frequency_buckets: head / torso / tail by cumulative training mass 50 % / 30 % /
20 %), the calibration error of the scores it returns, PNG plots (precision and recall by bucket;
the reweighting trade-off: P@k against macro-F1@k and macro-recall@k as alpha sweeps 0 → 1, one
curve per scheme of models/inference/reweighting.py), and the metrics of batch-level macro-optimal
predictions (models/inference/macro_optimal.py). Everything reuses one prediction pass (plus one widened
pass for the plots and the optimisation), like the service would make them.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field
from xtag.corpus.files import Corpus
from xtag.evaluation.evaluate import ground_truth
from xtag.models.bundle.loader import Bundle
from xtag.models.inference.calibration import expected_calibration_error, scored_pairs
from xtag.models.inference.label_filter import self_filters
from xtag.models.inference.macro_optimal import OptimizeConfig, optimize
from xtag.models.inference.reweighting import SCHEMES, candidate_budget, gains_for, label_weights, rerank
from xtag.models.inference.types import Predictions
from xtag.models.metrics import (
    BUCKETS,
    CONVENTIONS,
    DEFAULT_CONVENTION,
    HEAD_MASS,
    TORSO_MASS,
    Convention,
    bucket_metrics,
    evaluate,
    frequency_buckets,
    per_label_metrics,
    relevance,
)
from xtag.models.tagging.batches import predict_corpus

DEFAULT_ALPHAS: tuple[float, ...] = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
OPTIMIZED_CURVE_ALPHAS: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


class ReportConfig(BaseModel):
    """What `xtag evaluate` computes and writes."""

    model_config = ConfigDict(extra="forbid")

    ks: tuple[int, ...] = (1, 3, 5)
    report_k: int = Field(5, ge=1, description="k of the per-label, bucket, calibration and trade-off views")
    beam_size: int | None = Field(None, ge=1)
    exclude_self: bool = Field(False, description="a document whose id is a label's name never gets that label")
    propensity_a: float = 0.55
    propensity_b: float = 1.5
    convention: Convention = Field(DEFAULT_CONVENTION, description=" | ".join(CONVENTIONS))
    per_label: Path | None = None
    plots: Path | None = None
    alphas: tuple[float, ...] = DEFAULT_ALPHAS
    optimize: OptimizeConfig | None = None


@dataclass
class Report:
    """Percentages throughout; `optimized*` only with an OptimizeConfig, `tradeoff` only with plots."""

    metrics: dict[str, float]
    buckets: dict[str, dict[str, float]]
    calibration: dict[str, float]
    info: dict
    optimized: dict[str, float] | None = None
    optimized_buckets: dict[str, dict[str, float]] | None = None
    optimize_runs: list[dict] = field(default_factory=list)
    tradeoff: dict[str, list[dict[str, float]]] | None = None
    files: list[Path] = field(default_factory=list)
    label_groups: dict[str, dict[str, float]] | None = None  # old / new labels of an updated bundle (xtag update)

    def flat(self) -> dict[str, float]:
        """One flat JSON-able dict: the metrics, then `bucket/metric`, ECE and `optimized/metric` entries
        (all numbers; `xtag evaluate --json` adds the convention beside them)."""
        out = dict(self.metrics)
        out.update({f"{b}/{m}": v for b, row in self.buckets.items() for m, v in row.items() if "@" in m})
        out.update(self.calibration)
        if self.label_groups is not None:
            out.update({f"{g}/{m}": v for g, row in self.label_groups.items() for m, v in row.items() if "@" in m})
        if self.optimized is not None:
            out.update({f"optimized/{m}": v for m, v in self.optimized.items()})
        return {k: round(float(v), 4) for k, v in out.items()}


def tradeoff_curves(
    plain: Predictions,
    candidates: Predictions,
    Y: sp.csr_matrix,
    frequencies: np.ndarray,
    n_docs: int,
    k: int,
    alphas: tuple[float, ...] = DEFAULT_ALPHAS,
    convention: str = DEFAULT_CONVENTION,
) -> dict[str, list[dict[str, float]]]:
    """P@k, macro-recall@k and macro-F1@k of per-document reweighting per scheme and alpha (alpha 0 = plain).

    `frequencies` are the model's labels' (the weights); Y may have further columns (unseen test labels).
    """
    curves: dict[str, list[dict[str, float]]] = {}
    for scheme in SCHEMES:
        w = label_weights(frequencies, n_docs, scheme)
        points = []
        for alpha in alphas:
            labels = plain.labels if alpha == 0 else rerank(candidates, gains_for(w, alpha), k)[0].labels
            m = evaluate(labels[:, :k], Y, (k,), convention=convention)
            points.append(
                {
                    "alpha": float(alpha),
                    f"P@{k}": m[f"P@{k}"],
                    f"macro-R@{k}": m[f"macro-R@{k}"],
                    f"macro-F1@{k}": m[f"macro-F1@{k}"],
                }
            )
        curves[scheme] = points
    return curves


def optimized_curve(
    candidates: Predictions,
    Y: sp.csr_matrix,
    k: int,
    n_labels: int,
    config: OptimizeConfig,
    alphas: tuple[float, ...] = OPTIMIZED_CURVE_ALPHAS,
    convention: str = DEFAULT_CONVENTION,
) -> list[dict[str, float]]:
    """The same points for batch-level optimisation of config.metric mixed with P@k (alpha 0 = plain top-k)."""
    points = []
    for alpha in alphas:
        res = optimize(candidates.labels, candidates.scores, k, n_labels, config.model_copy(update={"alpha": alpha}))
        m = evaluate(res.labels, Y, (k,), convention=convention)
        points.append(
            {
                "alpha": float(alpha),
                f"P@{k}": m[f"P@{k}"],
                f"macro-R@{k}": m[f"macro-R@{k}"],
                f"macro-F1@{k}": m[f"macro-F1@{k}"],
                "seconds": res.seconds,
            }
        )
    return points


def write_per_label_csv(
    path: Path,
    names: list[str],
    frequencies: np.ndarray,
    buckets: np.ndarray,
    plain: dict[str, np.ndarray],
    optimized: dict[str, np.ndarray] | None = None,
) -> None:
    """One row per label: name, training frequency, bucket, support, predicted, tp, precision, recall, f1
    (fractions), and the same counts and rates of the optimised predictions as opt_* columns."""
    cols = ["predicted", "tp", "precision", "recall", "f1"]
    header = ["label", "train_frequency", "bucket", "support", *cols]
    if optimized is not None:
        header += [f"opt_{c}" for c in cols]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for j, name in enumerate(names):
            row = [name, int(frequencies[j]), BUCKETS[buckets[j]], int(plain["support"][j])]
            for src in [plain] + ([optimized] if optimized is not None else []):
                row += [
                    int(src["predicted"][j]),
                    int(src["tp"][j]),
                    *(round(float(src[c][j]), 6) for c in ("precision", "recall", "f1")),
                ]
            w.writerow(row)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_buckets(
    path: Path, buckets: dict[str, dict[str, float]], k: int, optimized: dict[str, dict[str, float]] | None = None
) -> None:
    """Grouped bars: macro-precision and macro-recall at k per frequency bucket (optimised beside, hatched)."""
    plt = _pyplot()
    series = [("plain", buckets)] + ([("optimised", optimized)] if optimized else [])
    bars = [
        (f"{metric[6]} {tag}", [src[b][f"{metric}@{k}"] for b in BUCKETS], hatch)
        for tag, src, hatch in ((t, s, "//" if t == "optimised" else "") for t, s in series)
        for metric in ("macro-P", "macro-R")
    ]
    fig, ax = plt.subplots(figsize=(7, 4))
    x, width = np.arange(len(BUCKETS)), 0.8 / len(bars)
    for i, (label, values, hatch) in enumerate(bars):
        ax.bar(
            x + (i - (len(bars) - 1) / 2) * width,
            values,
            width,
            label=f"macro-{label}",
            hatch=hatch,
            color=f"C{i % 2}",
            alpha=0.55 if hatch else 0.9,
        )
    ax.set_xticks(x, [f"{b}\n({int(buckets[b]['labels'])} labels)" for b in BUCKETS])
    ax.set_ylabel(f"% @ {k}")
    ax.set_title(
        f"Precision and recall by label frequency (cumulative training mass "
        f"{int(HEAD_MASS * 100)}/{int((TORSO_MASS - HEAD_MASS) * 100)}/{int(round((1 - TORSO_MASS) * 100))} %)",
        fontsize=9,
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_tradeoff(path: Path, curves: dict[str, list[dict[str, float]]], k: int, title: str = "") -> None:
    """P@k (y) against macro-F1@k and macro-recall@k (x), one line per scheme, markers at each alpha."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, metric in zip(axes, (f"macro-F1@{k}", f"macro-R@{k}")):
        for i, (name, points) in enumerate(curves.items()):
            xs, ys = [p[metric] for p in points], [p[f"P@{k}"] for p in points]
            ax.plot(xs, ys, marker="o", ms=3, color=f"C{i}", label=name)
            ax.annotate(f"α={points[-1]['alpha']:g}", (xs[-1], ys[-1]), fontsize=7, color=f"C{i}")
        ax.plot(
            [curves[next(iter(curves))][0][metric]],
            [curves[next(iter(curves))][0][f"P@{k}"]],
            "k*",
            ms=10,
            label="plain top-k",
        )
        ax.set_xlabel(f"{metric} (%)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"P@{k} (%)")
    axes[0].legend(fontsize=8)
    fig.suptitle(title or f"Trade-off as alpha sweeps 0 → 1 (k = {k})", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _calibrated(bundle: Bundle, raw: Predictions) -> Predictions:
    cal = bundle.predictor.calibration
    return raw if cal is None else Predictions(raw.labels, cal.apply(raw.scores))


def updated_label_groups(bundle: Bundle, pred, Y, k: int, convention: str) -> dict | None:
    """For a bundle made by `xtag update`: the bucket view over its old labels and the labels the update added
    (ids from `old_labels` on, training/update_run.py); None for any other bundle. Test labels unknown to the
    model are in neither group."""
    update = bundle.manifest.get("training", {}).get("summary", {}).get("update")
    if not update:
        return None
    old, n_model = int(update["old_labels"]), bundle.predictor.n_labels
    ids = np.arange(Y.shape[1])
    groups = np.where(ids < old, 0, np.where(ids < n_model, 1, -1))
    return bucket_metrics(pred, Y, k, groups, convention, names=("old", "new"))


def build_report(bundle: Bundle, corpus: Corpus, config: ReportConfig, progress: bool = True) -> Report:
    """Predict once (and once widened when plots or optimisation need candidates), then compute every view."""
    p = bundle.predictor
    vocab, L = p.vocab, p.n_labels
    ks = tuple(sorted(set(config.ks)))
    k = config.report_k
    if min(ks) < 1 or max(max(ks), k) > L:
        raise ValueError(f"k values must lie between 1 and the label count {L}")
    conv = config.convention
    truth = ground_truth(corpus, vocab, conv, config.propensity_a, config.propensity_b)
    Y, freq, propensity = truth.Y, truth.frequencies, truth.propensity  # model labels, then unseen ones (xmc)
    beam = config.beam_size or p.model.config.beam_size
    filters = self_filters(corpus.ids, vocab) if config.exclude_self else None
    raw = predict_corpus(
        bundle, corpus.texts, max(max(ks), k), config.beam_size, progress, calibrated=False, filters=filters
    )
    plain = _calibrated(bundle, raw)
    metrics = evaluate(plain.labels, Y, ks, propensity, conv)
    buckets = frequency_buckets(freq)  # an unseen label (frequency 0) is tail
    top = plain.labels[:, :k]
    hits = relevance(top, Y)
    calibration = {f"ECE@{k}": expected_calibration_error(*scored_pairs(top, plain.scores[:, :k], hits))}
    if p.calibration is not None:
        calibration[f"ECE@{k}-uncalibrated"] = expected_calibration_error(*scored_pairs(top, raw.scores[:, :k], hits))
    report = Report(
        metrics=metrics,
        buckets=bucket_metrics(plain.labels, Y, k, buckets, conv),
        calibration=calibration,
        info={
            "documents": len(corpus),
            "convention": conv,
            "unknown_label_mentions": truth.unseen_mentions,
            "unknown_labels": truth.unseen_labels,
            "skipped_rows": corpus.skipped,
            "calibrated": p.calibration is not None,
            "report_k": k,
            "excluded_self": 0 if filters is None else sum(f is not None for f in filters),
        },
    )
    report.label_groups = updated_label_groups(bundle, plain.labels, Y, k, conv)
    opt_counts = None
    if config.optimize is not None or config.plots is not None:
        k_cand, wide = candidate_budget(max(max(ks), k), beam, L)
        cand = _calibrated(
            bundle, predict_corpus(bundle, corpus.texts, k_cand, wide, progress, calibrated=False, filters=filters)
        )
        report.info.update(candidates=k_cand, candidate_beam=wide)
    if config.optimize is not None:
        report.optimized = {}
        for kk in sorted(set(ks) | {k}):
            res = optimize(cand.labels, cand.scores, kk, L, config.optimize)
            if kk in ks:
                report.optimized.update(evaluate(res.labels, Y, (kk,), propensity, conv))
            if kk == k:
                opt_labels = res.labels
            report.optimize_runs.append(
                {
                    "k": kk,
                    "seconds": round(res.seconds, 3),
                    "steps": res.steps,
                    "stopped": res.stopped,
                    "objective_start": res.objective_start,
                    "objective": res.objective,
                }
            )
        report.optimized_buckets = bucket_metrics(opt_labels, Y, k, buckets, conv)
        opt_counts = per_label_metrics(opt_labels, Y, k)
    if config.per_label is not None:
        write_per_label_csv(
            config.per_label, truth.names, freq, buckets, per_label_metrics(plain.labels, Y, k), opt_counts
        )
        report.files.append(config.per_label)
    if config.plots is not None:
        report.tradeoff = tradeoff_curves(
            plain, cand, Y, vocab.frequency_array, vocab.n_train_docs, k, config.alphas, conv
        )
        curves = dict(report.tradeoff)
        if config.optimize is not None:
            curves[f"{config.optimize.method} {config.optimize.metric}"] = optimized_curve(
                cand, Y, k, L, config.optimize, convention=conv
            )
        for name, draw in (
            ("buckets.png", lambda f: plot_buckets(f, report.buckets, k, report.optimized_buckets)),
            ("tradeoff.png", lambda f: plot_tradeoff(f, curves, k)),
        ):
            draw(config.plots / name)
            report.files.append(config.plots / name)
    return report
