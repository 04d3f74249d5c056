"""Per-step metrics streamed to disk, chunk by chunk (CSV or Parquet)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:            # pandas is imported by the tracker when the first chunk's rows exist
    import pandas as pd


class MetricsSink:
    """Append the tracker's per-step rows to ``metrics.csv`` / ``metrics.parquet``.

    Memory stays constant in T: each chunk's rows are written and dropped.
    """

    def __init__(self, run_dir: Path, fmt: str = "csv"):
        self.fmt = fmt
        self.path = Path(run_dir) / f"metrics.{fmt}"
        self._writer = None
        self._header = True

    def __call__(self, frame: pd.DataFrame) -> None:
        if self.fmt == "csv":
            frame.to_csv(self.path, mode="w" if self._header else "a", header=self._header, index=False,
                         float_format="%.10g")
            self._header = False
            return
        import pyarrow as pa
        import pyarrow.parquet as pq
        table = pa.Table.from_pandas(frame, preserve_index=False)
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.path, table.schema)
        self._writer.write_table(table)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
