"""Experiments that chose a design or a default and back no current RESULTS.md claim (`python -m bench.experiments.NAME`)."""
