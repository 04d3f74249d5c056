"""Implicit-feedback interaction streams: each user a client, its interactions in timestamp order.

The streaming version of FedNCF (paper 003): every user of a recommender data
set is a client, and the client's interactions (user, item) arrive one per
step, in the order of their timestamps. Step t (1-based) carries each
user's t-th interaction; a user whose interactions have run out is absent
(masked) from then on, so T is the largest number of interactions of one user
(737 on MovieLens 100K).

A chunk holds the item ids as the single feature: ``X[i, m, 0, 0]`` is the
item (0 ≤ id < I) client m interacts with at step ``t0 + i``; ``y`` is 1 (every
arriving interaction is a positive; negatives are sampled by the client
model, :mod:`streamfl.models.streaming_gmf`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from .base import Chunk, Stream


class InteractionStream(Stream):
    """Users' interactions in timestamp order, one per user and step.

    Parameters
    ----------
    users, items : ndarray (P,) int
        Re-indexed user (0..M−1) and item (0..I−1) of each interaction.
    times : ndarray (P,) int
        Timestamps; within a user, interactions are ordered by time, ties
        kept in the given (file) order.
    n_users, n_items : int
        M, I.
    max_steps : int or None
        Stop after this many steps (the interactions beyond are not streamed).
    source : str
        What was read (for the run header).
    notes : sequence of str
        What the loader inferred or dropped.

    Raises
    ------
    ValueError
        If an id is out of range, or the arrays' lengths differ.

    Attributes
    ----------
    ptr : ndarray (M+1,)
        User m's interactions are ``seq_items[ptr[m]:ptr[m+1]]``, in time order.
    ever : ndarray (M, I) bool
        Items each user interacts with anywhere in the stream (streamed or not).
    """

    task = "logistic"
    n_features = 1
    batch_size = 1
    kind = "interactions"

    def __init__(self, users, items, times, n_users: int, n_items: int, max_steps: int | None = None,
                 source: str = "interactions", notes=(), info: dict | None = None):
        users, items, times = (np.asarray(a, dtype=np.int64) for a in (users, items, times))
        if not (users.shape == items.shape == times.shape) or users.ndim != 1:
            raise ValueError(f"users, items and times must be 1-D of one length; got {users.shape}, "
                             f"{items.shape}, {times.shape}")
        if users.size and (users.min() < 0 or users.max() >= n_users or items.min() < 0 or items.max() >= n_items):
            raise ValueError(f"user ids must be in [0, {n_users}) and item ids in [0, {n_items})")
        order = np.lexsort((np.arange(users.size), times, users))       # by user, time, then given order
        self.n_clients, self.n_items = int(n_users), int(n_items)
        self.seq_items = items[order]
        self.seq_times = times[order]
        counts = np.bincount(users, minlength=n_users)
        self.ptr = np.r_[0, np.cumsum(counts)]
        self.counts = counts
        full = int(counts.max()) if counts.size else 0
        self.n_steps = full if max_steps is None else min(full, int(max_steps))
        self.ever = np.zeros((n_users, n_items), np.bool_)
        self.ever[users, items] = True
        self.source_ = source
        self.info = dict(info or {})
        streamed = int(np.minimum(counts, self.n_steps).sum())
        self.n_interactions_, self.n_streamed_ = int(users.size), streamed
        notes = list(notes)
        notes.append(f"step t = each user's t-th interaction in timestamp order (ties: file order); "
                     f"T = {self.n_steps} (the most interactions of one user{'' if max_steps is None or max_steps >= full else ', capped by steps'}); "
                     f"a user whose interactions have run out sits the remaining steps out")
        if streamed < users.size:
            notes.append(f"{users.size - streamed:,} interactions beyond step {self.n_steps} are not streamed")
        self.idle_clients_ = np.flatnonzero(counts == 0).tolist()
        self.notes_ = tuple(notes)

    def chunks(self, chunk_size: int = 256) -> Iterator[Chunk]:
        M = self.n_clients
        for t0 in range(0, self.n_steps, chunk_size):
            n = min(chunk_size, self.n_steps - t0)
            k = t0 + np.arange(n)[:, None]                     # (n, 1): per-user position
            mask = k < self.counts[None, :]                    # (n, M)
            pos = np.where(mask, self.ptr[:-1][None, :] + k, 0)
            X = np.where(mask, self.seq_items[pos], 0).astype(np.float64).reshape(n, M, 1, 1)
            yield Chunk(t0=t0, X=X, y=np.ones((n, M, 1)), mask=mask)


def movielens_stream(path: str | Path, max_steps: int | None = None) -> InteractionStream:
    """MovieLens 100K's ``u.data`` (or its folder) as an interaction stream (every rating = one interaction).

    Users and items are re-indexed in order of their original ids. A repeated
    (user, item) pair would be one interaction more; ML-100K has none (the
    count dropped is reported).

    Raises
    ------
    FileNotFoundError
        Naming the missing file.
    ValueError
        A line without four integer columns (names the line).
    """
    import pandas as pd

    from .movielens import read_u_data
    p, cols = read_u_data(path, field="source.path: ")
    pairs = pd.DataFrame({"u": cols["user"], "i": cols["item"]})
    dup = pairs.duplicated(keep="first").to_numpy()
    user_ids, u = np.unique(cols["user"][~dup], return_inverse=True)
    item_ids, i = np.unique(cols["item"][~dup], return_inverse=True)
    notes = [f"implicit feedback: each of the {len(cols['user']):,} ratings is one interaction (rating values ignored)"]
    if dup.any():
        notes.append(f"{int(dup.sum())} repeated (user, item) ratings dropped (the first is kept)")
    info = {"ratings_read": int(len(cols["user"])), "duplicates_dropped": int(dup.sum()), "n_users": int(len(user_ids)),
            "n_items": int(len(item_ids))}
    s = InteractionStream(u, i, cols["timestamp"][~dup], len(user_ids), len(item_ids), max_steps=max_steps,
                          source=f"MovieLens file {p}", notes=notes, info=info)
    s.user_ids, s.item_ids = user_ids, item_ids
    return s
