"""LaMP's bundle components: the first stage (a whole bundle inside this one) and the re-ranker graph; named in
the family registry."""

from __future__ import annotations

from pathlib import Path

from xtag.models.bundle.parts import ComponentType, Parts


def _first_stage(path: Path, parts: Parts) -> None:
    """A re-ranker's first stage: a whole bundle (its own manifest verified), loaded as it is."""
    first = parts.need("open_bundle", "first-stage")(path, parts.device, parts.options)
    parts.model = first.predictor
    parts.placement.update({f"first-stage/{k}": v for k, v in first.runtime["placement"].items()})


def _lamp_reranker(path: Path, parts: Parts) -> None:
    from xtag.models.lamp.model import LampModel, LampReranker, Texts

    # Behind a first stage with its own onnxruntime session on the CPU (a transformer encoder), the two sessions'
    # threads take turns on the same cores, and each one's threads spin after its run while the other's works:
    # over XR-Transformer on debtags, with the re-ranker not spinning, a text's p50 fell from 20 to 15 ms
    # (3 rounds each; bench/RESULTS.md). Over XR-Linear the engine runs between them and spinning helps
    # (1.5 against 2.1 ms). Over the label-text stage (its encoder and index search: numpy and scipy work between
    # the re-ranker's runs) the spinning threads took the cores from it: debdeps in-process p50 13.2-13.6 ms spinning
    # against 7.1-8.1 ms not (load 4.7).
    behind_cpu_work = any(
        k.startswith("first-stage/") and (v == "CPUExecutionProvider" or k.startswith("first-stage/label-"))
        for k, v in parts.placement.items()
    )
    reranker = LampReranker.load(path, device=parts.device, spin=not behind_cpu_work, options=parts.options)
    parts.model = LampModel(parts.need("model", "lamp-reranker"), reranker)
    parts.featurizer = Texts()
    parts.placement["lamp-reranker"] = reranker.onnx.provider


LOADERS: dict[str, ComponentType] = {
    "first-stage": ComponentType("first_stage", _first_stage),
    "lamp-reranker": ComponentType("lamp", _lamp_reranker),
}
