"""Tests of xtag.models.xr_transformer."""
