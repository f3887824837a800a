"""xtag, the tool: its command line (xtag/cli/) over the training/, models/ and service/ packages."""
