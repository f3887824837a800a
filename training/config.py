"""The training configuration: validated flags, JSON round-trip, stored in every run.

Corpus, TF-IDF, the missing-label loss and the XR-Linear rankers are common to all runs (XR-Transformer's
final rankers are XR-Linear; the rankers' type comes through the registry, so this shared module imports no
family); each family with settings of its own gets one optional section, built from the family registry,
and only the chosen family's section may be set. What a family cannot do (a weighted loss, say) is refused
here, naming the family and the setting, from the capabilities the registry declares.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator
from xtag.corpus.files import CorpusFormat
from xtag.models.families import DEFAULT_KIND, FAMILIES, family
from xtag.models.features.tfidf import TfidfConfig
from xtag.training.label_text.stage_config import LabelTextStageConfig
from xtag.training.static.config import StaticDenseConfig
from xtag.training.weighting.label_weights import WEIGHTED_LOSSES, MissingLabelsConfig

XLinearConfig = family("xlinear").resolve("config")  # the shared rankers' settings


class _CommonConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    corpus: Path
    format: CorpusFormat = "auto"
    skip_bad_rows: bool = False
    labels: Path | None = Field(
        None,
        description="a label file (labels.jsonl[.gz]: id, name, description, alt_labels, broader; or an Annif TSV "
        "vocabulary, or SKOS in Turtle or RDF/XML): what each label "
        "says, kept in the run and the bundle",
    )
    ray: str | None = Field(
        None, description="a Ray cluster to train on: auto | local | HOST:PORT (xlinear sub-trees, LaMP folds)"
    )
    model: str = Field(DEFAULT_KIND, description=f"model kind: {' | '.join(FAMILIES)}")
    tfidf: TfidfConfig = Field(default_factory=TfidfConfig)
    xlinear: XLinearConfig = Field(
        default_factory=XLinearConfig, description="rankers (for xr-transformer: the final rankers on Φ_cat)"
    )
    missing_labels: MissingLabelsConfig = Field(
        default_factory=MissingLabelsConfig, description="the missing-label loss every family trains with"
    )
    dense: StaticDenseConfig | None = Field(
        None, description="a static token-embedding block beside TF-IDF in the rankers' features (xlinear)"
    )
    label_text: LabelTextStageConfig = Field(
        default_factory=LabelTextStageConfig,
        description="the label-text stage fused with the tree, trained with --labels (xlinear; enabled=false: off)",
    )

    @model_validator(mode="before")
    @classmethod
    def _settings_moved(cls, data: Any) -> Any:
        """Runs saved before `missing_labels` had its own section kept it under `xlinear`, with the weighted
        losses as `xlinear.loss` values: read them where they are now, so old runs still `--resume`."""
        if not isinstance(data, dict) or not isinstance(data.get("xlinear"), dict):
            return data
        data, xl = dict(data), dict(data["xlinear"])
        moved = dict(xl.pop("missing_labels", None) or {})
        if xl.get("loss") in WEIGHTED_LOSSES:
            moved["weighting"] = xl.pop("loss")
        if moved:
            if data.get("missing_labels"):
                raise ValueError("missing_labels is set both in its own section and under xlinear (the old place)")
            data["missing_labels"] = moved
        data["xlinear"] = xl
        return data

    @field_validator("model")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        family(kind)
        return kind

    @model_validator(mode="after")
    def _family_section(self) -> _CommonConfig:
        chosen = FAMILIES[self.model]
        for other in FAMILIES.values():
            if other.section and other is not chosen and getattr(self, other.section) is not None:
                raise ValueError(f"{other.section} settings are only used with model {other.kind!r}")
        if chosen.section and getattr(self, chosen.section) is None:
            setattr(self, chosen.section, chosen.resolve("config")())
        if self.missing_labels.weighting != "none":
            chosen.require("weighted-losses", f"missing_labels.weighting={self.missing_labels.weighting}")
        if self.dense is not None:
            chosen.require("static-dense", f"dense={self.dense.kind}")
        if self.ray is not None:
            chosen.require("ray", f"--ray {self.ray}")
        return self

    @property
    def family_settings(self) -> Any:
        """The chosen family's own section (None for families that only use the shared rankers)."""
        section = FAMILIES[self.model].section
        return getattr(self, section) if section else None

    @property
    def export_settings(self) -> Any:
        """The chosen family's export settings: every family section has an `export` (None: a family with no
        section, which exports without settings)."""
        section = self.family_settings
        return None if section is None else section.export

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=2))

    @classmethod
    def load(cls, path: Path) -> TrainConfig:
        return cls.model_validate_json(path.read_text())


TrainConfig = create_model(
    "TrainConfig",
    __base__=_CommonConfig,
    __doc__="A training run's whole configuration.",
    **{f.section: (f.resolve("config") | None, None) for f in FAMILIES.values() if f.section},
)
