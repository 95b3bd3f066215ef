"""Windowed documents (issue 35) on 2 mirrored CPU replicas train and predict like one device:
a document's windows stay together in one replica's rows, one row per document."""

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


@pytest.mark.parametrize("grad_accum", [1, 2])
def test_two_replicas_train_and_predict_windowed_documents_like_one_device(grad_accum):
    result = subprocess.run(
        [sys.executable, "-m", "tests.distributed.windowed_replicas", str(grad_accum)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    one, two = out["losses"]
    assert len(one) == len(two) == 6 and len(out["buckets"]) > 1  # 21 documents, batch 4
    np.testing.assert_allclose(two, one, rtol=1e-4)
    assert out["weight_difference"] < 1e-4
    np.testing.assert_allclose(*out["probabilities"], rtol=0, atol=1e-5)
