"""Closed experiments: each answered a question (a default, a design) and is kept to rerun it
(`python -m bench.experiments.NAME`); where RESULTS.md tells that story, their result files still render there."""
