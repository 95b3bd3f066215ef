"""Windowed documents (issue 35) on 2 mirrored CPU replicas train and predict like one device,
with and without accumulating micro-batches: a document's windows stay together in one
replica's rows, one row per document."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.distributed
ROOT = Path(__file__).resolve().parents[2]


def test_two_replicas_train_and_predict_windowed_documents_like_one_device():
    result = subprocess.run(
        [sys.executable, "-m", "tests.distributed.windowed_replicas"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    one = out["one"]
    assert len(one["losses"]) == 6 and out["buckets"] == [1, 2]  # 21 documents, batch 4
    assert set(out["replicas"]) == {"two", "two-accumulating"}
    for name, two in out["replicas"].items():
        np.testing.assert_allclose(two["losses"], one["losses"], rtol=1e-4, err_msg=name)
        assert two["weight_difference"] < 1e-4, name
    # predicting takes no micro-batches: the replicas' predictions are "two"'s
    np.testing.assert_allclose(
        out["replicas"]["two"]["probabilities"], one["probabilities"], rtol=0, atol=1e-5
    )
