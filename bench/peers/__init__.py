"""The runners that train or predict in processes of their own, xtag's and PECOS's (`python -m bench.peers.NAME`)."""
