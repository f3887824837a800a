"""Peak memory of a benchmark process, shared by both peer runners (stdlib only: it runs in either venv)."""

import resource


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
