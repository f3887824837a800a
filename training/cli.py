"""The `xtag` command line: data, train, export, evaluate, predict, serve."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from models.errors import XtagError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Extreme multi-label tagging: train, export, evaluate, predict and serve.")
data_app = typer.Typer(no_args_is_help=True, help="Build benchmark corpora.")
app.add_typer(data_app, name="data")


def _fail(exc: Exception) -> None:
    typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2)


@data_app.command("debtags")
def data_debtags(
    out: Path = typer.Option(..., help="folder for train.jsonl.gz and test.jsonl.gz"),
    lists: Path = typer.Option(Path("/var/lib/apt/lists"), help="apt lists folder"),
    update: bool = typer.Option(False, help="run `apt-get update -o Acquire::Languages=en` first (root)"),
) -> None:
    """Rebuild the debtags corpus from a Debian machine's apt lists (Packages ⨝ Translation-en)."""
    from training.debtags import build_debtags_corpus, update_apt_lists
    try:
        if update:
            update_apt_lists()
        stats = build_debtags_corpus(lists, out)
    except XtagError as exc:
        _fail(exc)
    typer.echo(json.dumps(stats))


@app.command()
def train(
    corpus: Optional[Path] = typer.Option(None, help="training corpus (JSONL[.gz], Annif TSV, AttentionXML *_texts.txt)"),
    out: Optional[Path] = typer.Option(None, help="run directory to write"),
    model: str = typer.Option("xlinear", help="model kind: xlinear"),
    config: Optional[Path] = typer.Option(None, help="training config JSON (see --print-config)"),
    print_config: bool = typer.Option(False, "--print-config", help="print the effective config and exit"),
    format: str = typer.Option("auto", help="auto | jsonl | tsv | attentionxml"),
    skip_bad_rows: bool = typer.Option(False, help="skip malformed rows (and report how many) instead of failing"),
    beam_size: Optional[int] = typer.Option(None, help="beam width (training shortlists and default at prediction)"),
    branching: Optional[int] = typer.Option(None, help="label tree branching factor B"),
    max_leaf_size: Optional[int] = typer.Option(None, help="max labels per leaf cluster"),
    negatives: Optional[str] = typer.Option(None, help="tfn | man | tfn+man"),
    loss: Optional[str] = typer.Option(None, help="squared-hinge | logistic"),
    C: Optional[float] = typer.Option(None, "--C", help="inverse L2 regularisation"),
    threshold: Optional[float] = typer.Option(None, help="weight pruning threshold"),
    threads: Optional[int] = typer.Option(None, help="training threads (0 = all cores)"),
    seed: Optional[int] = typer.Option(None, help="label tree seed"),
    resume: bool = typer.Option(False, help="continue an interrupted run in --out"),
    progress: bool = typer.Option(True, help="show progress bars"),
) -> None:
    """Train a model; writes a run directory (config, log, checkpoints, final model)."""
    from training.config import TrainConfig
    from training.run import train_run
    try:
        base = json.loads(config.read_text()) if config else {}
        if corpus:
            base["corpus"] = str(corpus)
        base.setdefault("model", model)
        if format != "auto":
            base["format"] = format
        if skip_bad_rows:
            base["skip_bad_rows"] = True
        xl = base.setdefault("xlinear", {})
        tree = xl.setdefault("tree", {})
        for key, value in {"beam_size": beam_size, "negatives": negatives, "loss": loss, "C": C,
                           "threshold": threshold, "n_jobs": threads}.items():
            if value is not None:
                xl[key] = value
        for key, value in {"branching": branching, "max_leaf_size": max_leaf_size, "seed": seed}.items():
            if value is not None:
                tree[key] = value
        if "corpus" not in base:
            raise XtagError("--corpus is required (or a config file that names one)")
        cfg = TrainConfig.model_validate(base)
    except (XtagError, ValueError, OSError) as exc:
        _fail(exc)
    if print_config:
        typer.echo(cfg.model_dump_json(indent=2))
        return
    if out is None:
        _fail(XtagError("--out is required"))
    try:
        summary = train_run(cfg, out, resume=resume, progress=progress,
                            echo=lambda e: typer.echo(json.dumps(e), err=True))
    except XtagError as exc:
        _fail(exc)
    typer.echo(json.dumps(summary))


@app.command()
def export(
    run: Path = typer.Argument(..., help="run directory written by `xtag train`"),
    out: Path = typer.Option(..., help="bundle directory to write"),
    name: Optional[str] = typer.Option(None, help="model name in the manifest (default: run folder name)"),
    overwrite: bool = typer.Option(False, help="replace an existing bundle"),
) -> None:
    """Turn a run into a self-describing serving bundle (manifest with versions and checksums)."""
    from training.export import export_run
    try:
        manifest = export_run(run, out, name, overwrite)
    except XtagError as exc:
        _fail(exc)
    typer.echo(f"bundle {out}: {manifest['model_kind']}, {manifest['label_count']} labels, "
               f"{len(manifest['files'])} files")


def _load(bundle: Path):
    from models.bundle import load_bundle
    try:
        return load_bundle(bundle)
    except XtagError as exc:
        _fail(exc)


@app.command("evaluate")
def evaluate_cmd(
    bundle: Path = typer.Argument(..., help="bundle directory"),
    corpus: Path = typer.Option(..., help="labelled corpus"),
    format: str = typer.Option("auto"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="write metrics as JSON (percent)"),
    ks: str = typer.Option("1,3,5", help="comma-separated k values"),
    beam_size: Optional[int] = typer.Option(None),
    skip_bad_rows: bool = typer.Option(False),
    propensity_a: float = typer.Option(0.55, help="Jain propensity A"),
    propensity_b: float = typer.Option(1.5, help="Jain propensity B"),
    progress: bool = typer.Option(True),
) -> None:
    """Evaluate a bundle: P@k, nDCG@k, PSP@k, PSnDCG@k, recall@k, macro-P/R/F1@k, coverage@k."""
    from training.data import load_corpus
    from training.evaluate import evaluate_bundle
    b = _load(bundle)
    try:
        k_values = tuple(sorted({int(k) for k in ks.split(",")}))
        if min(k_values) < 1:
            raise XtagError("k values must be positive")
        data = load_corpus(corpus, format, skip_bad=skip_bad_rows)
        metrics, info = evaluate_bundle(b, data, k_values, beam_size, propensity_a, propensity_b, progress)
    except (XtagError, ValueError) as exc:
        _fail(exc)
    names = sorted({m.split("@")[0] for m in metrics}, key=lambda s: list(metrics).index(f"{s}@{k_values[0]}"))
    typer.echo(f"{'metric':<10}" + "".join(f"{'@' + str(k):>9}" for k in k_values))
    for name in names:
        typer.echo(f"{name:<10}" + "".join(f"{metrics[f'{name}@{k}']:9.2f}" for k in k_values))
    typer.echo(f"({info['documents']} documents, {info['unknown_label_mentions']} label mentions unknown to the model)")
    if json_out:
        json_out.write_text(json.dumps({k: round(v, 4) for k, v in metrics.items()}, indent=2))


@app.command()
def predict(
    bundle: Path = typer.Argument(..., help="bundle directory"),
    text: Optional[str] = typer.Argument(None, help="a text to tag"),
    corpus: Optional[Path] = typer.Option(None, help="tag every document of a corpus instead"),
    format: str = typer.Option("auto"),
    k: int = typer.Option(10, min=1),
    beam_size: Optional[int] = typer.Option(None),
    out: Optional[Path] = typer.Option(None, help="JSON lines output (default: stdout)"),
    progress: bool = typer.Option(True),
) -> None:
    """Top-k labels with scores for one text, or for a whole corpus as JSON lines."""
    from training.data import load_corpus
    from training.evaluate import predict_corpus
    if (text is None) == (corpus is None):
        _fail(XtagError("give either a TEXT or --corpus"))
    b = _load(bundle)
    try:
        if text is not None:
            if not text.strip():
                raise XtagError("the text is empty")
            preds = b.predictor.predict([text], k=k, beam_size=beam_size)
            for _, name, score in b.predictor.named(preds)[0]:
                typer.echo(f"{score:.4f}  {name}")
            return
        data = load_corpus(corpus, format, need_labels=False)
        preds = predict_corpus(b, data.texts, k, beam_size, progress)
    except XtagError as exc:
        _fail(exc)
    sink = open(out, "w") if out else sys.stdout
    try:
        for doc_id, row in zip(data.ids, b.predictor.named(preds)):
            sink.write(json.dumps({"id": doc_id, "labels": [{"name": n, "score": round(s, 6)} for _, n, s in row]},
                                  ensure_ascii=False) + "\n")
    finally:
        if out:
            sink.close()


if __name__ == "__main__":
    app()
