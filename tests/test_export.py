"""`bertfit export`: a TF Serving SavedModel that needs neither bertfit nor Keras to run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bertfit.cli import main
from bertfit.inference.predictor import load_classifier
from tests.export.runtimes import run_tf_client
from tests.tiny import sentiment_rows

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def exported(trained_run, tmp_path_factory):
    _, result = trained_run
    root = tmp_path_factory.mktemp("export") / "sst"
    assert main(["export", "--run", result.run_dir, str(root)]) == 0
    return result.run_dir, root


def test_export_writes_version_1_then_the_next_free_version(exported, tmp_path):
    run, root = exported
    assert (root / "1" / "saved_model.pb").is_file()
    assert main(["export", "--run", run, str(root)]) == 0
    assert sorted(p.name for p in root.iterdir()) == ["1", "2"]  # no temporary folder left
    assert main(["export", "--run", run, str(root), "--version", "2"]) == 2


def test_a_process_with_only_tensorflow_gets_what_bertfit_predicts(exported, tmp_path):
    run, root = exported
    texts = [t for t, _ in sentiment_rows(40, seed=9)] + ["", "a " * 500]
    probabilities, labels = run_tf_client(root / "1", texts, tmp_path)
    expected = load_classifier(run).predict(texts)
    np.testing.assert_allclose(
        probabilities,
        [[row["probabilities"][n] for n in ("neg", "pos")] for row in expected],
        atol=1e-5,
    )
    assert labels == [row["label"] for row in expected]


def test_signatures_label_names_and_batches_of_1_and_1000(exported):
    import tensorflow as tf

    _, root = exported
    loaded = tf.saved_model.load(str(root / "1"))
    assert set(loaded.signatures) == {"serving_default", "classify_ids", "classify"}
    serve = loaded.signatures["serving_default"]
    assert set(serve.structured_input_signature[1]) == {"text"}
    assert set(serve.structured_outputs) == {"probabilities", "label", "label_id"}
    assert loaded.label_names.numpy().tolist() == [b"neg", b"pos"]
    for batch in (1, 1000):
        out = serve(text=tf.constant(["a fine film"] * batch))
        assert out["probabilities"].shape == (batch, 2)
    ids = loaded.signatures["classify_ids"]
    by_ids = ids(
        input_word_ids=tf.constant([[2, 5, 3]]),
        input_mask=tf.constant([[1, 1, 1]]),
        input_type_ids=tf.constant([[0, 0, 0]]),
    )
    np.testing.assert_allclose(tf.reduce_sum(by_ids["probabilities"], -1), [1.0], atol=1e-6)


def test_the_export_loads_back_as_a_classifier(exported):
    run, root = exported
    texts = [t for t, _ in sentiment_rows(10, seed=4)]
    np.testing.assert_allclose(
        load_classifier(root).predict_proba(texts),
        load_classifier(run).predict_proba(texts),
        atol=1e-6,
    )


class _Recording:
    """A classifier module that remembers the batches of texts it classified."""

    def __init__(self, module):
        self.module, self.batches = module, []

    def classify_text(self, text):
        self.batches.append([t.decode() for t in text.numpy()])
        return self.module.classify_text(text)

    def __getattr__(self, name):
        return getattr(self.module, name)


def test_texts_are_batched_by_their_number_of_tokens_and_come_back_in_order(exported):
    run, root = exported
    # Characters mislead: an unknown word is one token, "a b c d e" five.
    texts = ["a b c d e", "zqzqzqzqzqzqzqzqzq", "a b", "zqzqzqzqzqzq zqzqzqzqzqzqzq", "a b c"]
    for source in (run, root):
        classifier = load_classifier(source, batch_size=2)
        expected = [classifier.predict_proba([t])[0] for t in texts]
        classifier.module = _Recording(classifier.module)
        np.testing.assert_allclose(classifier.predict_proba(texts), expected, atol=1e-6)
        assert classifier.module.batches == [
            ["zqzqzqzqzqzqzqzqzq", "a b"],
            ["zqzqzqzqzqzq zqzqzqzqzqzqzq", "a b c"],
            ["a b c d e"],
        ]


class _WithoutTokenLengths:
    """An export written before the module had `token_lengths`."""

    def __init__(self, module):
        self.classify_text, self.signatures = module.classify_text, module.signatures


def test_an_export_without_token_lengths_still_predicts_in_order(exported):
    _, root = exported
    texts = [t for t, _ in sentiment_rows(10, seed=4)]
    classifier = load_classifier(root, batch_size=3)
    expected = classifier.predict_proba(texts)
    classifier.module = _WithoutTokenLengths(classifier.module)
    np.testing.assert_allclose(classifier.predict_proba(texts), expected, atol=1e-6)
