"""Tests of training/static/."""
