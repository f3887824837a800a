"""Tests of training/xlinear/."""
