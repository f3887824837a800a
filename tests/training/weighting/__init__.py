"""Tests of training/weighting/."""
