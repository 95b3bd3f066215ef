"""`bertfit export --format onnx`: token ids in (tokenizer.json beside), probabilities out, run
by ONNX Runtime and `tokenizers` in a process without TensorFlow or bertfit, against bertfit's
own predictions."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.export.runtimes import ONNX_CLIENT, assert_tokenizer_json_packs_as, drift, run_client

# Export, convert and run a process per test: seconds each (`make test-fast` leaves them out).
pytestmark = pytest.mark.slow


INT8_LABEL_AGREEMENT = 0.97
INT8_MAX_DRIFT = 0.02


def test_fp32_gives_bertfits_labels_and_probabilities(
    portable_export, export_texts, bertfit_probabilities, tmp_path
):
    got = run_client(ONNX_CLIENT, portable_export("onnx"), export_texts, tmp_path)
    assert got.shape == bertfit_probabilities.shape
    np.testing.assert_array_equal(got.argmax(axis=1), bertfit_probabilities.argmax(axis=1))
    np.testing.assert_allclose(got, bertfit_probabilities, atol=1e-4)


def test_int8_drift_is_measured_and_small(
    portable_export, export_texts, bertfit_probabilities, tmp_path
):
    import onnx

    folder = portable_export("onnx", "int8")
    got = run_client(ONNX_CLIENT, folder, export_texts, tmp_path)
    agreement, max_drift = drift(bertfit_probabilities, got)
    print(f"onnx int8: labels agree on {agreement:.1%}, max probability drift {max_drift:.2e}")
    assert agreement >= INT8_LABEL_AGREEMENT
    assert max_drift <= INT8_MAX_DRIFT
    ops = {node.op_type for node in onnx.load(str(folder / "model.onnx")).graph.node}
    assert "MatMulInteger" in ops or "DynamicQuantizeMatMul" in ops, ops


def test_tokenizer_json_gives_bertfits_ids_for_texts_and_pairs(trained_run, export_texts):
    import tokenizers

    from bertfit.export.onnx import tokenizer_file
    from bertfit.inference.predictor import load_classifier

    _, summary = trained_run
    module = load_classifier(summary.run_dir).module
    # Written in the text, special tokens stay whole in both.
    texts = [*export_texts, "a [SEP] b [MASK]", "\tTabs\nand\u00a0spaces\u200b!"]
    spec = tokenizer_file(module.tokenizer, module.max_seq_length).to_str()
    packing = tokenizers.Tokenizer.from_str(spec)
    assert_tokenizer_json_packs_as(packing, module.tokenizer, module.max_seq_length, texts)


def test_the_folder_says_what_a_client_needs(portable_export):
    folder = portable_export("onnx")
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["bertfit.json", "model.onnx", "tokenizer.json"]
    meta = json.loads((folder / "bertfit.json").read_text())
    assert meta["tokenizer"] == "tokenizer.json" and meta["output"] == "probabilities"
    assert meta["labels"] == ["neg", "pos"] and meta["max_seq_length"] == 16
