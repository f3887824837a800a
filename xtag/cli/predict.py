"""`xtag predict`: top-k labels for one text or a corpus, with the service's per-request options.

Torch-free: it uses xtag.evaluation and the corpus reader (xtag.training.data), nothing else of training.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from xtag.cli.options import (
    BeamSize,
    BundleDir,
    CorpusFormat,
    ExcludeSelf,
    Progress,
    RayAddress,
    Resume,
    SkipBadRows,
    fail,
    failing,
    finish,
    load_bundle_or_fail,
    read_noting_skips,
    service_settings,
    warn,
)
from xtag.models.errors import XtagError
from xtag.models.label_texts import shown_fields

Opt = typer.Option
SHARD_ROWS = 20_000  # --shard-rows' default: a shard a worker reads, scores and writes in seconds


def predict(
    bundle: BundleDir,
    text: Annotated[str | None, typer.Argument(help="a text to tag")] = None,
    corpus: Annotated[
        Path | None, Opt(help="tag every document of a corpus instead (with --ray: a glob of files, quoted)")
    ] = None,
    format: CorpusFormat = "auto",
    k: Annotated[
        int | None,
        Opt(
            min=1,
            help="labels per text (default 10, at most the label count); above the label count or XTAG_MAX_K it is "
            "refused, as the service refuses it",
        ),
    ] = None,
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
    out: Annotated[
        Path | None, Opt(help="JSON lines output (default: stdout); with --ray: a folder, one file per shard")
    ] = None,
    explain: Annotated[
        bool, Opt("--explain", help="the words that raised each label's score (bundles with TF-IDF features)")
    ] = False,
    label_text: Annotated[
        bool,
        Opt(
            "--label-text",
            help="each label's name and description from the bundle's label file (the service's `label_text`)",
        ),
    ] = False,
    exclude_self: ExcludeSelf = False,
    skip_bad_rows: SkipBadRows = False,
    ray: RayAddress = None,
    out_format: Annotated[str, Opt(help="with --ray: each shard's file: jsonl | parquet")] = "jsonl",
    resume: Resume = False,
    shard_rows: Annotated[int, Opt(min=1, help="with --ray: corpus lines per shard")] = SHARD_ROWS,
    progress: Progress = True,
) -> None:
    """Top-k labels with scores for one text, or for a whole corpus as JSON lines.

    Scores keep the model's order (models/xlinear/readable.py): XR-Linear paths that clear every level's
    margin score 0.95-1, ordered by how far; equal scores are marked '=' (same order as the engine: larger
    summed margin, then label-tree order). With --reweight, labels are ranked by gain = a_j × score, shown too.

    --reweight/--alpha/--beta/--threshold mean what the service's per-request options mean
    (service/schemas.py) and run the same code (models/inference/reweighting.py).

    --exclude-self drops each document's own id from its labels when it is a label's name (the service's
    `exclude`, per document: models/inference/label_filter.py).

    --explain is the service's `explain` (models/explain/linear.py): under each label the text's terms that raised its
    score most over its path in the tree (TF-IDF value × ranker weight, summed over levels) and each level's
    margin; in JSON lines each label gets the service's `explanation` object.

    --label-text is the service's `label_text`: each label's name (its id when the bundle's label file gives none)
    and description, after the id on the text's lines, as `label` and `description` in JSON lines.
    """
    from xtag.corpus.files import load_corpus
    from xtag.models.tagging.tagger import Tagger, TagOptions, labels_per_text

    if (text is None) == (corpus is None):
        fail(XtagError("give either a TEXT or --corpus"))
    if exclude_self and corpus is None:
        fail(XtagError("--exclude-self needs the documents' ids: tag a corpus (--corpus)"))
    if ray is None and (resume, out_format, shard_rows) != (False, "jsonl", SHARD_ROWS):
        fail(XtagError("--resume, --out-format and --shard-rows are options of --ray's sharded output"))
    if ray is not None and (corpus is None or out is None):
        fail(XtagError("--ray scores a corpus: give --corpus 'GLOB' and --out FOLDER"))
    b = load_bundle_or_fail(bundle)
    with failing():  # the service's rule for k (models/tagging/tagger.py), XTAG_MAX_K included
        k = labels_per_text(k, b.predictor.n_labels, service_settings().limits.max_k)
    options = TagOptions(k, beam_size, reweight, alpha, beta, threshold, explain, label_text, exclude_self)
    if ray is not None:
        job = dict(corpus_format=format, out_format=out_format, resume=resume, skip_bad_rows=skip_bad_rows)
        return _on_ray(b, bundle, corpus, out, options, ray, job, shard_rows, progress)
    with failing():
        tagger = Tagger(b, options)  # refuses a bad option before predicting a whole corpus
        if text is not None:
            if not text.strip():
                raise XtagError("the text is empty")
            rows, explanations = tagger.tag([text])
            texts = b.predictor.label_texts if label_text else None
            _print_text(rows[0], tagger.gains, reweight, explanations[0], texts, label_text)
            return
        data = read_noting_skips(load_corpus(corpus, format, skip_bad=skip_bad_rows, need_labels=False))
        lines = tagger.json_rows(data.ids, data.texts, progress)
    _write_jsonl(lines, out)
    if out:
        finish(f"wrote {out}: top-{k} labels of each of {len(data.ids)} documents, as JSON lines")


def _on_ray(loaded, bundle: Path, corpus: Path, out: Path, options, address: str, job: dict, shard_rows, progress):
    """The corpus scored on a Ray cluster (cluster/batch_scoring.py), one output file per shard in `out`."""
    from xtag.cluster.batch_scoring import ScoringJob, score_on_ray
    from xtag.cluster.shards import plan_shards
    from xtag.models.tagging.tagger import Tagger

    with failing():
        Tagger(loaded, options)  # a bad bundle or option is refused before a cluster is joined
        shards = plan_shards(str(corpus), shard_rows)
        runtime = service_settings().runtime_options()
        spec = ScoringJob(bundle=bundle.resolve(), out=out.resolve(), options=options, runtime=runtime, **job)
        done = score_on_ray(spec, shards, address, progress)
    for note in done.skipped_notes:
        warn(note)
    kept = f" ({done.kept} kept from a previous run)" if done.kept else ""
    finish(f"wrote {out}: {done.written} shard files{kept}, top-{options.k} labels of {done.documents} documents")


def _print_text(
    row: list[tuple[int, str, float]],
    gains,
    scheme: str | None,
    explanations: list[dict | None],
    texts=None,
    label_text: bool = False,
) -> None:
    """`score  label` lines, best first; re-ranked, `gain  score  label`, since the gain is what ranks them.
    With --label-text each label's name and description follow its id (label_text_line), with --explain its
    explanation's line (explanation_line)."""
    if label_text:
        row = [(j, label_text_line(name, texts), s) for j, name, s in row]
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


def label_text_line(name: str, texts) -> str:
    """`id  —  name: description` (the description cut to one short line), or the id alone when its text adds nothing."""
    fields = shown_fields(texts, name)
    said = fields["label"] if fields["label"] != name else ""
    if fields["description"]:
        one_line = " ".join(fields["description"].split())
        said = f"{said}: {one_line}" if said else one_line
        said = said if len(said) <= 100 else said[:99] + "…"
    return f"{name}  —  {said}" if said else name


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


def _write_jsonl(lines: list[dict], out: Path | None) -> None:
    """The rows (models/tagging/tagger.py json_rows) as JSON lines, to `out` or stdout."""
    from xtag.models.tagging.tagger import to_jsonl

    sink = open(out, "w") if out else sys.stdout
    try:
        for line in lines:
            sink.write(to_jsonl(line))
    finally:
        if out:
            sink.close()
