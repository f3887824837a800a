"""What several benchmark scripts share (results files, servers, clients, corpora, peers); no script imports another.

Stdlib only at this level: bench.helpers.peers is imported by the PECOS runners in their own venv."""
