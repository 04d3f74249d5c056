"""How many steps the engine and the trackers process at once: the chunk size, capped by memory.

Beside the engine (:mod:`streamfl.runtime.engine`), so that the run header
(:mod:`streamfl.runtime.header`) and the experiment driver
(:mod:`streamfl.runtime.experiment`) both import it and not each other.
"""

from __future__ import annotations

CHUNK_FLOATS = 1 << 22     # features per chunk at most (32 MB of float64); memory is O(chunk × M × b × d)


def effective_chunk_size(chunk_size: int, stream) -> int:
    """Steps per chunk: ``chunk_size``, lowered so that n·M·b·d·K ≤ :data:`CHUNK_FLOATS` (at least 1).

    The engine's and the tracker's per-chunk arrays are O(n M b d K), so
    without the cap M = 100,000 clients at d = 10 would need gigabytes per
    chunk. Results do not depend on the chunk size.
    """
    K = stream.n_classes if stream.task == "softmax" else 1
    per_step = stream.n_clients * stream.batch_size * stream.n_features * max(1, K)
    return max(1, min(int(chunk_size), CHUNK_FLOATS // max(1, per_step)))


def chunk_note(asked: int, used: int) -> str:
    """What the run header and summary.json say when :func:`effective_chunk_size` lowered ``chunk_size``."""
    return (f"chunk_size lowered from {asked} to {used} steps so that a chunk holds at most {CHUNK_FLOATS:,} "
            f"features (memory; the results do not depend on it)")
