"""Tests of xtag.models: the bundle, the engine, inference and metrics."""
