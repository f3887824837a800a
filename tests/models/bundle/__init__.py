"""Tests of xtag.models.bundle.loader."""
