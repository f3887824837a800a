"""XR-Linear's entry in the family registry: the run's features (TF-IDF, or Φ_cat with a static block) to a
trained model, locally (training/xlinear/train.py) or as Ray tasks (training/xlinear/ray_train.py)."""

from __future__ import annotations

import time
from functools import partial

from xtag.models.families import TrainInputs
from xtag.models.xr_transformer.concat_features import concat_features
from xtag.training.label_text.stage import applies
from xtag.training.xlinear.train import XLinearResult, train_xlinear


def train(run: TrainInputs) -> XLinearResult:
    """The family's entry in the registry: rankers on the run's TF-IDF or, with a `dense` section, on Φ_cat =
    [TF-IDF, α · static] (the tree too: PIFA over Φ_cat, as XR-Transformer's final stage builds it)."""
    X, static = run.X, None
    if run.config.dense is not None:
        from xtag.training.static.fit import static_encoder_for_run

        task = None
        if "task" in run.config.dense.tune:  # the labels and TF-IDF the matcher is trained on
            from xtag.training.static.task import TaskInputs

            task = TaskInputs(X, run.Y, run.config.xlinear.tree, run.config.xlinear.n_jobs)
        static = static_encoder_for_run(
            run.texts, run.config.dense, run.checkpoint_dir / "static", run.log, task, run.progress
        )
        start = time.perf_counter()
        X = concat_features(X, static.encode(run.texts), static.config.alpha)
        run.log(
            {
                "event": "features",
                "what": "phi_cat",
                "dim": X.shape[1],
                "nnz": int(X.nnz),
                "static_seconds": round(time.perf_counter() - start, 3),
            }
        )
    trainer = train_xlinear
    if run.config.ray is not None:  # the same model, its sub-trees trained as Ray tasks
        from xtag.training.xlinear.ray_train import train_xlinear_on_ray

        trainer = partial(train_xlinear_on_ray, address=run.config.ray)
    model = trainer(
        X,
        run.Y,
        run.config.xlinear,
        checkpoint_dir=run.checkpoint_dir,
        progress=run.progress,
        log=run.log,
        missing_labels=run.config.missing_labels,
    )
    if static is not None:
        model = model.with_config(model.config.model_copy(update={"dense_features": static.dim}))
    stage = None
    if applies(run.config, run.label_texts):  # the label-text stage over the finished tree
        from xtag.training.label_text.stage import train_stage

        def retrain(X, Y, checkpoint_dir):
            return train_xlinear(
                X, Y, run.config.xlinear, checkpoint_dir, run.progress, run.log, run.config.missing_labels
            )

        stage = train_stage(run, X, model, retrain)
    return XLinearResult(model, static, stage)
