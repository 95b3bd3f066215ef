"""bench.inference's bookkeeping: rows come back in input order, medians over rounds, each bertfit
path compared with the ONNX Runtime peer at its own precision."""

from __future__ import annotations

import numpy as np

from bench.inference import PREDICT_PROCESS, ratios, rows, summarize
from bench.inference_paths import _batches, _in_order, _pad


def test_batches_of_a_length_order_come_back_in_input_order():
    lengths = np.array([5, 1, 70, 3, 3, 9] * 30)
    order = np.argsort(lengths, kind="stable")
    parts = [lengths[batch] * 10 for batch in _batches(order)]
    assert [len(p) for p in parts] == [64, 64, 52]
    np.testing.assert_array_equal(_in_order(parts, order), lengths * 10)


def test_pad_to_the_longest_row():
    np.testing.assert_array_equal(_pad([[1, 2, 3], [4]], 0), [[1, 2, 3], [4, 0, 0]])


def _timed(warm: list[float], first_result: float) -> dict:
    return {
        "pass_seconds": [99.0, *warm],  # the cold pass is left out
        "load_seconds": 1.0,
        "launch_to_first_result_seconds": first_result,
    }


def test_ratios_against_the_peer_at_the_same_precision_and_torch():
    texts = 100
    records = {
        "bertfit-onnx-fp32": [_timed([1.0, 1.0], 5), _timed([2.0, 2.0], 5), _timed([1.0], 5)],
        "bertfit-onnx-int8": [_timed([0.5], 3)],
        "ort-peer-fp32": [_timed([2.0], 8)],
        "ort-peer-int8": [_timed([0.25], 8)],
        "torch-peer": [_timed([4.0], 12)],
        PREDICT_PROCESS: [{"process_seconds": 6.0}, {"process_seconds": 4.0}],
    }
    summary = {name: summarize(r, texts) for name, r in records.items()}
    assert summary["bertfit-onnx-fp32"]["texts_per_second"] == 100.0  # median of 1, 2, 1 s
    assert summary[PREDICT_PROCESS]["process_seconds"] == 5.0
    ratio = ratios(summary)
    assert ratio["bertfit-onnx-fp32"] == {"vs_ort": 2.0, "vs_torch": 4.0}
    assert ratio["bertfit-onnx-int8"] == {"vs_ort": 0.5, "vs_torch": 8.0}
    assert ratio[PREDICT_PROCESS] == {"vs_ort": 8 / 5, "vs_torch": 12 / 5}
    assert "torch-peer" not in ratio
    checks = {"bertfit-onnx-int8": {"label_agreement": 0.984}}
    lines = rows(
        {
            "summary": summary,
            "ratios": ratio,
            "agreement_with_predictor": checks,
            "settings": {"texts": texts},
        }
    )
    assert lines[1] == (
        "| 100 RT test texts to probabilities: onnx-int8 | 200 texts/s (labels 98.4% as the "
        "predictor's) | ORT int8 400, torch 25 texts/s | 0.50x ORT, 8.00x torch |"
    )
