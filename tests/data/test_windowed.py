"""Windowed document batches (issue 35): static [batch, K, seq] shapes per chunk-count bucket,
every document in exactly one row of one batch, padding documents with weight 0 and no real
window, and a document's logits the same whichever batch it comes in."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bertfit.data.pipeline import PAD_INDEX
from bertfit.data.windowed import (
    WindowedInput,
    WindowProfile,
    chunk_buckets,
    encode_documents,
    plan_documents,
)
from bertfit.model.chunked import ChunkedClassifier
from bertfit.model.classifier import BertClassifier
from bertfit.text import BertTokenizer
from bertfit.text.windows import WindowSpec, tokenize_windows
from tests.tiny import WORDS, tiny_encoder, write_vocab

SPEC = WindowSpec(max_seq_length=12, stride=2, max_chunks=4)  # 10 ids a window, step 8


def _texts(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=rng.integers(0, 45))) for _ in range(n)]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return BertTokenizer(write_vocab(tmp_path_factory.mktemp("vocab")))


def _input(tokenizer, texts, batch=4, weights=None):
    documents = encode_documents(tokenizer, texts, SPEC)
    labels = np.arange(len(texts), dtype=np.int32) % 3
    plan = plan_documents(documents, batch, shuffle=True, seed=3)
    return documents, WindowedInput(
        documents,
        labels,
        plan,
        tf.distribute.get_strategy(),
        special_ids=tokenizer.special_ids,
        weights=weights,
    )


def test_chunk_buckets_are_powers_of_two_up_to_the_cap():
    assert chunk_buckets(1) == (1,)
    assert chunk_buckets(4) == (1, 2, 4)
    assert chunk_buckets(12) == (1, 2, 4, 8, 12)


def test_every_document_is_one_row_of_one_batch_in_its_chunk_bucket(tokenizer):
    texts = _texts(23)
    documents, batches = _input(tokenizer, texts)
    assert documents.windows.max() > SPEC.max_chunks  # some are cut
    seen = []
    for k, batch in batches:
        index = batch["index"].numpy()
        real = index != PAD_INDEX
        assert batch["input_word_ids"].shape == (4, k, 12)
        assert batch["window_mask"].shape == (4, k)
        assert batch["label"].shape == (4,)
        np.testing.assert_array_equal(batch["example_weight"].numpy(), real.astype("float32"))
        np.testing.assert_array_equal(batch["window_mask"].numpy()[~real], 0)
        for row in np.flatnonzero(real):
            i = index[row]
            kept = min(documents.windows[i], SPEC.max_chunks)
            assert k == chunk_buckets(4)[np.searchsorted(chunk_buckets(4), kept)]
            alone = tokenize_windows(tokenizer, [texts[i]], SPEC, max_chunks=k)
            for name in ("input_word_ids", "input_mask", "input_type_ids", "window_mask"):
                np.testing.assert_array_equal(batch[name][row].numpy(), alone[name][0].numpy())
            assert batch["label"].numpy()[row] == i % 3
        seen.extend(index[real].tolist())
        assert batch["global_examples"].numpy() == real.sum()
    assert sorted(seen) == list(range(23))  # every document once, never once per window
    assert documents.dropped_tokens.sum() > 0


def test_the_element_shapes_are_static_per_bucket(tokenizer):
    _, batches = _input(tokenizer, _texts(9))
    for k, dataset in batches.datasets.items():
        spec = dataset.element_spec
        assert spec["input_word_ids"].shape.as_list() == [4, k, 12]
        assert spec["window_mask"].shape.as_list() == [4, k]


def test_a_documents_logits_do_not_depend_on_its_batch_and_padding_has_no_weight(tokenizer):
    texts = _texts(11, seed=5)
    weights = np.linspace(0.5, 2.0, 11).astype("float32")
    _, batches = _input(tokenizer, texts, batch=4, weights=weights)
    model = ChunkedClassifier(BertClassifier(tiny_encoder(), 3, "mean", seed=0), "attention")
    model.window_pooling.score.kernel.assign(np.full((32, 1), 0.3, "float32"))
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    total, per_document = 0.0, {}
    for _, batch in batches:
        logits = model(batch)
        total += float(tf.reduce_sum(loss(batch["label"], logits) * batch["example_weight"]))
        for row, i in enumerate(batch["index"].numpy()):
            if i != PAD_INDEX:
                per_document[i] = logits[row].numpy()
    expected = 0.0
    for i, text in enumerate(texts):
        inputs = tokenize_windows(tokenizer, [text], SPEC)
        alone = model({k: v for k, v in inputs.items() if k not in ("windows", "dropped_tokens")})
        np.testing.assert_allclose(per_document[i], alone[0].numpy(), rtol=0, atol=1e-5)
        expected += weights[i] * float(loss(tf.constant([i % 3]), alone)[0])
    assert total == pytest.approx(expected, rel=1e-5)


def test_the_window_profile_counts_windows_cuts_and_dropped_ids(tokenizer):
    texts = _texts(23)
    documents = encode_documents(tokenizer, texts, SPEC)
    profile = WindowProfile.of(documents)
    lengths = [len(tokenizer.tokenize([t]).to_list()[0]) for t in texts]
    needed = [1 + max(0, -(-(n - 10) // 8)) for n in lengths]
    assert profile.documents == 23 and profile.max_tokens == max(lengths)
    assert profile.cut_documents == sum(w > 4 for w in needed) > 0
    assert sum(profile.windows.values()) == 23 and max(profile.windows) == 4
    covered = [(min(w, 4) - 1) * 8 + 10 for w in needed]
    dropped = sum(max(0, n - c) for n, c in zip(lengths, covered, strict=True))
    assert profile.dropped_share == pytest.approx(dropped / sum(lengths))
    assert f"{profile.cut_documents} cut at 4 windows" in profile.line()
