"""MovieLens 100K as implicit feedback, split leave-one-out (FedNCF, paper 003, §5.1–5.2).

The protocol of FedNCF (and of NCF, He et al. 2017, which it follows):

* every rating becomes an interaction (r_ij = 1: "converting numerical
  ratings into implicit feedback"); users with fewer than 5 interactions are
  dropped (ML-100K has none: every user rated at least 20 movies);
* **leave-one-out**: each user's latest interaction (largest timestamp) is
  held out for testing, the rest is training data. ML-100K records many
  ratings of one user in the same second; when the latest timestamp is tied
  the held-out interaction is the tied one that comes last in the file (the
  count of such users is reported in :attr:`ImplicitData.info`);
* each held-out item is ranked against **100 sampled negatives**: distinct
  items the user never interacted with (neither in training nor the held-out
  item), drawn uniformly;
* training negatives (4 per positive) are drawn uniformly from the items the
  user never interacted with, so they never include the held-out item
  (:meth:`ImplicitData.sample_negatives`).

The data file is read where the caller points (``u.data``, or the folder
holding it); nothing is copied.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

MIN_INTERACTIONS = 5


@dataclass
class ImplicitData:
    """Implicit-feedback interactions of U users over I items, split leave-one-out.

    Users and items are re-indexed 0..U−1 and 0..I−1 (``user_ids`` and
    ``item_ids`` give the original ids).

    Attributes
    ----------
    n_users, n_items : int
        U, I.
    train_ptr : ndarray (U+1,) int64
        User u's training positives are ``train_items[train_ptr[u]:train_ptr[u+1]]``.
    train_items : ndarray (P,) int64
        Training positives, grouped by user, in time order within a user.
    train_times : ndarray (P,) int64
        Their timestamps (unix seconds).
    test_items : ndarray (U,) int64
        The held-out (latest) item of each user.
    test_times : ndarray (U,) int64
    test_negatives : ndarray (U, n_test_negatives) int64
        Distinct items user u never interacted with.
    interacted : ndarray (U, I) bool
        Every interaction (training and held-out), for negative sampling.
    user_ids, item_ids : ndarray
        Original ids of the re-indexed users and items.
    info : dict
        What the loader inferred or dropped (reported in run headers).
    """

    n_users: int
    n_items: int
    train_ptr: np.ndarray
    train_items: np.ndarray
    train_times: np.ndarray
    test_items: np.ndarray
    test_times: np.ndarray
    test_negatives: np.ndarray
    interacted: np.ndarray
    user_ids: np.ndarray
    item_ids: np.ndarray
    info: dict = field(default_factory=dict)

    @property
    def train_users(self) -> np.ndarray:
        """User of each training positive, (P,)."""
        return np.repeat(np.arange(self.n_users), np.diff(self.train_ptr))

    @property
    def train_counts(self) -> np.ndarray:
        """Training positives per user, (U,)."""
        return np.diff(self.train_ptr)

    def sample_negatives(self, users: np.ndarray, n_per: int, rng: np.random.Generator) -> np.ndarray:
        """``n_per`` training negatives for each entry of ``users``: shape (len(users), n_per).

        Each is uniform over the items user u never interacted with (the
        held-out item included among the excluded), independently (with
        replacement, as NCF does). Vectorised rejection sampling: all draws at
        once, redrawing only the rejected ones.
        """
        users = np.asarray(users, dtype=np.int64)
        out = rng.integers(0, self.n_items, (users.shape[0], n_per))
        bad = self.interacted[users[:, None], out]
        while bad.any():
            out[bad] = rng.integers(0, self.n_items, int(bad.sum()))
            bad = self.interacted[users[:, None], out]
        return out

    def item_popularity(self) -> np.ndarray:
        """Training interactions per item, (I,): the ItemPop score (NCF's lower bound)."""
        return np.bincount(self.train_items, minlength=self.n_items)


def read_u_data(path, field: str = "") -> tuple[Path, dict[str, np.ndarray]]:
    """The file ``u.data`` (or ``path/u.data``) as integer columns ``user``, ``item``, ``timestamp``, each (N,).

    One reader for the round-based protocol and the streaming source.
    ``field`` prefixes the not-found message (for example ``"source.path: "``).

    Raises
    ------
    FileNotFoundError
        If the file does not exist (names the path).
    ValueError
        If a line's user, item or timestamp is not an integer (names the line),
        the file is not UTF-8 text, or it holds no rating.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "u.data"
    if not p.is_file():
        raise FileNotFoundError(f"{field}MovieLens 100K file not found: {p} (expected u.data: user, item, "
                                f"rating, timestamp, tab-separated)")
    try:
        df = pd.read_csv(p, sep="\t", header=None, names=["user", "item", "rating", "timestamp"], dtype=str,
                         keep_default_na=False)
    except UnicodeDecodeError:
        raise ValueError(f"{p}: not a u.data file (not UTF-8 text; expected user, item, rating, timestamp, "
                         f"tab-separated)") from None
    if not len(df):
        raise ValueError(f"{p}: no ratings (the file is empty; expected user, item, rating, timestamp, tab-separated)")
    cols = {}
    for c in ("user", "item", "timestamp"):
        v = pd.to_numeric(df[c], errors="coerce")
        if v.isna().any():
            line = int(np.flatnonzero(v.isna().to_numpy())[0]) + 1
            raise ValueError(f"{p}: line {line}: column '{c}' is {df[c].iloc[line - 1]!r}, expected an integer")
        cols[c] = v.to_numpy(dtype=np.int64)
    return p, cols


def load_ml100k(path: str | Path, n_test_negatives: int = 100, seed: int = 0,
                min_interactions: int = MIN_INTERACTIONS) -> ImplicitData:
    """Read MovieLens 100K's ``u.data`` and split it leave-one-out (see module doc).

    Parameters
    ----------
    path : str or Path
        The ``u.data`` file, or the ``ml-100k`` folder holding it.
    n_test_negatives : int
        Negatives ranked against each held-out item (100 in FedNCF and NCF).
    seed : int
        Seeds the test negatives (same seed, same negatives).
    min_interactions : int
        Users with fewer interactions are dropped (5, FedNCF §5.1).

    Raises
    ------
    FileNotFoundError
        If the file does not exist (names the path).
    ValueError
        If a line does not hold four integer columns (names the line), no
        user has ``min_interactions`` interactions, or a user has too few
        non-interacted items for the test negatives.
    """
    p, cols = read_u_data(path)
    info = {"source": str(p), "ratings_read": int(len(cols["user"])),
            "implicit": "every rating is one interaction (rating values ignored)"}

    file_order = np.arange(len(cols["user"]))
    pairs = pd.DataFrame({"user": cols["user"], "item": cols["item"], "t": cols["timestamp"], "order": file_order})
    pairs = pairs.sort_values(["user", "t", "order"], kind="stable")
    dup = pairs.duplicated(["user", "item"], keep="last")
    info["duplicate_interactions_dropped"] = int(dup.sum())
    pairs = pairs[~dup]
    counts = pairs.groupby("user").size()
    few = counts.index[counts < min_interactions]
    info["users_dropped_below_min_interactions"] = int(len(few))
    info["min_interactions"] = min_interactions
    pairs = pairs[~pairs["user"].isin(few)]
    if pairs.empty:
        raise ValueError(f"{p}: no user has {min_interactions} or more interactions ({len(few)} user(s) with fewer "
                         f"dropped, FedNCF §5.1): nothing to train or hold out")

    user_ids, u = np.unique(pairs["user"].to_numpy(), return_inverse=True)
    item_ids, i = np.unique(pairs["item"].to_numpy(), return_inverse=True)
    t = pairs["t"].to_numpy()
    U, I = len(user_ids), len(item_ids)
    ptr = np.r_[0, np.cumsum(np.bincount(u, minlength=U))]
    last = ptr[1:] - 1                                     # rows sorted by (user, time, file order)
    tied = t[last] == t[np.maximum(last - 1, ptr[:-1])]
    tied &= (ptr[1:] - ptr[:-1]) > 1
    info["users_with_tied_latest_timestamp"] = int(tied.sum())
    info["tie_rule"] = "held out: the tied interaction that comes last in the file"

    keep = np.ones(len(u), bool)
    keep[last] = False
    interacted = np.zeros((U, I), bool)
    interacted[u, i] = True
    free = I - interacted.sum(axis=1)
    if (free < n_test_negatives).any():
        raise ValueError(f"User {int(user_ids[np.argmin(free)])} has only {int(free.min())} items to sample "
                         f"{n_test_negatives} test negatives from.")
    rng = np.random.default_rng(seed)
    keys = rng.random((U, I))
    keys[interacted] = np.inf                              # never a positive
    negatives = np.argpartition(keys, n_test_negatives, axis=1)[:, :n_test_negatives]
    negatives.sort(axis=1)
    info.update(n_users=U, n_items=I, n_train=int(keep.sum()), n_test=U, n_test_negatives=n_test_negatives,
                test_negative_seed=seed)
    return ImplicitData(n_users=U, n_items=I, train_ptr=np.r_[0, np.cumsum(np.bincount(u[keep], minlength=U))],
                        train_items=i[keep].astype(np.int64), train_times=t[keep], test_items=i[last].astype(np.int64),
                        test_times=t[last], test_negatives=negatives.astype(np.int64), interacted=interacted,
                        user_ids=user_ids, item_ids=item_ids, info=info)
