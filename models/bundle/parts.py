"""What a bundle component's loader gets and adds to (Parts), and a component type's entry (ComponentType): the
contract between the bundle loader and each family's loaders (models/<family>/loaders.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xtag.models.errors import XtagError
from xtag.models.inference.calibration import Calibration
from xtag.models.label_tree import ClusterChain


@dataclass
class Parts:
    """What the components loaded so far have built; the Predictor is assembled from it."""

    featurizer: Any = None
    model: Any = None
    chain: ClusterChain | None = None
    calibration: Calibration | None = None
    label_encoder: Any = None  # the label-text stage's encoder (models/label_text/), for the fusion after it
    label_index: Any = None  # its label index (models/label_text/index.py)
    device: Any = None  # xtag.models.features.device.Device the graphs and indexes go to (None: cpu)
    options: Any = None  # xtag.models.features.device.RuntimeOptions: encoder threads, TensorRT cache (None: defaults)
    placement: dict[str, str] = field(default_factory=dict)  # component type → where it runs (/v1/model says)
    # Loads a bundle nested in this one (a re-ranker's first stage) on the same device with the same options;
    # models/bundle/loader.py's load_bundle, passed in rather than imported, since the bundle module imports this one.
    open_bundle: Callable[[Path, Any, Any], Any] | None = None

    def need(self, what: str, component: str) -> Any:
        value = getattr(self, what)
        if value is None:
            raise XtagError(f"component {component!r} needs a {what} from an earlier component")
        return value


@dataclass(frozen=True)
class ComponentType:
    """Where the exporter writes a component, and the loader that adds it to the Parts."""

    path: str  # where the exporter writes it, relative to the bundle
    load: Callable[[Path, Parts], None]
