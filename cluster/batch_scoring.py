"""Distributed batch scoring: a corpus's shards (cluster/shards.py) scored in a Ray Data actor pool.

Each actor loads the bundle once (memory-mapped arrays) and runs the local path's Tagger, so every row is the
row `xtag predict --corpus` writes. The actors read their own shards with the local reader (corpus/files.py:
the same checks, the same file:line errors), so texts never cross the object store; only shard numbers go in and
one small summary per shard comes back. A shard's file is written beside its name and renamed into place whole:
a rerun with --resume keeps exactly the shards whose file is there, and a worker killed mid-write leaves none.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm
from xtag.cluster.connect import ray_cluster
from xtag.cluster.shards import OUT_FORMATS, Shard, clear_partial_writes, unfinished
from xtag.models.errors import XtagError
from xtag.models.features.device import RuntimeOptions
from xtag.models.tagging.tagger import Tagger, TagOptions, to_jsonl


@dataclass(frozen=True)
class ScoringJob:
    """What every actor needs to score a shard the way the local command scores a corpus."""

    bundle: Path
    out: Path
    options: TagOptions
    runtime: RuntimeOptions | None = None
    corpus_format: str = "auto"
    out_format: str = "jsonl"
    resume: bool = False
    skip_bad_rows: bool = False


@dataclass
class Scored:
    """What a run did: shard files written and kept, documents scored, and the rows --skip-bad-rows left out."""

    written: int = 0
    kept: int = 0
    documents: int = 0
    skipped_notes: list[str] = field(default_factory=list)


# Each actor holds this many CPUs and runs the engine on as many threads: the pool's parallelism is its actors
# (one per CPU of the cluster), not threads that would each want every core of their node.
ACTOR_CPUS = 1


class ShardScorer:
    """A Ray Data actor: the bundle loaded once, then one shard per call, its output renamed into place."""

    def __init__(self, job: ScoringJob, shards: list[Shard]):
        from xtag.models.bundle.loader import load_bundle

        self.job, self.shards = job, shards
        runtime = job.runtime or RuntimeOptions()
        if not runtime.encoder_threads:  # onnxruntime's default is every core of the node, as numba's below
            runtime = runtime.model_copy(update={"encoder_threads": ACTOR_CPUS})
        self.tagger = Tagger(load_bundle(job.bundle, options=runtime), job.options)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list]:
        import numba
        from xtag.corpus.files import read_span

        numba.set_num_threads(ACTOR_CPUS)  # per calling thread in numba: set where the engine is called
        done: dict[str, list] = {"lines": [], "documents": [], "note": [], "error": []}
        for index in batch["index"]:
            shard, job = self.shards[int(index)], self.job
            try:
                corpus = read_span(shard.path, shard.span, job.corpus_format, job.skip_bad_rows, need_labels=False)
            except XtagError as exc:  # a malformed row: reported by the driver as the local command reports it
                done["error"].append(str(exc))
                corpus = None
            else:
                rows = self.tagger.json_rows(corpus.ids, corpus.texts) if corpus.texts else []
                write_shard(rows, shard.output(job.out, job.out_format), job.out_format)
                done["error"].append("")
            done["lines"].append(shard.lines)
            done["documents"].append(len(corpus.texts) if corpus else 0)
            done["note"].append((corpus.skipped_note() if corpus else None) or "")
        return done


def write_shard(rows: list[dict], path: Path, out_format: str) -> None:
    """The rows as JSON lines (the local command's lines) or Parquet, written aside and renamed into place."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    if out_format == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows) if rows else _empty_table(pa), tmp)
    else:
        with open(tmp, "w", encoding="utf-8") as sink:
            sink.writelines(to_jsonl(row) for row in rows)
    os.replace(tmp, path)


def _empty_table(pa):
    label = pa.struct([("name", pa.string()), ("score", pa.float64())])
    return pa.table({"id": pa.array([], pa.string()), "labels": pa.array([], pa.list_(label))})


def score_on_ray(job: ScoringJob, shards: list[Shard], address: str, progress: bool = True) -> Scored:
    """Every shard scored on the cluster at `address` (only the unfinished ones with job.resume)."""
    if job.out_format not in OUT_FORMATS:
        raise XtagError(f"--out-format {job.out_format}: use one of {', '.join(OUT_FORMATS)}")
    if job.out.exists() and not job.out.is_dir():
        raise XtagError(f"--out {job.out}: with --ray the output is a folder (one file per shard), not a file")
    job.out.mkdir(parents=True, exist_ok=True)
    clear_partial_writes(job.out)
    todo = unfinished(shards, job.out, job.out_format) if job.resume else shards
    scored = Scored(kept=len(shards) - len(todo))
    total = sum(s.lines for s in shards)
    kept_lines = total - sum(s.lines for s in todo)
    with ray_cluster(address) as cluster:
        if not todo:
            return scored
        if cluster.cpus < 1:
            raise XtagError(f"--ray {address}: the cluster has no CPU to run scoring actors on")
        results = _dataset(job, todo, min(cluster.cpus // ACTOR_CPUS, len(todo))).iter_rows()
        with tqdm(total=total, initial=kept_lines, desc="predict", unit="doc", disable=not progress) as bar:
            for done in results:
                if done["error"]:
                    raise XtagError(done["error"])
                scored.written += 1
                scored.documents += done["documents"]
                scored.skipped_notes += [done["note"]] if done["note"] else []
                bar.update(done["lines"])
    return scored


def _dataset(job: ScoringJob, todo: list[Shard], actors: int):
    """Shard numbers, one block each (so that the pool spreads them), mapped by `actors` ShardScorers."""
    import ray.data

    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # ours counts documents, Ray Data's would count shards
    context.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)  # not its executor's debug dumps on the user's terminal
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)  # nor its "progress bars disabled"
    items = [{"index": i} for i in range(len(todo))]
    return ray.data.from_items(items, override_num_blocks=len(todo)).map_batches(
        ShardScorer,
        fn_constructor_kwargs={"job": job, "shards": todo},
        batch_size=1,
        compute=ray.data.ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=1),
        num_cpus=ACTOR_CPUS,
    )
