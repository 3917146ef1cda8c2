"""Keep the relay's resident memory flat under load: a fixed glibc mmap threshold.

The splice transport receives into 256 KiB buffers on two threads per kubelet connection. glibc
serves such a buffer with mmap at first, but once one is freed it raises its mmap threshold above
that size ("dynamic threshold"), and from then on the buffers come from the malloc heaps, where they
fragment and stay resident. Measured with the 32-client mix of test/bench/relay_load.py: RSS
37.2 -> 46.3 MB in 150 s and still rising, while tracemalloc showed the Python heap flat
(16.63 -> 16.65 MB). With the threshold fixed at glibc's default of 128 KiB (setting it turns the
dynamic adjustment off) the same run stayed at 34.7 -> 35.0 MB; MALLOC_ARENA_MAX=2 alone did not
help (37.2 -> 46.3 MB).
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("resmgr.relay")

M_MMAP_THRESHOLD = -3  # glibc malloc.h
MMAP_THRESHOLD_BYTES = 128 * 1024


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Pin glibc's mmap threshold so big transient buffers always go back to the system on free.
    Returns False (and logs why) where the C library has no such knob, e.g. musl."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError) as err:
        log.info("mallopt unavailable (%s); relay memory may grow under load", err)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if mallopt(M_MMAP_THRESHOLD, threshold) != 1:
        log.info("mallopt(M_MMAP_THRESHOLD) refused; relay memory may grow under load")
        return False
    return True
