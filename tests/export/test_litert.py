"""`bertfit export --format litert`: strings in, probabilities out, run by the LiteRT interpreter
in a process without TensorFlow or bertfit, against bertfit's own predictions."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from bertfit.cli import main
from tests.export.runtimes import LITERT_CLIENT, drift, run_client

# Export, convert and run a process per test: seconds each (`make test-fast` leaves them out).
pytestmark = pytest.mark.slow


# int8 (dynamic range) on the tiny run's texts; the measured values are printed (pytest -s).
INT8_LABEL_AGREEMENT = 0.97
INT8_MAX_DRIFT = 0.02


def test_fp32_gives_bertfits_labels_and_probabilities(
    portable_export, export_texts, bertfit_probabilities, tmp_path
):
    got = run_client(LITERT_CLIENT, portable_export("litert"), export_texts, tmp_path)
    assert got.shape == bertfit_probabilities.shape
    np.testing.assert_array_equal(got.argmax(axis=1), bertfit_probabilities.argmax(axis=1))
    np.testing.assert_allclose(got, bertfit_probabilities, atol=1e-4)


def test_int8_drift_is_measured_and_small(
    portable_export, export_texts, bertfit_probabilities, tmp_path
):
    folder = portable_export("litert", "int8")
    got = run_client(LITERT_CLIENT, folder, export_texts, tmp_path)
    agreement, max_drift = drift(bertfit_probabilities, got)
    print(f"litert int8: labels agree on {agreement:.1%}, max probability drift {max_drift:.2e}")
    assert agreement >= INT8_LABEL_AGREEMENT
    assert max_drift <= INT8_MAX_DRIFT
    assert json.loads((folder / "bertfit.json").read_text())["quantize"] == "int8"
    assert _weight_types(folder / "model.tflite") >= {np.int8}


def _interpreter(path):
    from ai_edge_litert.interpreter import InterpreterWithCustomOps
    from tensorflow_text import tflite_registrar

    return InterpreterWithCustomOps(
        model_path=str(path), custom_op_registerers=tflite_registrar.SELECT_TFTEXT_OPS
    )


def _weight_types(path) -> set:
    """The element types of the model's constant tensors."""
    return {detail["dtype"] for detail in _interpreter(path).get_tensor_details()}


def test_a_batch_is_padded_to_its_length_bucket_not_max_seq_length(portable_export):
    """The run's buckets are 8 and 16 (tests/conftest.py): short texts run as rows of 8 token
    slots, and one long text makes the batch 16, as the SavedModel pads."""
    interpreter = _interpreter(portable_export("litert") / "model.tflite")
    classify = interpreter.get_signature_runner()

    def row_width(texts):
        """The longest axis 1 of the [batch, ...] hidden states the call computed."""
        probabilities = classify(text=np.array(texts, dtype=object))["probabilities"]
        assert probabilities.shape == (len(texts), 2)
        shapes = [d["shape"] for d in interpreter.get_tensor_details() if len(d["shape"]) == 3]
        return max(int(shape[1]) for shape in shapes if shape[0] == len(texts))

    assert row_width(["good film", "bad"]) == 8
    assert row_width(["good film", "the good film " * 12]) == 16


def test_the_folder_says_what_a_client_needs(portable_export):
    folder = portable_export("litert")
    assert sorted(p.name for p in folder.iterdir()) == ["bertfit.json", "model.tflite"]
    meta = json.loads((folder / "bertfit.json").read_text())
    assert meta["labels"] == ["neg", "pos"] and meta["max_seq_length"] == 16
    assert meta["output"] == "probabilities" and meta["inputs"] == {"text": "string [batch]"}


def test_an_export_prints_its_folder_and_no_converter_notes(trained_run, tmp_path, capfd, caplog):
    """Freezing, saving and reading back for the converter logs notes worded like failures
    ("Issue encountered when serializing table_initializer", "unsaved custom gradients"):
    harmless for an export, and kept off the terminal; what is left is the folder written.
    (Under pytest TensorFlow's loggers hand their records to pytest's: caplog sees them.)"""
    _, summary = trained_run
    capfd.readouterr()
    argv = ["export", "--format", "litert", "--run", summary.run_dir, str(tmp_path / "lite")]
    with caplog.at_level(logging.INFO):
        assert main(argv) == 0
    out, err = capfd.readouterr()
    assert out == f"{tmp_path / 'lite' / '1'}\n"
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert logged == [] and "WARNING" not in err, (logged, err)


def test_quantize_is_refused_for_a_saved_model_and_an_export_is_refused_as_source(
    trained_run, tmp_path, capsys
):
    _, summary = trained_run
    argv = ["export", "--quantize", "int8", "--run", summary.run_dir, str(tmp_path / "a")]
    assert main(argv) == 2
    assert "--quantize int8 is for --format litert or onnx" in capsys.readouterr().err
    assert main(["export", "--run", summary.run_dir, str(tmp_path / "sm")]) == 0
    argv = ["export", "--format", "litert", "--run", str(tmp_path / "sm"), str(tmp_path / "b")]
    assert main(argv) == 2
    assert "exports from a run directory" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b" / "1").exists()


@pytest.mark.parametrize("bad", ["int4", "fp16"])
def test_unknown_quantizations_are_usage_errors(trained_run, tmp_path, bad, capsys):
    _, summary = trained_run
    with pytest.raises(SystemExit) as exit_:
        main(["export", "--format", "onnx", "--quantize", bad, "--run", summary.run_dir, "x"])
    assert exit_.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


# FastBertTokenizer (Google BERT's tokenization) against bertfit's (Hugging Face's), with
# MiniLM-L6's vocabulary: the inputs bertfit/export/litert.py documents as different, and
# ordinary text (cased, accented, CJK, punctuation, emoji, long words) that must not be.
SAME_IDS = [
    "Hello, world!!! it's 3.14",
    "naïve Café déjà",
    "東京タワー is tall",
    "emoji 😀 ok",
    "don't-stop",
    "x" * 60 + "é" * 30,
]
DOCUMENTED_DIFFERENCES = ["a [SEP] b", "nul\x00char", "so…", "ﬁne", "ＡＢＣ", "Ǆ"]


def test_the_tokenizer_inside_gives_bertfits_ids_except_where_documented(minilm_dir):
    from bertfit.export.litert import fast_bert_tokenizer
    from bertfit.text.tokenizer import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained_dir(minilm_dir)
    fast = fast_bert_tokenizer(tokenizer)
    for texts, same in ((SAME_IDS, True), (DOCUMENTED_DIFFERENCES, False)):
        ours = tokenizer.tokenize(texts).to_list()
        theirs = fast.tokenize(texts).to_list()
        assert [a == b for a, b in zip(ours, theirs, strict=True)] == [same] * len(texts)
