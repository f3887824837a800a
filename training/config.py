"""The training configuration: validated flags, JSON round-trip, stored in every run.

Corpus, TF-IDF and the XR-Linear rankers are common to all runs (XR-Transformer's final rankers are
XR-Linear); each family with settings of its own gets one optional section, built from the family
registry, and only the chosen family's section may be set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from models.features import TfidfConfig
from models.registry import DEFAULT_KIND, FAMILIES, family
from training.data import CorpusFormat
from training.xlinear.config import XLinearConfig


class _CommonConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    corpus: Path
    format: CorpusFormat = "auto"
    skip_bad_rows: bool = False
    model: str = Field(DEFAULT_KIND, description=f"model kind: {' | '.join(FAMILIES)}")
    tfidf: TfidfConfig = Field(default_factory=TfidfConfig)
    xlinear: XLinearConfig = Field(
        default_factory=XLinearConfig, description="rankers (for xr-transformer: the final rankers on Φ_cat)"
    )

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
        return self

    @property
    def family_settings(self) -> Any:
        """The chosen family's own section (None for families that only use the shared rankers)."""
        section = FAMILIES[self.model].section
        return getattr(self, section) if section else None

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
