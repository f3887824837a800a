"""Tests of xtag.models.features.tfidf."""
