"""Vertical federated learning: parties hold feature slices of the same samples; C-VFL trains them.

* :mod:`~streamfl.vertical.data` — vertically partitioned batches, column splits, join by sample id
* :mod:`~streamfl.vertical.join` — streaming join of the parties' records by sample id
* :mod:`~streamfl.vertical.cvfl` — C-VFL (Castiglia et al., ICML 2022, Algorithm 1), its sides composed in one process
* :mod:`~streamfl.vertical.sides` — a party's side and the server's side of a round (the Kafka roles run one each)
* :mod:`~streamfl.vertical.wire` — messages between server and parties, bytes counted
* :mod:`~streamfl.vertical.train` — round-based training by epochs, the streaming (prequential) driver
* :mod:`~streamfl.vertical.models` — fusion head and bounded party embeddings
"""

from .cvfl import CVFL, RoundReport, cross_entropy
from .data import VerticalBatch, VerticalDataset, join_by_id, split_columns
from .join import SampleJoiner
from .models import ConcatFusion, tanh_embedding
from .train import prequential, stream_batches, train_epochs
from .wire import Message, Wire

__all__ = ["CVFL", "ConcatFusion", "Message", "RoundReport", "SampleJoiner", "VerticalBatch", "VerticalDataset",
           "Wire", "cross_entropy", "join_by_id", "prequential", "split_columns", "stream_batches", "tanh_embedding",
           "train_epochs"]
