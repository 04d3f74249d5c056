"""Step-size schedules η_t for online SGD (step t counted from 1).

FedSEA (Theorem 1) uses a constant η of order 1/√T for smooth convex losses,
and (Theorem 2) a decaying η_t of order 1/(μ t) for μ-strongly convex losses.

>>> StepSize("inv_sqrt", eta=0.5)(4)
0.25
>>> StepSize("strongly_convex", mu=2.0)(5)
0.1
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


class StepSize:
    """η_t for t = 1, 2, … (dimensionless; multiplies the gradient).

    Parameters
    ----------
    kind : {"constant", "inv_sqrt", "strongly_convex"}
        ``constant``: η_t = η. ``inv_sqrt``: η_t = η / √t.
        ``strongly_convex``: η_t = 1 / (μ (t + t0)).
    eta : float
        η (constant) or η0 (inv_sqrt); > 0.
    mu : float
        Strong-convexity modulus μ > 0 for ``strongly_convex``.
    t0 : float
        Offset t0 ≥ 0 for ``strongly_convex`` (FedSEA's Theorem 2 shifts the
        schedule so that the first steps are not too large).

    Raises
    ------
    ValueError
        For an unknown kind or a non-positive η / μ.
    """

    KINDS = ("constant", "inv_sqrt", "strongly_convex")

    def __init__(self, kind: str = "constant", eta: float = 0.1, mu: float = 1.0, t0: float = 0.0):
        if kind not in self.KINDS:
            raise ValueError(f"The 'kind' parameter of StepSize must be one of {self.KINDS}. Got {kind!r} instead.")
        if kind != "strongly_convex" and not eta > 0:
            raise ValueError(f"The 'eta' parameter of StepSize must be a float > 0. Got {eta!r} instead.")
        if kind == "strongly_convex" and not mu > 0:
            raise ValueError(f"The 'mu' parameter of StepSize must be a float > 0. Got {mu!r} instead.")
        if not t0 >= 0:
            raise ValueError(f"The 't0' parameter of StepSize must be a float >= 0. Got {t0!r} instead.")
        self.kind, self.eta, self.mu, self.t0 = kind, eta, mu, t0

    def __call__(self, t: int) -> float:
        if self.kind == "constant":
            return self.eta
        if self.kind == "inv_sqrt":
            return self.eta / math.sqrt(t)
        return 1.0 / (self.mu * (t + self.t0))

    def values(self, ts) -> np.ndarray:
        """η_t for an array of steps ``ts`` (1-based), vectorised; same values as calling per step.

        >>> StepSize("inv_sqrt", eta=1.0).values([1, 4]).tolist()
        [1.0, 0.5]
        """
        import numpy as np
        ts = np.asarray(ts, dtype=np.float64)
        if self.kind == "constant":
            return np.full(ts.shape, float(self.eta))
        if self.kind == "inv_sqrt":
            return self.eta / np.sqrt(ts)
        return 1.0 / (self.mu * (ts + self.t0))

    def __repr__(self) -> str:
        return f"StepSize(kind={self.kind!r}, eta={self.eta}, mu={self.mu}, t0={self.t0})"
