"""The contrastive loss of `--few-shot` on a toy batch."""

import keras
import numpy as np
import pytest

from bertfit.model.losses import cosine_similarity_loss


def test_cosine_similarity_loss_is_the_squared_error_of_the_cosines():
    left = np.array([[1.0, 0.0], [1.0, 0.0], [2.0, 2.0]], np.float32)
    right = np.array([[3.0, 0.0], [0.0, 5.0], [1.0, 0.0]], np.float32)  # cosines 1, 0, 0.707
    targets = np.array([1.0, 1.0, 0.0], np.float32)
    loss = cosine_similarity_loss(left, right, targets)
    expected = (0.0 + 1.0 + 0.5) / 3  # (1-1)², (0-1)², (0.707-0)²
    assert float(keras.ops.convert_to_numpy(loss)) == pytest.approx(expected, rel=1e-5)
