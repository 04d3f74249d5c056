"""Running FedSEA over a real Apache Kafka broker.

* :mod:`streamfl.transport.format` — the versioned binary wire format of every
  record (DATA, LOSS, UPDATE, GLOBAL, STATE, SPARSE_UPDATE).
* :mod:`streamfl.transport.topics` — per-run topic names, topic creation and
  the client → partition rule.

The processes themselves live in the top-level packages ``producers``
(the stream producer) and ``consumers`` (workers, aggregator, tracker); the
orchestration is :mod:`streamfl.runtime.kafka_run`.
"""

from .format import Data, FormatError, Global, Loss, MsgType, SparseRoundUpdate, Update, decode, encode

__all__ = ["Data", "FormatError", "Global", "Loss", "MsgType", "SparseRoundUpdate", "Update", "decode", "encode"]
