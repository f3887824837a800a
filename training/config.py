"""Training configuration as pydantic models: validated flags, JSON round-trip, stored in every run."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from models.features import TfidfConfig
from training.data import CorpusFormat
from training.xlinear import XLinearConfig


class TrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    corpus: Path
    format: CorpusFormat = "auto"
    skip_bad_rows: bool = False
    model: Literal["xlinear"] = "xlinear"
    tfidf: TfidfConfig = Field(default_factory=TfidfConfig)
    xlinear: XLinearConfig = Field(default_factory=XLinearConfig)

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=2))

    @classmethod
    def load(cls, path: Path) -> "TrainConfig":
        return cls.model_validate_json(path.read_text())
