"""xtag, the tool: its command line (xtag/cli/) over the training/, models/ and service/ packages."""

from xtag.models import threads as _threads

# Before anything imports torch, numba or faiss: their pools read their size and wait policy when they load.
_threads.set_library_defaults()
