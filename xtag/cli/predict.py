"""`xtag predict`: top-k labels for one text or a corpus, with the service's per-request options.

Torch-free: it uses xtag.evaluation and the corpus reader (xtag.training.data), nothing else of training.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from xtag.cli.options import BeamSize, BundleDir, CorpusFormat, Progress, fail, failing, finish, load_bundle_or_fail
from xtag.models.errors import XtagError

Opt = typer.Option
Rows = list[list[tuple[int, str, float]]]


def predict(
    bundle: BundleDir,
    text: Annotated[str | None, typer.Argument(help="a text to tag")] = None,
    corpus: Annotated[Path | None, Opt(help="tag every document of a corpus instead")] = None,
    format: CorpusFormat = "auto",
    k: Annotated[int, Opt(min=1, help="labels per text")] = 10,
    beam_size: BeamSize = None,
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
    explain: Annotated[
        bool, Opt("--explain", help="the words that raised each label's score (bundles with TF-IDF features)")
    ] = False,
    progress: Progress = True,
) -> None:
    """Top-k labels with scores for one text, or for a whole corpus as JSON lines.

    Scores keep the model's order (models/xlinear/readable.py): XR-Linear paths that clear every level's
    margin score 0.95-1, ordered by how far; equal scores are marked '=' (same order as the engine: larger
    summed margin, then label-tree order). With --reweight, labels are ranked by gain = a_j × score, shown too.

    --reweight/--alpha/--beta/--threshold mean what the service's per-request options mean
    (service/schemas.py) and run the same code (models/inference/reweighting.py).

    --explain is the service's `explain` (models/explain/linear.py): under each label the text's terms that raised its
    score most over its path in the tree (TF-IDF value × ranker weight, summed over levels) and each level's
    margin; in JSON lines each label gets the service's `explanation` object.
    """
    from xtag.models.inference.corpus import predict_corpus
    from xtag.training.data.corpus import load_corpus

    if (text is None) == (corpus is None):
        fail(XtagError("give either a TEXT or --corpus"))
    b = load_bundle_or_fail(bundle)
    with failing():
        gains = _reweight_gains(b.predictor, reweight, alpha, beta)
        explainer = _explainer(b.predictor) if explain else None  # refused before predicting a whole corpus
        if text is not None:
            if not text.strip():
                raise XtagError("the text is empty")
            preds = predict_corpus(b, [text], k, beam_size, progress=False, gains=gains)
            rows = _above(b.predictor.named(preds), threshold)
            _print_text(rows[0], gains, reweight, _explanations(explainer, [text], rows)[0])
            return
        data = load_corpus(corpus, format, need_labels=False)
        preds = predict_corpus(b, data.texts, k, beam_size, progress, gains=gains)
        rows = _above(b.predictor.named(preds), threshold)
        explanations = _explanations(explainer, data.texts, rows)
    _write_jsonl(data.ids, rows, gains, out, explanations)
    if out:
        finish(f"wrote {out}: top-{k} labels of each of {len(data.ids)} documents, as JSON lines")


def _explainer(predictor):
    """The bundle's explainer; a bundle with nothing to explain with is a one-line error (ExplainUnavailable)."""
    from xtag.models.explain.select import explainer_for

    return explainer_for(predictor)


def _explanations(explainer, texts: list[str], rows: Rows) -> list[list[dict | None]]:
    """Each shown label's explanation (models/explain/linear.py) with --explain, else None for every label."""
    if explainer is None:
        return [[None] * len(row) for row in rows]
    return explainer.explain(texts, [[j for j, _, _ in row] for row in rows])


def _print_text(row: list[tuple[int, str, float]], gains, scheme: str | None, explanations: list[dict | None]) -> None:
    """`score  label` lines, best first; re-ranked, `gain  score  label`, since the gain is what ranks them.
    With --explain each label is followed by its explanation's line (explanation_line)."""
    if gains is None:
        shown = score_texts([s for _, _, s in row])
        lines = [f"{text}  {name}" for text, (_, name, _) in zip(shown, row)]
    else:
        shown = score_texts([gains[j] * s for j, _, s in row])
        typer.echo(f"{'gain':<9} {'score':<7} label   (ranked by gain = a_j × score, --reweight {scheme})")
        lines = [f"{text:<9} {score:.4f}  {name}" for text, (_, name, score) in zip(shown, row)]
    for line, explanation in zip(lines, explanations):
        typer.echo(line)
        if explanation is not None:
            typer.echo(explanation_line(explanation))
    if any(text.endswith("=") for text in shown):
        typer.echo(TIE_NOTE)


TIE_NOTE = "(= the same score as the label above: equal scores are ordered by the larger summed ranker margin, then label-tree order)"


def score_texts(scores: list[float]) -> list[str]:
    """Scores with 4 decimals, more (up to 7) where a different neighbour would otherwise print the same; a
    score exactly equal to the one above prints as it does, with a trailing '=': a tie is never hidden."""
    out: list[str] = []
    for i, s in enumerate(scores):
        if i and scores[i - 1] == s:
            out.append(out[-1].rstrip("=") + "=")
            continue
        near = [scores[j] for j in (i - 1, i + 1) if 0 <= j < len(scores) and scores[j] != s]
        digits = next((d for d in range(4, 8) if all(f"{s:.{d}f}" != f"{o:.{d}f}" for o in near)), 7)
        out.append(f"{s:.{digits}f}")
    return out


def explanation_line(explanation: dict) -> str:
    """`    words: game +1.712, shooter +0.620 · margins 1.442, 0.555`: the top words, then each level's margin;
    a LaMP bundle's adds `· attended: game 0.412 · with: games::fps 0.231` (and a note where it has one)."""
    parts = []
    if "words" in explanation:
        words = ", ".join(f"{w['term']} {w['contribution']:+.3f}" for w in explanation["words"]) or "(none)"
        margins = ", ".join(f"{level['margin']:.3f}" for level in explanation["levels"])
        parts.append(f"words: {words} · margins {margins}")
    if "attended_words" in explanation:
        attended = ", ".join(f"{w['term']} {w['weight']:.3f}" for w in explanation["attended_words"]) or "(none)"
        parts.append(f"attended: {attended}")
    if "supporting_labels" in explanation:
        support = ", ".join(f"{s['name']} {s['weight']:.3f}" for s in explanation["supporting_labels"]) or "(none)"
        parts.append(f"with: {support}")
    if "note" in explanation:
        parts.append(f"({explanation['note']})")
    return "    " + " · ".join(parts)


def _write_jsonl(ids: list, rows: Rows, gains, out: Path | None, explanations: list[list[dict | None]]) -> None:
    """One `{"id", "labels": [{"name", "score"(, "gain")(, "explanation")}]}` line per document, to `out` or
    stdout; with --reweight each label also carries the gain it was ranked by, with --explain its explanation."""
    sink = open(out, "w") if out else sys.stdout
    try:
        for doc_id, row, explained in zip(ids, rows, explanations):
            labels = [
                {
                    "name": n,
                    "score": round(s, 6),
                    **({} if gains is None else {"gain": round(float(gains[j] * s), 6)}),
                    **({} if e is None else {"explanation": e}),
                }
                for (j, n, s), e in zip(row, explained)
            ]
            sink.write(json.dumps({"id": doc_id, "labels": labels}, ensure_ascii=False) + "\n")
    finally:
        if out:
            sink.close()


def _reweight_gains(predictor, scheme: str | None, alpha: float | None, beta: float | None):
    """The gains a_j of a reweighting request, as the service derives them (None: plain scores, also at alpha 0)."""
    from xtag.models.inference.reweighting import SCHEMES, gains_for, label_weights

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
