"""Proof of ownership of an UPDATE: the workers' committed offsets name the updates they sent.

Every worker transaction commits the data offsets of the worker's partitions
into the workers' consumer group (``send_offsets_to_transaction``; see
:mod:`consumers.worker`). The broker accepts that commit only from a member of
the group at its current generation (KIP-447), atomically with the records
of the transaction. The worker writes into the offset metadata of partition p
the round r of its latest UPDATE covering p's clients and the digests of the
UPDATEs of that round that cover them::

    r=<round>;u=<digest>,<digest>

The aggregator (:mod:`consumers.aggregator`) averages an UPDATE of round r
only once the committed metadata of every partition of its clients names r
and the UPDATE's digest: a record written to the updates topic by anyone
but the owner of those partitions (a stray or forged writer, a fenced zombie)
is never named there. The proof is as strong as the broker's access control:
a writer that may join the workers' group (Group READ ACL) could commit
offsets too; see ``compose/README.md`` for restricting it.
"""

from __future__ import annotations

import hashlib

__all__ = ["format_proof", "parse_proof", "update_digest"]


def update_digest(raw: bytes) -> str:
    """Digest of an UPDATE record's value: the first 16 hex digits of its SHA-256.

    >>> update_digest(b"abc")
    'ba7816bf8f01cfea'
    """
    return hashlib.sha256(bytes(raw)).hexdigest()[:16]


def format_proof(round_: int, digests) -> str:
    """Offset metadata naming round ``round_`` and its update digests (at most 4000 characters).

    >>> format_proof(3, ["ab12", "cd34"])
    'r=3;u=ab12,cd34'
    """
    text = f"r={int(round_)};u={','.join(digests)}"
    if len(text) > 4000:          # the broker's default offset.metadata.max.bytes is 4096
        raise ValueError(f"offset metadata of {len(text)} characters; at most 4000 fit")
    return text


def parse_proof(metadata: str | None) -> tuple[int, list[str]]:
    """(round, update digests) from committed-offset metadata; (0, []) if absent or not ours.

    >>> parse_proof("r=3;u=ab12,cd34")
    (3, ['ab12', 'cd34'])
    >>> parse_proof("")
    (0, [])
    """
    fields = dict(part.split("=", 1) for part in (metadata or "").split(";") if "=" in part)
    try:
        r = int(fields.get("r", 0))
    except ValueError:
        return (0, [])
    return (r, [u for u in fields.get("u", "").split(",") if u])
