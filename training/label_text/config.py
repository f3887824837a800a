"""The label-text encoder's settings (the `label_text.encoder` section), interim: the TF-IDF projection's size."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EncoderConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dim: int = Field(256, ge=2, description="embedding dimensions")
