"""`load_classifier(...).predict`: every input it cannot classify is an `InputFormatError` or a
`ConfigError` that says what to pass instead, never a raw TensorFlow error or nothing."""

from __future__ import annotations

import numpy as np
import pytest

from bertfit.errors import ConfigError, InputFormatError
from bertfit.inference.predictor import load_classifier


@pytest.fixture(scope="module")
def run_dir(trained_run):
    _, result = trained_run
    return result.run_dir


@pytest.fixture(scope="module")
def classifier(run_dir):
    return load_classifier(run_dir)


@pytest.mark.parametrize("batch_size", [-1, 0, 2.5, True, "8"])
def test_a_batch_size_below_one_or_not_whole_is_refused(run_dir, batch_size):
    with pytest.raises(ConfigError, match="batch_size must be"):
        load_classifier(run_dir, batch_size=batch_size)


def test_batch_size_one_predicts_every_text(run_dir):
    texts = ["a good film", "bad", "fun plot"]
    assert len(load_classifier(run_dir, batch_size=1).predict(texts)) == 3


@pytest.mark.parametrize(
    "texts, message",
    [
        (None, "texts must be a list of strings, got NoneType None"),
        (5, "texts must be a list of strings, got int 5"),
        (2.5, "texts must be a list of strings, got float"),
        ({"text": "good"}, "texts must be a list of strings, got dict"),
        (np.array([["a", "b"], ["c", "d"]]), "texts is a 2-D array of shape (2, 2)"),
        (np.array("a film"), "texts is a 0-D array"),
        (["good", 5], "texts[1] is int 5, not a string"),
        (["good", None], "texts[1] is NoneType None, not a string"),
        (["good", ["nested"]], "texts[1] is list ['nested'], not a string"),
        (["ok", "bad \ud800 text"], "texts[1] has a lone surrogate '\\ud800' at character 4"),
        ([b"\xff\xfe"], "texts[0] is not valid UTF-8 (byte 0xff at offset 0)"),
        ("a film", "wrap a single text in a list"),
    ],
)
def test_inputs_that_are_not_a_list_of_texts_say_what_is_wrong(classifier, texts, message):
    with pytest.raises(InputFormatError) as error:
        classifier.predict(texts)
    assert message in str(error.value)


def test_texts_as_a_1d_array_bytes_or_a_generator_are_fine(classifier):
    expected = classifier.predict_proba(["a good film", "caf\u00e9"])
    for texts in [
        np.array(["a good film", "caf\u00e9"]),
        [b"a good film", "caf\u00e9".encode()],
        (t for t in ["a good film", "caf\u00e9"]),
    ]:
        np.testing.assert_allclose(classifier.predict_proba(texts), expected, atol=1e-6)
    assert classifier.predict([]) == []
