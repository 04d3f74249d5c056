"""Running FedSEA over a real Apache Kafka broker.

* :mod:`streamfl.transport.format` — the versioned binary wire format of every
  record (DATA, LOSS, UPDATE, GLOBAL, STATE, SPARSE_UPDATE).
* :mod:`streamfl.transport.topics` — per-run topic names, topic creation and
  the client → partition rule.
* :mod:`streamfl.transport.state` — the workers' state changelog, and the
  producers and readers (transactional, read-committed) the roles use.
* :mod:`streamfl.transport.fencing` — the proof, in the workers' committed
  offsets, that an UPDATE comes from the owner of its clients.
* :mod:`streamfl.transport.security` — the broker's SASL/TLS settings, passed
  to every Kafka client.

The processes themselves live in the top-level packages ``producers``
(the stream producer) and ``consumers`` (workers, aggregator, tracker); the
orchestration is :mod:`streamfl.runtime.kafka_run`.

The names below are loaded on first use, so that importing
:mod:`streamfl.transport.topics` (e.g. to check a ``--run-id``) does not
import numpy.
"""

__all__ = ["Data", "FormatError", "Global", "Loss", "MsgType", "SparseRoundUpdate", "Update", "decode", "encode"]


def __getattr__(name):
    if name in __all__:
        from . import format
        return getattr(format, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
