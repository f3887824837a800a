"""What both peer runners share: a process's peak memory and the matrices they read and write (stdlib, numpy and
scipy only: it runs in either venv, xtag's or PECOS's)."""

import resource

import numpy as np
import scipy.sparse as smat


def peak_rss_mb() -> float:
    """Peak RSS of this process in MB: VmHWM from /proc/self/status, the high-water mark of its own address
    space. Not ru_maxrss: on Linux a process keeps, across exec, the RSS of the process it was forked from
    when that was larger (here the benchmark's driver, which holds the corpus and its TF-IDF), so a child's
    ru_maxrss is at least its parent's RSS. ru_maxrss where /proc is missing."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


class RssParts:
    """The peaks of this process's RSS by kind, sampled from /proc/self/status on a thread: private (RssAnon +
    RssFile) apart from shared memory (RssShmem). A Ray driver's VmHWM counts the object store's pages it wrote or
    read (X and Y put, the results got); those pages are the node's store, mapped by every process that touches
    them, not the driver's own memory, so the driver's private peak is read beside its VmHWM."""

    def __init__(self, every_s: float = 0.1):
        import threading

        self.peak_private_mb = self.peak_shared_mb = 0.0
        self._stop = threading.Event()
        self._every = every_s
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        try:
            with open("/proc/self/status") as fh:
                kb = {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in fh) if k.startswith("Rss")}
        except OSError:
            return
        self.peak_private_mb = max(self.peak_private_mb, (kb.get("RssAnon", 0) + kb.get("RssFile", 0)) / 1024)
        self.peak_shared_mb = max(self.peak_shared_mb, kb.get("RssShmem", 0) / 1024)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self._sample()

    def stop(self) -> "RssParts":
        self._stop.set()
        self._thread.join()
        self._sample()
        return self


def load_csr(path):
    m = smat.load_npz(path).tocsr().astype(np.float32)
    m.sort_indices()
    m.sum_duplicates()
    return m


def topk_arrays(pred, k):
    """CSR prediction matrix -> (indices, scores) n x k, best first, -1 / -inf padded."""
    pred = pred.tocsr()
    n = pred.shape[0]
    idx = np.full((n, k), -1, dtype=np.int32)
    sc = np.full((n, k), -np.inf, dtype=np.float32)
    indptr, indices, data = pred.indptr, pred.indices, pred.data
    for i in range(n):
        s, e = indptr[i], indptr[i + 1]
        if e == s:
            continue
        d = data[s:e]
        order = np.argsort(-d, kind="stable")[:k]
        idx[i, : len(order)] = indices[s:e][order]
        sc[i, : len(order)] = d[order]
    return idx, sc
