"""Message passing between C-VFL's server (id 0) and parties (ids 1..M), with exact byte accounting."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Message:
    """One payload on the wire: sender → receiver in a round."""

    round: int
    sender: int
    receiver: int
    payload: bytes


class Wire:
    """In-process links between the server (0) and the parties (1..M), counting every payload's bytes.

    ``bytes_up`` sums the payloads sent to the server, ``bytes_down`` those the
    server sends; both are ``len(payload)`` of the bytes actually passed, so
    bits on the wire are ``8 × bytes``. A transport over Kafka implements the
    same :meth:`send` (a payload per record) and counts the same way.

    Parameters
    ----------
    record : bool
        Keep every :class:`Message` in ``messages`` (tests, audits); memory grows with the run.

    Examples
    --------
    >>> w = Wire()
    >>> _ = w.send(0, sender=1, receiver=0, payload=b"abc"); _ = w.send(0, 0, 2, b"de")
    >>> w.bytes_up, w.bytes_down, w.messages_sent
    (3, 2, 2)
    """

    def __init__(self, record: bool = False):
        self.record = record
        self.bytes_up = 0
        self.bytes_down = 0
        self.messages_sent = 0
        self.messages: list[Message] = []

    def send(self, round: int, sender: int, receiver: int, payload: bytes) -> bytes:
        """Deliver ``payload`` (returned unchanged to the receiver) and count its bytes."""
        if (sender == 0) == (receiver == 0):
            raise ValueError(f"C-VFL messages go between the server (0) and a party; got {sender} → {receiver}")
        if sender == 0:
            self.bytes_down += len(payload)
        else:
            self.bytes_up += len(payload)
        self.messages_sent += 1
        if self.record:
            self.messages.append(Message(round, sender, receiver, payload))
        return payload
