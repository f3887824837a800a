"""xtag's benchmarks, run as modules from the repository root (`python -m bench.NAME`, see bench/README.md), so
that their shared code is the package bench.helpers and no script edits sys.path or imports another script."""
