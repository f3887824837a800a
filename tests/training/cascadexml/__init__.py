"""Tests of training/cascadexml/."""
