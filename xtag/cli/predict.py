"""`xtag predict`: top-k labels for one text or a corpus, with the service's per-request options.

Torch-free: it uses xtag.evaluation and the corpus reader (xtag.training.data), nothing else of training.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from xtag.cli.options import BundleDir, CorpusFormat, Progress, fail, failing, load_bundle_or_fail
from xtag.models.errors import XtagError

Opt = typer.Option
Rows = list[list[tuple[int, str, float]]]


def predict(
    bundle: BundleDir,
    text: Annotated[str | None, typer.Argument(help="a text to tag")] = None,
    corpus: Annotated[Path | None, Opt(help="tag every document of a corpus instead")] = None,
    format: CorpusFormat = "auto",
    k: Annotated[int, Opt(min=1)] = 10,
    beam_size: Annotated[int | None, Opt(min=1)] = None,
    reweight: Annotated[
        str | None, Opt(help="re-rank for tail labels, as the service's `reweight`: psp | power | macro-recall")
    ] = None,
    alpha: Annotated[
        float | None, Opt(min=0.0, max=1.0, help="with --reweight: 0 = plain scores, 1 = pure scheme")
    ] = None,
    beta: Annotated[float | None, Opt(min=0.0, max=10.0, help="with --reweight power: exponent (default 0.5)")] = None,
    threshold: Annotated[
        float | None, Opt(min=0.0, max=1.0, help="drop labels whose model score is below this (after re-ranking)")
    ] = None,
    out: Annotated[Path | None, Opt(help="JSON lines output (default: stdout)")] = None,
    progress: Progress = True,
) -> None:
    """Top-k labels with scores for one text, or for a whole corpus as JSON lines.

    --reweight/--alpha/--beta/--threshold mean what the service's per-request options mean
    (service/schemas.py) and run the same code (models/reweighting.py).
    """
    from xtag.evaluation.evaluate import predict_corpus
    from xtag.training.data.corpus import load_corpus

    if (text is None) == (corpus is None):
        fail(XtagError("give either a TEXT or --corpus"))
    b = load_bundle_or_fail(bundle)
    with failing():
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
    _write_jsonl(data.ids, _above(b.predictor.named(preds), threshold), out)


def _write_jsonl(ids: list, rows: Rows, out: Path | None) -> None:
    """One `{"id", "labels": [{"name", "score"}]}` line per document, to `out` or stdout."""
    sink = open(out, "w") if out else sys.stdout
    try:
        for doc_id, row in zip(ids, rows):
            labels = [{"name": n, "score": round(s, 6)} for _, n, s in row]
            sink.write(json.dumps({"id": doc_id, "labels": labels}, ensure_ascii=False) + "\n")
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


def _above(rows: Rows, threshold: float | None) -> Rows:
    """The service's `threshold`: labels whose score is below it are dropped (none without one)."""
    return rows if threshold is None else [[r for r in row if r[2] >= threshold] for row in rows]
