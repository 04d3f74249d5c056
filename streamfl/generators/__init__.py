"""Where samples come from: drifting federated streams (synthetic and real)."""

from .base import Chunk, Stream
from .schedules import SCHEDULES, Abrupt, Adaptive, Linear, Periodic, RandomWalk, Rotation

__all__ = ["Abrupt", "Adaptive", "Chunk", "Linear", "Periodic", "RandomWalk", "Rotation", "SCHEDULES", "Stream"]
