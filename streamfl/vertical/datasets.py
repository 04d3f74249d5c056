"""Real data sets split by features, available offline."""

from __future__ import annotations

import numpy as np

from .data import VerticalBatch, split_columns


def digits_quadrants(test_fraction: float = 0.2, split_seed: int = 0) -> tuple[VerticalBatch, VerticalBatch]:
    """scikit-learn's bundled 8×8 handwritten digits (1,797 images, 10 classes), one image quadrant per party.

    Party 1 holds the top-left 4×4 pixels, party 2 the top-right, party 3 the
    bottom-left, party 4 the bottom-right (16 features each, pixel intensities
    0..16 scaled to [0, 1]); the same split as C-VFL's CIFAR-10 experiment
    (Castiglia et al., 2022, §5: "each party storing a different quadrant of
    every image"). Sample ids are the row numbers of the bundled table.

    Parameters
    ----------
    test_fraction : float
        Share of samples held out, stratified by class.
    split_seed : int
        Seeds the train/test split.

    Returns
    -------
    (train, test) : VerticalBatch, VerticalBatch
        1,437 and 360 samples with the default fraction.

    >>> train, test = digits_quadrants()
    >>> len(train), len(test), train.widths
    (1437, 360, (16, 16, 16, 16))
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    X, y = digits.data / 16.0, digits.target.astype(np.int64)
    rows, cols = np.divmod(np.arange(64), 8)
    groups = [np.flatnonzero((rows // 4 == r) & (cols // 4 == c)) for r in (0, 1) for c in (0, 1)]
    data = split_columns(X, y, groups)
    train_idx, test_idx = train_test_split(np.arange(len(y)), test_size=test_fraction, stratify=y,
                                           random_state=split_seed)
    return data.take(np.sort(train_idx)), data.take(np.sort(test_idx))
