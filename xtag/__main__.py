"""`python -m xtag ...` (and `torchrun -m xtag ...`) runs the same command line as `xtag ...`."""

from xtag.cli import app

app()
