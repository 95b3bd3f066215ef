"""The host's NumPy pipeline (`HostInput`, `--backend jax`) makes the batches tf.data makes
(`BucketedInput`, `WindowedInput` under the default strategy): the same keys, dtypes, shapes
and values, element by element, whatever the data: single texts and pairs, single-label,
multi-label and regression targets, class weights, grad_accum micro-batches, long documents in
windows, packed rows."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from bertfit.data.host_input import HostInput, HostWindowedInput, Prefetched
from bertfit.data.packed import PackedShape, plan_packed
from bertfit.data.pipeline import BucketedInput, encode_texts, plan_batches
from bertfit.data.windowed import WindowedInput, encode_documents, plan_documents
from bertfit.text import BertTokenizer
from bertfit.text.host import load_host_tokenizer
from bertfit.text.windows import WindowSpec
from tests.tiny import WORDS, sentiment_rows, write_vocab

ROWS = 37  # not a multiple of any batch: every bucket's last batch has padding rows


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    return write_vocab(tmp_path_factory.mktemp("vocab"))


@pytest.fixture(scope="module")
def tokenizer(vocab):
    return BertTokenizer(vocab)


def _texts(seed: int) -> list[str]:
    return [text for text, _ in sentiment_rows(ROWS, seed=seed)]


def _targets(kind: str) -> np.ndarray:
    rng = np.random.default_rng(5)
    return {
        "single-label": rng.integers(0, 3, ROWS).astype(np.int32),
        "multi-label": rng.integers(0, 2, (ROWS, 4)).astype(np.float32),
        "regression": rng.normal(size=ROWS).astype(np.float32),
    }[kind]


def assert_same_batches(host, graph):
    """Every element of both, in plan order: the same keys, dtypes, shapes and values."""
    pairs = list(zip(host, graph, strict=True))
    assert pairs
    for (host_key, host_batch), (graph_key, graph_batch) in pairs:
        assert host_key == graph_key
        assert sorted(host_batch) == sorted(graph_batch)
        for name, value in graph_batch.items():
            expected, got = value.numpy(), np.asarray(host_batch[name])
            assert got.dtype == expected.dtype, name
            np.testing.assert_array_equal(got, expected, err_msg=name)


def _both(encoded, labels, plan, tokenizer, micro_batches=1, weights=None, slots=None):
    """The plan's `HostInput` and its tf.data `BucketedInput` under the default strategy."""
    special = tokenizer.special_ids
    host = HostInput(encoded, labels, plan, special_ids=special, weights=weights, slots=slots)
    graph = BucketedInput(
        encoded,
        labels,
        plan,
        tf.distribute.get_strategy(),
        special_ids=special,
        micro_batches=micro_batches,
        weights=weights,
        slots=slots,
    )
    return host, graph


@pytest.mark.parametrize(
    ("kind", "pairs", "micro_batches", "weighted"),
    [
        ("single-label", False, 1, True),
        ("single-label", True, 2, False),
        ("multi-label", True, 1, False),
        ("regression", False, 3, False),
    ],
)
def test_host_batches_are_the_tf_data_batches(tokenizer, kind, pairs, micro_batches, weighted):
    encoded = encode_texts(tokenizer, _texts(0), _texts(1) if pairs else None)
    plan = plan_batches(
        encoded.packed_lengths, [8, 16, 32], 4 * micro_batches, shuffle=True, seed=2, epoch=1
    )
    weights = np.linspace(0.5, 2, ROWS).astype(np.float32) if weighted else None
    labels = _targets(kind)
    assert_same_batches(*_both(encoded, labels, plan, tokenizer, micro_batches, weights))


@pytest.mark.parametrize(
    ("kind", "pairs", "micro_batches"), [("single-label", False, 1), ("multi-label", True, 2)]
)
def test_host_packed_rows_are_the_tf_data_packed_rows(tokenizer, kind, pairs, micro_batches):
    """`--packing` on JAX: several examples a row, their positions, slots and starts, and the
    targets, weights and indices per slot, as tf.data packs them."""
    encoded = encode_texts(tokenizer, _texts(0), _texts(1) if pairs else None)
    shape = PackedShape.choose(encoded.packed_lengths, 32, batch_size=8)
    rows = shape.rows * micro_batches
    plan = plan_packed(encoded.packed_lengths, shape, rows, shuffle=True, seed=4, epoch=1)
    assert max(int((step.indices >= 0).sum(axis=1).max()) for step in plan) > 1
    weights = np.linspace(0.5, 2, ROWS).astype(np.float32)
    both = _both(encoded, _targets(kind), plan, tokenizer, micro_batches, weights, shape.slots)
    assert_same_batches(*both)


def test_host_windows_are_the_tf_data_windows(tokenizer):
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(0, 45))) for _ in range(ROWS)]
    documents = encode_documents(tokenizer, texts, WindowSpec(12, stride=2, max_chunks=4))
    plan = plan_documents(documents, 4, shuffle=True, seed=3)
    labels, special = _targets("single-label"), tokenizer.special_ids
    host = HostWindowedInput(documents, labels, plan, special_ids=special)
    graph = WindowedInput(
        documents, labels, plan, tf.distribute.get_strategy(), special_ids=special
    )
    assert_same_batches(host, graph)


def _shared_inputs(tokenizer) -> dict[str, HostInput]:
    """A `HostInput` of each kind: rows of 2 micro-batches, packed rows, windowed documents."""
    encoded, labels = encode_texts(tokenizer, _texts(0)), _targets("single-label")
    special = tokenizer.special_ids
    plan = plan_batches(encoded.packed_lengths, [8, 32], 4 * 2, shuffle=True, seed=2)
    shape = PackedShape.choose(encoded.packed_lengths, 32, batch_size=8, replicas=2)
    packed = plan_packed(encoded.packed_lengths, shape, shape.rows, shuffle=True, seed=4)
    documents = encode_documents(tokenizer, _texts(1), WindowSpec(6, stride=2, max_chunks=4))
    return {
        "rows": HostInput(encoded, labels, plan, special_ids=special),
        "packed": HostInput(encoded, labels, packed, special_ids=special, slots=shape.slots),
        "windowed": HostWindowedInput(
            documents, labels, plan_documents(documents, 4, shuffle=True), special_ids=special
        ),
    }


def _in_plan_order(host: HostInput, share=(0, 1)) -> list[dict]:
    iterators = host.iterators(share)
    return [next(iterators[step.seq_length]) for step in host.plan]


@pytest.mark.parametrize("kind", ["rows", "packed", "windowed"])
def test_the_processes_shares_of_a_batch_one_after_another_are_the_batch(tokenizer, kind):
    """A multi-host run's process makes only its share of each global batch's rows (its
    equal part, by process order); every share is the rows of the one-process batch."""
    host = _shared_inputs(tokenizer)[kind]
    shares = [_in_plan_order(host, (part, 2)) for part in (0, 1)]
    for whole, *parts in zip(_in_plan_order(host), *shares, strict=True):
        assert [len(p["index"]) for p in parts] == [len(whole["index"]) // 2] * 2
        for name, value in whole.items():
            if np.ndim(value) == 0:  # the step's real examples, the global batch's
                assert all(p[name] == value for p in parts), name
            else:
                np.testing.assert_array_equal(np.concatenate([p[name] for p in parts]), value)


def test_the_host_tokenizer_encodes_the_rows_as_the_in_graph_one(tokenizer, vocab):
    texts, pairs = _texts(0), _texts(1)
    graph = encode_texts(tokenizer, texts, pairs)
    host = encode_texts(load_host_tokenizer(vocab.parent), texts, pairs)
    for got, expected in ((host.ids_a, graph.ids_a), (host.ids_b, graph.ids_b)):
        np.testing.assert_array_equal(got.values, expected.values)
        np.testing.assert_array_equal(got.row_splits, expected.row_splits)
    np.testing.assert_array_equal(host.packed_lengths, graph.packed_lengths)


def test_a_plan_cut_short_before_iterating_feeds_its_prefix(tokenizer):
    encoded = encode_texts(tokenizer, _texts(0))
    plan = plan_batches(encoded.packed_lengths, [8, 32], 4, shuffle=True)
    host = HostInput(encoded, None, plan, special_ids=tokenizer.special_ids)
    host.plan = host.plan[:3]  # --max-steps
    taken = [batch["index"].tolist() for _, batch in host]
    assert taken == [step.indices.tolist() for step in plan[:3]]


def test_the_next_batches_are_made_while_the_step_computes():
    made, main = [], threading.get_ident()

    def make(item):
        made.append((item, threading.get_ident() != main))
        return item

    batches = Prefetched(make, range(5), depth=2)
    deadline = time.monotonic() + 5
    while len(made) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert made == [(0, True), (1, True)]  # before the first is asked for
    assert list(batches) == [0, 1, 2, 3, 4]


def test_an_error_making_a_batch_is_raised_where_it_is_taken():
    def make(item):
        if item == 1:
            raise ValueError("bad row")
        return item

    batches = Prefetched(make, range(3))
    assert next(batches) == 0
    with pytest.raises(ValueError, match="bad row"):
        next(batches)
