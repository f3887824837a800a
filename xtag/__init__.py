"""xtag, the tool: its command line (xtag/cli.py) over the training/, models/ and service/ packages."""
