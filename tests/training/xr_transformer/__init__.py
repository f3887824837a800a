"""Tests of training/xr_transformer/."""
