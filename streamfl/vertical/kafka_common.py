"""What the vertical Kafka roles share: role arguments, and the one rule that accepts or rejects a feature record.

The server and every party apply :func:`accept_row` / :func:`accept_label` to
the same records in the same order, so they keep the same row of every
sample id (the first valid one) and the server's batches name rows the parties hold.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from ..transport.format import FormatError
from ..transport.vertical import VType, decode, sample_id


def role_args(description: str, party: bool = False) -> argparse.Namespace:
    """Parse a vertical role's command line: --bootstrap, --run-id, --config-json [--party m] [--timeout s]."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--config-json", required=True, help="the VerticalConfig as JSON")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds without progress before giving up")
    if party:
        ap.add_argument("--party", type=int, required=True, help="m, 1..M")
    else:
        ap.add_argument("--out", default=None, help="results folder (server only)")
    return ap.parse_args()


def config_from(args):
    from .spec import vertical_config
    return vertical_config(json.loads(args.config_json))


def accept_row(value, key, width: int, seen: set) -> tuple[str, object]:
    """Classify one record of a party topic.

    Returns ``("row", (id, row))`` for a new valid row, ``("end", count)`` for END,
    or ``("dead", (reason, detail))`` for a record that goes to the dead-letter topic:
    malformed (the :class:`FormatError` reason), ``bad_width`` (not D_m values),
    ``non_finite`` (NaN or ±inf), ``duplicate_id`` (the id already has a valid row: the first one is kept),
    ``bad_type`` (another record type).
    """
    try:
        t, f = decode(value)
        if t is VType.END:
            return "end", f
        if t is not VType.ROW:
            return "dead", ("bad_type", f"a {t.name} record on a feature topic")
        i = sample_id(key)
    except FormatError as e:
        return "dead", (e.reason, e.detail)
    if len(f) != width:
        return "dead", ("bad_width", f"sample {i}: {len(f)} features, this party holds {width}")
    if not np.isfinite(f).all():
        return "dead", ("non_finite", f"sample {i}: NaN or infinite feature")
    if i in seen:
        return "dead", ("duplicate_id", f"sample {i} already has a row; the first is kept")
    seen.add(i)
    return "row", (i, f)


def accept_label(value, key, n_classes: int, seen: set) -> tuple[str, object]:
    """Classify one record of the labels topic (as :func:`accept_row`; ``bad_label`` outside 0..K−1)."""
    try:
        t, f = decode(value)
        if t is VType.END:
            return "end", f
        if t is not VType.LABEL:
            return "dead", ("bad_type", f"a {t.name} record on the labels topic")
        i = sample_id(key)
    except FormatError as e:
        return "dead", (e.reason, e.detail)
    if not 0 <= f < n_classes:
        return "dead", ("bad_label", f"sample {i}: label {f} outside 0..{n_classes - 1}")
    if i in seen:
        return "dead", ("duplicate_id", f"sample {i} already has a label; the first is kept")
    seen.add(i)
    return "label", (i, f)
