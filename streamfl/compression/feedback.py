"""Error feedback: send C(x + e), keep e ← (x + e) − sent for the next message."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .base import Compressor, Key, as_rows


class ErrorFeedback:
    """Wraps a compressor with the sender-side error-feedback memory (Karimireddy et al., 2019; Lin et al., 2018).

    Each :meth:`encode` compresses the *corrected input* c = x + e (e = the
    residual left by the previous message, 0 at first), and stores the new
    residual e ← c − sent, where sent = C.decode(payload) is exactly what the
    receiver decodes. Nothing extra goes on the wire: the payload is the wrapped
    compressor's and the receiver decodes it with the wrapped compressor.

    The memory belongs to one sender (or, with :meth:`encode_batch`, to M
    senders at once: residual shape (M, ...)). It fits model updates sent
    repeatedly by the same client (horizontal FL), not C-VFL embeddings (each
    round's embeddings are of other samples).

    Parameters
    ----------
    compressor : Compressor

    Attributes
    ----------
    residual : ndarray or None
        e, float64, shape of the last input (None before the first message).

    Examples
    --------
    >>> from streamfl.compression import TopK
    >>> ef = ErrorFeedback(TopK(bits=16))        # k = 2 of 4
    >>> p = ef.encode([4.0, 1.0, -3.0, 2.0])
    >>> ef.residual
    array([0., 1., 0., 2.])
    >>> ef.compressor.decode(ef.encode([0.0, 0.0, 0.0, 0.5]))   # the residual is sent next
    array([0. , 1. , 0. , 2.5])
    """

    def __init__(self, compressor: Compressor):
        if not isinstance(compressor, Compressor):
            raise ValueError(f"ErrorFeedback wraps a Compressor, got {type(compressor).__name__}")
        self.compressor = compressor
        self.residual: np.ndarray | None = None

    def _correct(self, x: np.ndarray) -> np.ndarray:
        if self.residual is None:
            return x
        if self.residual.shape != x.shape:
            raise ValueError(f"error feedback holds a residual of shape {self.residual.shape}; "
                             f"got an input of shape {x.shape}")
        return x + self.residual

    def encode(self, x, key: Key = None) -> bytes:
        """The payload of C(x + e); updates e to (x + e) − decode(payload)."""
        c = self._correct(as_rows(x)[0])
        payload = self.compressor.encode(c, key)
        self.residual = c - self.compressor.decode(payload, key)
        return payload

    def encode_batch(self, X, keys: Sequence[Key] | None = None) -> list[bytes]:
        """M senders' payloads in one pass, each with its own residual (residual shape (M, ...))."""
        c = self._correct(as_rows(X, "X")[0])
        payloads = self.compressor.encode_batch(c, keys)
        self.residual = c - self.compressor.decode_batch(payloads, keys)
        return payloads

    def decode(self, payload: bytes, key: Key = None) -> np.ndarray:
        """The receiver's side: the wrapped compressor's decode."""
        return self.compressor.decode(payload, key)

    def reset(self) -> None:
        """Forget the residual."""
        self.residual = None
