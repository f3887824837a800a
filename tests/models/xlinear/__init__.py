"""Tests of xtag.models.xlinear."""
