"""`xtag evaluate` and `xtag calibrate`: a bundle measured, or calibrated, on a labelled corpus.

Torch-free: they use xtag.evaluation and the corpus reader (xtag.training.data), nothing else of training.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from xtag.cli.options import (
    BeamSize,
    BundleDir,
    CorpusFormat,
    ExcludeSelf,
    Progress,
    PropensityA,
    PropensityB,
    SkipBadRows,
    failing,
    finish,
    load_bundle_or_fail,
    read_noting_skips,
)
from xtag.models.errors import XtagError
from xtag.models.propensity import DEFAULT_A, DEFAULT_B

Opt = typer.Option
CONVENTION_HELP = (
    "xmc: every test label mention counts (unseen-in-training labels are misses), macro metrics over the test "
    "split's labels, as published XMC figures | known-labels: unseen labels dropped, macro over all model labels "
    "(xtag before issue 14)"
)
OPTIMIZE_HELP = "also evaluate batch-level optimal predictions for macro-f1 | macro-recall"
METHOD_HELP = "bca (expected test utility) | fw (population utility, Frank-Wolfe)"
# Options that are ReportConfig settings of the same name (the report's other settings are built below).
REPORT_SETTINGS = (
    "report_k",
    "beam_size",
    "exclude_self",
    "propensity_a",
    "propensity_b",
    "convention",
    "per_label",
    "plots",
)
FLAG_OF = {  # ReportConfig / OptimizeConfig setting -> the flag that sets it, for one-line errors
    "beam_size": "--beam-size",
    "report_k": "--report-k",
    "convention": "--convention",
    "metric": "--optimize",
    "alpha": "--optimize-alpha",
    "method": "--optimize-method",
    "max_seconds": "--optimize-seconds",
}


def evaluate(
    ctx: typer.Context,
    bundle: BundleDir,
    corpus: Annotated[Path, Opt(help="labelled corpus")],
    format: CorpusFormat = "auto",
    json_out: Annotated[Path | None, Opt("--json", help="write metrics as JSON (percent)")] = None,
    ks: Annotated[str, Opt(help="comma-separated k values")] = "1,3,5",
    at_10: Annotated[bool, Opt("--at-10", help="also report every metric @10")] = False,
    beam_size: BeamSize = None,
    exclude_self: ExcludeSelf = False,
    skip_bad_rows: SkipBadRows = False,
    propensity_a: PropensityA = DEFAULT_A,
    propensity_b: PropensityB = DEFAULT_B,
    convention: Annotated[str, Opt(help=CONVENTION_HELP)] = "xmc",
    report_k: Annotated[int, Opt(min=1, help="k of the per-label, bucket, calibration and trade-off views")] = 5,
    per_label: Annotated[Path | None, Opt("--per-label", help="write per-label results (CSV)")] = None,
    plots: Annotated[Path | None, Opt("--plots", help="folder for PNG plots (buckets, reweighting trade-off)")] = None,
    optimize: Annotated[str | None, Opt("--optimize", help=OPTIMIZE_HELP)] = None,
    optimize_alpha: Annotated[float, Opt(help="weight of the macro metric against P@k (0-1)")] = 1.0,
    optimize_method: Annotated[str, Opt(help=METHOD_HELP)] = "bca",
    optimize_seconds: Annotated[float, Opt(help="time cap per k of the optimisation")] = 60.0,
    progress: Progress = True,
) -> None:
    """Evaluate a bundle: P@k, nDCG@k, PSP@k, PSnDCG@k, recall@k, macro-P/R/F1@k, coverage@k, by frequency bucket."""
    from xtag.corpus.files import load_corpus
    from xtag.evaluation.report import ReportConfig, build_report
    from xtag.models.inference.macro_optimal import OptimizeConfig
    from xtag.models.metrics import check_convention

    b = load_bundle_or_fail(bundle)
    with failing(ValueError, name=lambda setting: FLAG_OF.get(setting, setting)):
        check_convention(convention)
        opt = None
        if optimize is not None:
            opt = OptimizeConfig(
                metric=optimize, alpha=optimize_alpha, method=optimize_method, max_seconds=optimize_seconds
            )
        settings = {name: ctx.params[name] for name in REPORT_SETTINGS}
        config = ReportConfig(ks=_k_values(ks, at_10), optimize=opt, **settings)
        data = read_noting_skips(load_corpus(corpus, format, skip_bad=skip_bad_rows))
        report = build_report(b, data, config, progress)
    _print_report(report, config)
    if json_out:
        json_out.write_text(json.dumps({"convention": convention, **report.flat()}, indent=2))
    written = [str(json_out)] if json_out else []
    finish(
        f"evaluated {bundle} on {plural(report.info['documents'], 'document')}"
        + (f"; wrote {', '.join(written + [str(p) for p in report.files])}" if written or report.files else ""),
        f"xtag serve {bundle}",
    )


def _k_values(ks: str, at_10: bool) -> tuple[int, ...]:
    k_values = tuple(sorted({int(k) for k in ks.split(",")} | ({10} if at_10 else set())))
    if min(k_values) < 1:
        raise XtagError("k values must be positive")
    return k_values


def _table(values: dict[str, float], ks: tuple[int, ...]) -> None:
    names = sorted({m.split("@")[0] for m in values}, key=lambda s: list(values).index(f"{s}@{ks[0]}"))
    typer.echo(f"{'metric':<10}" + "".join(f"{'@' + str(k):>9}" for k in ks))
    for name in names:
        typer.echo(f"{name:<10}" + "".join(f"{values[f'{name}@{k}']:9.2f}" for k in ks))


def _print_report(report, config) -> None:
    """The report as `xtag evaluate` prints it: metrics, buckets, calibration, the optimised variant, files."""
    from xtag.models.metrics import BUCKETS, CONVENTIONS

    ks, k, opt = config.ks, config.report_k, config.optimize
    typer.echo(f"{CONVENTIONS[config.convention]}")
    _table(report.metrics, ks)
    info = report.info
    unknown = info["unknown_labels"]
    typer.echo(
        f"({plural(info['documents'], 'document')}; "
        + (
            f"{plural(info['unknown_label_mentions'], 'mention')} of {plural(unknown, 'label')} unknown to the model, "
            + ("counted as misses)" if config.convention == "xmc" else "dropped)")
            if unknown
            else "every test label is known to the model)"
        )
    )
    if config.exclude_self:
        typer.echo(f"(--exclude-self: {plural(info['excluded_self'], 'document')} never got their own id as a label)")
    cols = [f"micro-P@{k}", f"micro-R@{k}", f"macro-P@{k}", f"macro-R@{k}", f"macro-F1@{k}"]
    typer.echo(
        f"\nby training frequency (head / torso / tail = cumulative label mass 50 / 30 / 20 %; unseen labels: tail), @{k}:"
    )
    typer.echo(f"{'bucket':<10}{'labels':>7}" + "".join(f"{c:>14}" for c in cols))
    for name, rows in [("", report.buckets)] + (
        [("opt ", report.optimized_buckets)] if report.optimized_buckets else []
    ):
        for bucket in BUCKETS:
            row = rows[bucket]
            cells = "".join(f"{row[c]:14.2f}" if _defined(row, c) else f"{'n/a':>14}" for c in cols)
            typer.echo(f"{name + bucket:<10}{int(row['labels']):>7}" + cells)
    if report.label_groups is not None:
        typer.echo(f"\nlabels of the run this bundle was updated from / labels the update added (xtag update), @{k}:")
        typer.echo(f"{'labels':<10}{'count':>7}" + "".join(f"{c:>14}" for c in cols))
        for group, row in report.label_groups.items():
            cells = "".join(f"{row[c]:14.2f}" if _defined(row, c) else f"{'n/a':>14}" for c in cols)
            typer.echo(f"{group:<10}{int(row['labels']):>7}" + cells)
    typer.echo("calibration error (%): " + ", ".join(f"{n} {v:.2f}" for n, v in report.calibration.items()))
    if report.optimized is not None:
        typer.echo(f"\noptimised ({opt.method}, {opt.metric}, alpha {opt.alpha:g}); one optimisation per k:")
        _table(report.optimized, ks)
        typer.echo(
            "(" + "; ".join(f"@{r['k']}: {r['seconds']:.2f} s, {r['stopped']}" for r in report.optimize_runs) + ")"
        )


def _defined(row: dict, column: str) -> bool:
    """Whether a bucket's metric has anything to average: micro-P needs predictions in the bucket, micro-R test
    mentions, the macro ones labels they average over. Otherwise it is n/a, not a measured 0.00."""
    if column.startswith("micro-P"):
        return row["predicted"] > 0
    if column.startswith("micro-R"):
        return row["support"] > 0
    return row["averaged"] > 0


def plural(n: int, word: str) -> str:
    """'1 label', '2 labels'."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def calibrate(
    bundle: Annotated[Path, typer.Argument(help="bundle directory (rewritten in place: calibration.json + manifest)")],
    corpus: Annotated[Path | None, Opt(help="labelled validation corpus the model was NOT trained on")] = None,
    format: CorpusFormat = "auto",
    beam_size: Annotated[
        int | None,
        Opt(help="beam width of the candidates it is fitted on (default: twice the bundle's, as reweighting uses)"),
    ] = None,
    skip_bad_rows: SkipBadRows = False,
    remove: Annotated[bool, Opt(help="remove the bundle's calibration instead")] = False,
    progress: Progress = True,
) -> None:
    """Fit an isotonic score calibration on a validation corpus so scores (and `threshold`) are probabilities."""
    from xtag.corpus.files import load_corpus
    from xtag.evaluation.calibrate import fit_bundle_calibration, write_calibration

    b = load_bundle_or_fail(bundle)
    with failing(ValueError, OSError):
        if remove:
            write_calibration(bundle, None)
            finish(f"{bundle}: calibration removed, manifest rewritten", f"xtag serve {bundle}")
            return
        if corpus is None:
            raise XtagError("--corpus is required (a validation split, never the test set)")
        data = read_noting_skips(load_corpus(corpus, format, skip_bad=skip_bad_rows))
        cal = fit_bundle_calibration(b, data, beam_size, progress)
        write_calibration(bundle, cal)
    info = cal.fitted_on
    typer.echo(
        f"{bundle}: isotonic calibration, {len(cal.x)} breakpoints, fitted on {info['pairs']} candidates of "
        f"{info['documents']} documents; ECE on them {info['ece_before_fit']:.2f} % -> "
        f"{info['ece_after_fit']:.2f} % (in-sample)"
    )
    finish(f"wrote {bundle}/calibration.json and its manifest entry", f"xtag serve {bundle}")
