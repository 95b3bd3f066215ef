"""A classifier of long documents (issue 35) in memory and exported: whole documents in, one row
out per document, the windowing inside the graph; the export answers as `predict` does."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bertfit.data.tasks import Task
from bertfit.errors import ConfigError
from bertfit.export.litert import export_litert
from bertfit.export.onnx import export_onnx
from bertfit.export.serving import export_classifier
from bertfit.inference.graph import IdLimits
from bertfit.inference.predictor import load_classifier
from bertfit.text.windows import tokenize_windows
from tests.long_documents import CUT, DOCUMENTS, ONE_WINDOW, SHORT, SPEC, chunk_classifier
from tests.tiny import TINY_VOCAB, WORDS

MODEL_KEYS = ("input_word_ids", "input_mask", "input_type_ids", "window_mask")


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    return chunk_classifier(tmp_path_factory.mktemp("chunk"))


@pytest.fixture(scope="module")
def exported(classifier, tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    export_classifier(classifier, root)
    return root


def _logits(classifier, text: str) -> np.ndarray:
    """The model on the document's windows as training cuts them (K = max_chunks, full length)."""
    windows = tokenize_windows(classifier.module.tokenizer, [text], SPEC)
    return classifier.module.model({k: windows[k] for k in MODEL_KEYS})[0].numpy()


def _model_on_windows(classifier, text: str) -> np.ndarray:
    return tf.nn.softmax(_logits(classifier, text)).numpy()


def test_the_documents_need_one_several_and_more_than_max_chunks_windows(classifier):
    windows = tokenize_windows(classifier.module.tokenizer, DOCUMENTS, SPEC)["windows"]
    assert sorted(set(windows.numpy().tolist())) == [1, 3, 9]
    assert SPEC.max_chunks == 4


def test_predict_gives_one_row_per_document_its_windows_pooled(classifier):
    probabilities = classifier.predict_proba(DOCUMENTS)
    assert probabilities.shape == (len(DOCUMENTS), 3)
    expected = np.stack([_model_on_windows(classifier, text) for text in DOCUMENTS])
    np.testing.assert_allclose(probabilities, expected, rtol=0, atol=1e-6)
    assert np.ptp(probabilities[:, 0]) > 1e-3  # documents differ far more than the tolerance
    rows = classifier.predict(DOCUMENTS)
    assert len(rows) == len(DOCUMENTS) and {"label", "probabilities"} <= set(rows[0])


def test_the_model_sees_windows_padded_to_the_buckets_only(classifier):
    module = classifier.module  # chunk-count buckets 1, 2, 4; length buckets 8, 16
    shapes = set()
    ten, twenty = " ".join(WORDS[:10]), " ".join(WORDS[:20])  # 1 window of 12, 2 windows
    batches = [[SHORT[0]], SHORT, [ten, *SHORT], [twenty], [ONE_WINDOW, DOCUMENTS[2]], [CUT], []]
    for batch in batches:
        windows = module._window(module.tokenizer.tokenize(tf.constant(batch, tf.string)))
        shapes.add(tuple(windows["input_word_ids"].shape[1:]))
        assert windows["window_mask"].shape == windows["input_word_ids"].shape[:2]
    assert shapes == {(1, 8), (1, 16), (2, 16), (4, 16)}


def test_a_document_alone_or_among_short_documents_gets_the_same_probabilities(classifier):
    for document in (CUT, DOCUMENTS[2], ONE_WINDOW):
        alone = classifier.predict_proba([document])[0]
        among = classifier.predict_proba([*SHORT, document, *SHORT])[len(SHORT)]
        np.testing.assert_allclose(among, alone, rtol=0, atol=1e-6)


def test_batches_hold_at_most_batch_size_windows_and_change_nothing(tmp_path, classifier):
    small = chunk_classifier(tmp_path, batch_size=4)
    lengths = small._lengths(DOCUMENTS, None)
    batches = small._batches(np.argsort(lengths, kind="stable"), lengths)
    kept = np.minimum(SPEC.windows_needed(lengths), SPEC.max_chunks)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(DOCUMENTS)))
    for batch in batches:  # documents x their chunk-count bucket; a long one alone
        bucket = {1: 1, 2: 2, 3: 4, 4: 4}[int(kept[batch].max())]
        assert len(batch) * bucket <= 4 or len(batch) == 1
    assert len(batches) > 2
    np.testing.assert_allclose(
        small.predict_proba(DOCUMENTS), classifier.predict_proba(DOCUMENTS), rtol=0, atol=1e-6
    )


def test_the_export_takes_whole_strings_and_equals_predict(classifier, exported):
    expected = classifier.predict_proba(DOCUMENTS)
    loaded = load_classifier(exported)
    np.testing.assert_allclose(loaded.predict_proba(DOCUMENTS), expected, rtol=0, atol=1e-5)
    # A client of the SavedModel alone: the signature a truncate export has, one batch
    import tensorflow_text  # noqa: F401  (the tokenizer's ops, as a TF Serving client loads it)

    saved = tf.saved_model.load(str(exported / "1"))
    serving = saved.signatures["serving_default"]
    assert list(serving.structured_input_signature[1]) == ["text"]
    outputs = serving(text=tf.constant(DOCUMENTS))
    assert set(outputs) == {"probabilities", "label", "label_id"}
    np.testing.assert_allclose(outputs["probabilities"].numpy(), expected, rtol=0, atol=1e-5)
    empty = serving(text=tf.constant([], tf.string))["probabilities"]
    assert empty.shape == (0, 3)


def test_classify_ids_rows_are_documents_of_one_window(classifier, exported):
    tokenizer = classifier.module.tokenizer
    packed = tokenizer.pack(tokenizer.tokenize(SHORT), max_seq_length=16)
    expected = classifier.predict_proba(SHORT)
    for source in (classifier, load_classifier(exported)):
        outputs = source.signatures()["classify_ids"](**packed)
        np.testing.assert_allclose(outputs["probabilities"].numpy(), expected, atol=1e-5)
        assert IdLimits.of_module(source.module) == IdLimits(len(TINY_VOCAB), 2, 64)
        bad = {**packed, "input_word_ids": packed["input_word_ids"] + len(TINY_VOCAB)}
        with pytest.raises(tf.errors.InvalidArgumentError, match="the vocabulary size"):
            source.signatures()["classify_ids"](**bad)


@pytest.mark.parametrize(
    "task",
    [Task("multi-label", ("plot", "pos", "neg"), threshold=0.4), Task("regression", mean=3, std=2)],
)
def test_multi_label_and_regression_documents_get_their_windows_pooled(tmp_path, task):
    classifier = chunk_classifier(tmp_path, task=task)
    outputs = classifier.outputs(DOCUMENTS)
    logits = np.stack([_logits(classifier, text) for text in DOCUMENTS])
    examples = [_example(text) for text in DOCUMENTS]
    if task.kind == "regression":
        np.testing.assert_allclose(outputs["value"], logits[:, 0] * 2 + 3, rtol=0, atol=1e-5)
        by_examples = classifier.signatures()["regress"](inputs=tf.constant(examples))
        np.testing.assert_allclose(by_examples["outputs"], outputs["value"], rtol=0, atol=1e-6)
    else:
        expected = 1 / (1 + np.exp(-logits))
        np.testing.assert_allclose(outputs["probabilities"], expected, rtol=0, atol=1e-6)
        np.testing.assert_array_equal(outputs["predicted"], expected >= 0.4)
        by_examples = classifier.signatures()["classify"](inputs=tf.constant(examples))
        np.testing.assert_allclose(by_examples["scores"], expected, rtol=0, atol=1e-6)


def _example(text: str) -> bytes:
    feature = tf.train.Feature(bytes_list=tf.train.BytesList(value=[text.encode()]))
    return tf.train.Example(
        features=tf.train.Features(feature={"text": feature})
    ).SerializeToString()


@pytest.mark.parametrize("export", [export_litert, export_onnx])
def test_the_portable_formats_refuse_a_chunk_model_saying_why(classifier, tmp_path, export):
    with pytest.raises(ConfigError, match="does not take a --long-documents chunk model.*"):
        export(classifier, tmp_path / "out")
    assert not (tmp_path / "out").exists()
