"""Tests of xtag.models.inference."""
