"""The exported SavedModel's signatures on the inputs a hostile client sends: an empty batch is
answered with empty outputs, and ids the model cannot read fail inside the graph with a message
that says why, never with a wrong number of rows."""

from __future__ import annotations

import re

import pytest
import tensorflow as tf

from bertfit.export.serving import export_classifier
from bertfit.inference.graph import IdLimits
from bertfit.inference.predictor import load_classifier

CLASSIFY_IDS_FAULTS = [
    ([[2, 5, 3]], [[1]], [[0, 0, 0]], "input_mask must have the shape of input_word_ids"),
    ([[2, 5, 3]], [[1, 1, 1]], [[0, 0]], "input_type_ids must have the shape of input_word_ids"),
    ([[2, 5, 3]], [[1, 1, 1], [1, 1, 1]], [[0, 0, 0]], "input_mask must have the shape"),
    ([[2, 41, 3]], [[1, 1, 1]], [[0, 0, 0]], "input_word_ids must be < 41 (the vocabulary size)"),
    ([[2, -4, 3]], [[1, 1, 1]], [[0, 0, 0]], "input_word_ids must be >= 0"),
    ([[2, 5, 3]], [[1, 1, 1]], [[0, 2, 0]], "input_type_ids must be < 2"),
    ([[2, 5, 3]], [[1, 1, 1]], [[0, -1, 0]], "input_type_ids must be >= 0"),
    ([[5] * 65], [[1] * 65], [[0] * 65], "rows must be at most 64 ids long"),
    ([[]], [[]], [[]], "input_word_ids must have at least one id per row"),
]


@pytest.fixture(scope="module")
def signatures(trained_run, tmp_path_factory):
    """The signatures of the classifier in memory and of its export loaded back."""
    _, result = trained_run
    classifier = load_classifier(result.run_dir)
    root = tmp_path_factory.mktemp("export")
    export_classifier(classifier, root)
    exported = load_classifier(root)
    return {"module": classifier.signatures(), "export": exported.signatures()}


@pytest.mark.parametrize("source", ["module", "export"])
def test_an_empty_batch_gets_empty_outputs_of_the_right_shapes(signatures, source):
    outputs = signatures[source]["serving_default"](text=tf.constant([], tf.string))
    assert {k: v.shape.as_list() for k, v in outputs.items()} == {
        "probabilities": [0, 2],
        "label": [0],
        "label_id": [0],
    }
    empty = tf.zeros([0, 3], tf.int32)
    outputs = signatures[source]["classify_ids"](
        input_word_ids=empty, input_mask=empty, input_type_ids=empty
    )
    assert outputs["probabilities"].shape.as_list() == [0, 2]


@pytest.mark.parametrize("source", ["module", "export"])
@pytest.mark.parametrize("word_ids, mask, type_ids, message", CLASSIFY_IDS_FAULTS)
def test_ids_the_model_cannot_read_fail_in_the_graph_saying_why(
    signatures, source, word_ids, mask, type_ids, message
):
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(message)):
        signatures[source]["classify_ids"](
            input_word_ids=tf.ragged.constant(word_ids, tf.int32).to_tensor(),
            input_mask=tf.ragged.constant(mask, tf.int32).to_tensor(),
            input_type_ids=tf.ragged.constant(type_ids, tf.int32).to_tensor(),
        )


def test_the_export_keeps_the_limits_a_server_checks(trained_run, tmp_path):
    _, result = trained_run
    classifier = load_classifier(result.run_dir)
    exported = load_classifier(export_classifier(classifier, tmp_path / "sst"))
    expected = IdLimits(vocab_size=41, type_vocab_size=2, max_length=64)
    assert IdLimits.of_module(classifier.module) == IdLimits.of_module(exported.module) == expected
    # An export written before the limits were saved has none: the graph's checks still refuse.
    assert IdLimits.of_module(tf.Module()) == IdLimits()
