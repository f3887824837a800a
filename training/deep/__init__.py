"""The torch side shared by the transformer families: loop, optimiser, checkpoints, DDP, SWA, encoder, losses."""
