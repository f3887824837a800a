"""Run → bundle: `export_run.py` (the orchestrator: the family's exporter, the manifest, load-back check,
publish) and `steps.py` (what every family's exporter shares: logged steps, quiet transformers)."""
