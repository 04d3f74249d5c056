"""Streaming FedNCF GMF in the Kafka roles: the worker's clients and the aggregator's round.

The embedded engine runs M :class:`~streamfl.models.streaming_gmf.StreamingGMF`
clients in one process, with one global item table Q and, every τ steps,
MF-FedAvg of the item rows and FedAvg of the prediction layer
(:class:`~streamfl.aggregation.MFFedAvg`; FedNCF, paper 003, §3.2–3.3). Over
Kafka the same arithmetic is split between the roles:

* a worker keeps :class:`GMFClients`: the full (M, ·) arrays of one
  ``StreamingGMF`` (only the rows of its clients are used) and the global
  table of every round its clients are in, Q_r = Q_0 + Σ_{k ≤ r} Δ̄_k, rebuilt
  from the GMF_GLOBAL records (all workers start from the same Q_0: the
  model is built from the run's seed). Clients at the same step are stepped
  together by one call of the compiled kernel with a mask; its random draws
  depend on (seed, client, step) only, so a worker holding any subset of the
  clients draws what the embedded engine draws;
* the aggregator rebuilds the (M, ·) :class:`~streamfl.models.client_model.ModelUpdate`
  the embedded server receives — the item rows client by client in client
  order, as :meth:`StreamingGMF.upload` lists them, and the stacked h, b —
  and applies the same :class:`~streamfl.aggregation.MFFedAvg` object
  (:func:`gmf_global`), so GLOBAL(r) is the embedded global update bit for bit.

A client's checkpoint (:class:`~streamfl.transport.format.GMFState`) is
taken at a round boundary, after the global update is loaded: p_m, h_m, b_m
and the items seen so far; the round submodel is empty then, and Q_r comes
from the global topic.
"""

from __future__ import annotations

import numpy as np

from streamfl.transport.format import GMFGlobal, GMFState, GMFUpdate


class GMFClients:
    """The streaming GMF clients of one worker (see the module doc).

    Parameters
    ----------
    model : StreamingGMF
        Built by :func:`streamfl.runtime.experiment.build_gmf_clients` from the
        run's config (the initial P, Q, h, b of every client).

    Memory: the model's (M, I) arrays (seen items, submodel map) plus one
    (I, D) table per round still in use.
    """

    def __init__(self, model):
        self.model = model
        self.M, self.I, self.D = model.n_clients, model.n_items, model.dim
        self.tau, self.N = model.tau, model.negatives
        self.P0, self.H0, self.B0 = model.P.copy(), model.H.copy(), model.B.copy()
        self.tables = {0: model.Q.copy()}          # round r → Q_r, the table after GLOBAL(r)
        self._X = np.zeros((self.M, 1, 1))
        self._mask = np.zeros(self.M, np.bool_)

    # ---- the global table ---------------------------------------------------------------------------
    def table(self, r: int, globals_: dict) -> np.ndarray:
        """Q_r (I, D): Q_0 plus the deltas of GMF_GLOBAL(1 … r); KeyError naming the first round missing."""
        from streamfl.aggregation.sparse import SparseRows, apply_rows
        if r in self.tables:
            return self.tables[r]
        k = max(j for j in self.tables if j < r)
        Q = self.tables[k]
        for j in range(k + 1, r + 1):
            g = globals_.get(j)
            if g is None:
                raise KeyError(j)
            Q = Q.copy()
            if g.n_participants:
                apply_rows(Q, SparseRows(g.ids, g.rows))
            self.tables[j] = Q
        return Q

    def forget_tables(self, before: int) -> None:
        """Drop the tables of rounds < ``before`` that are not needed to rebuild later ones (Q_0 stays)."""
        for j in [j for j in self.tables if 0 < j < before]:
            del self.tables[j]

    # ---- a step ------------------------------------------------------------------------------------
    def step(self, t: int, clients: np.ndarray, items: np.ndarray, present: np.ndarray, globals_: dict):
        """Test-then-train ``clients`` (k,) at step t on their arriving items (k,); absent ones sit out.

        Returns losses (k,) float64, ranks (k,) int64 and training negatives (k, N) int64 (0, 0, −1 for
        an absent client), computed by :meth:`StreamingGMF.test_then_train` on the table of round
        ⌈t/τ⌉ − 1. The other clients' rows are not touched.
        """
        m = self.model
        m.Q = self.table((t - 1) // self.tau, globals_)
        self._mask[:] = False
        self._mask[clients] = present
        self._X[clients, 0, 0] = items
        losses = m.test_then_train(self._X, None, t, self._mask)
        obs = m.observations()
        return losses[clients], obs["rank"][clients].copy(), obs["negatives"][clients].copy()

    # ---- rounds ------------------------------------------------------------------------------------
    def upload(self, r: int, worker: int, clients: np.ndarray, n_samples: np.ndarray, globals_: dict) -> GMFUpdate:
        """The GMF_UPDATE of round r for ``clients`` (sorted): their item-row deltas against Q_{r−1}, in
        slot order (as :meth:`StreamingGMF.upload`), their sample counts and their h, b."""
        m = self.model
        Q = self.table(r - 1, globals_)
        n_rows = m.n_slots[clients]
        used = np.arange(m.slot_ids.shape[1])[None, :] < n_rows[:, None]
        ids = m.slot_ids[clients][used]
        return GMFUpdate(round=r, worker=worker, table=0, clients=clients, n_samples=np.asarray(n_samples, np.int64),
                         n_rows=n_rows.astype(np.int64), ids=ids, rows=m.slot_rows[clients][used] - Q[ids],
                         counts=m.slot_counts[clients][used], h=m.H[clients], b=m.B[clients])

    def load(self, clients: np.ndarray, g: GMFGlobal) -> None:
        """Download GLOBAL(r) into ``clients``: h, b (when somebody took part) and empty submodels
        (:meth:`StreamingGMF.download`, per client; the table is :meth:`table`'s)."""
        m = self.model
        if g.n_participants:
            m.H[clients] = g.h
            m.B[clients] = g.b[0]
        self._empty(clients)

    def _empty(self, clients: np.ndarray) -> None:
        m = self.model
        n = m.n_slots[clients]
        used = np.arange(m.slot_ids.shape[1])[None, :] < n[:, None]
        m.slot_map[np.repeat(clients, n), m.slot_ids[clients][used]] = -1
        m.n_slots[clients] = 0

    # ---- checkpoints -------------------------------------------------------------------------------
    def state(self, client: int, t: int, offset: int, loss_offset: int) -> GMFState:
        """Client ``client``'s checkpoint (p, h, b, seen items)."""
        m = self.model
        return GMFState(client=client, t=t, offset=offset, loss_offset=loss_offset, p=m.P[client], h=m.H[client],
                        b=m.B[client:client + 1], seen=np.flatnonzero(m.seen[client]))

    def restore(self, client: int, st: GMFState | None) -> None:
        """Set client ``client`` to its checkpoint, or to the initial model (nothing seen) when None.

        Raises
        ------
        ValueError
            The checkpoint's sizes are not this run's (D, item ids < I).
        """
        m = self.model
        self._empty(np.array([client]))
        m.seen[client] = False
        if st is None:
            m.P[client], m.H[client], m.B[client] = self.P0[client], self.H0[client], self.B0[client]
            return
        if st.p.shape != (self.D,) or (st.seen.size and st.seen[-1] >= self.I):
            raise ValueError(f"the checkpoint of client {client} is not of this run (p {st.p.shape}, items up to "
                             f"{int(st.seen[-1]) if st.seen.size else None}; D = {self.D}, I = {self.I})")
        m.P[client], m.H[client], m.B[client] = st.p, st.h, st.b[0]
        m.seen[client, st.seen] = True


def update_problem(u: GMFUpdate, n_items: int, dim: int) -> tuple[str, str] | None:
    """Why a GMF_UPDATE cannot be this run's, as (reason, detail): an item id ≥ I (``unknown_item``), rows
    or h not D wide (``shape_mismatch``); None if it can (the aggregator rejects it otherwise)."""
    if u.ids.size and int(u.ids.max()) >= n_items:
        bad = u.ids[u.ids >= n_items]
        return ("unknown_item", f"round {u.round}: worker {u.worker}'s update names item ids "
                                f"{bad[:5].tolist()}, this run has I = {n_items} items")
    if u.rows.shape[1] != dim or u.h.shape[1] != dim:
        return ("shape_mismatch", f"round {u.round}: worker {u.worker}'s rows are {u.rows.shape[1]} and h "
                                  f"{u.h.shape[1]} wide, this run's embeddings D = {dim}")
    return None


def gmf_global(r: int, updates: list, n_clients: int, strategy) -> tuple[GMFGlobal, int, int]:
    """GLOBAL(r) from the GMF_UPDATEs that cover clients 0 … M−1 once; also (bytes up, bytes down).

    The updates are laid out as the embedded server's :class:`ModelUpdate`:
    each client's rows as one block, blocks in client order (the order of
    :meth:`StreamingGMF.upload`), h and b stacked (M, D) and (M, 1); then
    ``strategy.aggregate`` (the run's :class:`~streamfl.aggregation.MFFedAvg`).
    Bytes are counted as the embedded engine counts them
    (:class:`~streamfl.runtime.learners.Federated`).
    """
    from streamfl.aggregation.sparse import SparseRound
    from streamfl.models.client_model import ModelUpdate
    D = updates[0].h.shape[1]

    def cat(name):
        return np.concatenate([getattr(u, name) for u in updates])

    clients = cat("clients")
    owner = np.repeat(clients, cat("n_rows"))
    order = np.argsort(owner, kind="stable")        # client blocks in client order, each in slot order
    n_samples = np.zeros(n_clients, np.int64)
    H, B = np.zeros((n_clients, D)), np.zeros((n_clients, 1))
    n_samples[clients], H[clients], B[clients, 0] = cat("n_samples"), cat("h"), cat("b")
    rnd = SparseRound(client=owner[order], ids=cat("ids")[order], rows=cat("rows").reshape(-1, D)[order],
                      counts=cat("counts")[order], n_samples=n_samples)
    taking = int(np.count_nonzero(n_samples))
    up = rnd.ids.size * 8 * (2 + D) + taking * 8 * (D + 1)
    g = strategy.aggregate(ModelUpdate(sparse={"item": rnd}, dense={"h": H, "b": B}, n_samples=n_samples, nbytes=up),
                           n_samples)
    if g is None:
        return (GMFGlobal(round=r, n_participants=0, ids=np.zeros(0, np.int64), rows=np.zeros((0, D)), h=np.zeros(D),
                          b=np.zeros(1)), up, 0)
    item = g.sparse["item"]
    return (GMFGlobal(round=r, n_participants=taking, ids=item.ids, rows=item.rows, h=g.dense["h"], b=g.dense["b"]),
            up, n_clients * int(g.nbytes))
