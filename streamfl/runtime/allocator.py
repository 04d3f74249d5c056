"""Keep freed memory in the process for reuse (glibc's malloc), instead of returning it to the kernel.

Every chunk of a run allocates and frees the same large temporaries (the
chunk's (n, M, d) arrays, about 13 MB each for n = 256, M = 64, d = 100).
glibc serves allocations above its mmap threshold with fresh mappings and
unmaps them on free, so each one is page-faulted in and zeroed by the kernel
again; its dynamic threshold only partly avoids that. Measured on the
logistic reference run (M = 64, d = 100, T = 10,000; ``benchmarks/whole_run_cpu.py``,
2026-12-02, load average 5–6): 103,000 page faults, 1.8 s of system time and
5.9 s CPU in all before, 42,000 page faults, 1.0 s and 5.2 s with the
settings below; peak resident memory 376 MB before and 459 MB with them (the
heap keeps some freed chunk temporaries next to the live ones). Memory freed
at the top of the heap beyond 64 MB is still returned to the kernel.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3          # mallopt parameters (glibc <malloc.h>)
MMAP_THRESHOLD = 32 * 2**20                           # glibc's largest allowed value on 64-bit systems
TRIM_THRESHOLD = 64 * 2**20

_DONE: list = []


def keep_freed_memory() -> bool:
    """Raise glibc's mmap threshold to 32 MB and its trim threshold to 64 MB, once per process.

    Allocations up to 32 MB then come from the heap and are reused after they
    are freed, instead of being mapped, faulted in and unmapped on every chunk.
    Returns True if the settings were applied; False (and nothing changed)
    where the C library has no ``mallopt`` (not glibc: macOS, musl, Windows).
    Values computed by the run do not depend on it.
    """
    if _DONE:
        return _DONE[0]
    ok = False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        mallopt = getattr(libc, "mallopt", None)
        gnu = getattr(libc, "gnu_get_libc_version", None)
        if mallopt is not None and gnu is not None:
            mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
            ok = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    except OSError:          # pragma: no cover - no loadable C library
        ok = False
    _DONE.append(ok)
    return ok
