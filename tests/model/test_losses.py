"""The contrastive loss of `--few-shot` on a toy batch."""

import keras
import numpy as np
import pytest

from bertfit.model.losses import batch_cosine_loss


def test_batch_cosine_loss_is_the_weighted_squared_error_of_every_pairs_cosine():
    embeddings = np.array([[1.0, 0.0], [3.0, 0.0], [0.0, 5.0], [2.0, 2.0]], np.float32)
    alike = np.array([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]], np.float32)
    weights = np.zeros((4, 4), np.float32)
    weights[0, 1], weights[0, 2], weights[2, 3], weights[1, 3] = 0.25, 0.25, 0.25, 0.25
    loss = batch_cosine_loss(embeddings, alike, weights)
    # cosines 1, 0, 0.707 (alike: error 0.086) and 0.707 (unlike: error 0.5)
    expected = 0.25 * (0.0 + 0.0 + (1 - 0.5**0.5) ** 2 + 0.5)
    assert float(keras.ops.convert_to_numpy(loss)) == pytest.approx(expected, rel=1e-5)
