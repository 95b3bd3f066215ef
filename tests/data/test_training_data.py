"""The `TrainingData` contract (bertfit/data/training_data.py): texts in memory, documents in
windows and a prepared set streamed each answer the run's questions (buckets, plan, input,
profile, fingerprint, size) as the code they replaced did, and the same rows give the same
steps whether they are streamed or held in memory."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import tensorflow as tf

from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from bertfit.data.buckets import TRACE_TOKENS
from bertfit.data.labelled import encode_labelled, infer_run_task
from bertfit.data.pipeline import plan_batches
from bertfit.data.run_files import read_training_examples
from bertfit.data.shard_writer import ShardSource, write_prepared
from bertfit.data.stream_source import shard_source
from bertfit.data.streaming import StreamLayout, TrainStream
from bertfit.data.tfrecord import Manifest, read_manifest
from bertfit.data.training_data import Batching, LabelledData, LabelledDocuments
from bertfit.data.windowed import chunk_buckets, plan_documents
from bertfit.text import BertTokenizer
from tests.tiny import WORDS, sentiment_rows, write_csv, write_vocab

BUCKETS = (8, 16)
# steps of 4 rows × 2 micro-batches, in runs of 2: what `Batching.of` gives a run of
# --batch-size 4 --epochs 3 --grad-accum 2 --steps-per-execution 2 --seed 5
TRAINING = Batching(BUCKETS, batch_size=4, micro_batches=2, run_length=2, seed=5, weighted=True)
# data_fingerprint of sentiment_rows(37, seed=3) as the code before TrainingData computed it:
# runs saved then resume on the same rows
TEXTS_FINGERPRINT = "56d3b4c77dbd5d59b18981ea0813057822c8cd8f9052063aa6c361e22d50ec9e"


def _config(train, **model) -> RunConfig:
    return RunConfig(
        model=ModelConfig(name="tiny", max_seq_length=16, **model),
        data=DataConfig(train=str(train)),
        train=TrainConfig(batch_size=4, epochs=3, grad_accum=2, steps_per_execution=2, seed=5),
    )


@pytest.fixture(scope="module")
def kinds(tmp_path_factory):
    """37 rows in memory, the same rows prepared in 3 shards, and 13 long documents in
    windows of 16 (at most 4 each)."""
    folder = tmp_path_factory.mktemp("kinds")
    tokenizer = BertTokenizer(write_vocab(folder))
    csv = write_csv(folder / "train.csv", sentiment_rows(37, seed=3))
    config = _config(csv)
    examples = read_training_examples(str(csv), config)
    task, _ = infer_run_task(examples, config)
    texts = encode_labelled(str(csv), examples, config, tokenizer, task)
    source: ShardSource = shard_source(config)
    write_prepared(source, folder / "prepared", tokenizer, shards=3, chunk_rows=10)
    stream = TrainStream(folder / "prepared", Manifest.load(folder / "prepared"))
    rng = np.random.default_rng(0)
    long_rows = [(" ".join(rng.choice(WORDS, size=rng.integers(1, 60))), "pos") for _ in range(13)]
    documents_csv = write_csv(folder / "documents.csv", long_rows)
    chunked = _config(documents_csv, long_documents="chunk", max_chunks=4)
    rows = read_training_examples(str(documents_csv), chunked)
    documents = encode_labelled(str(documents_csv), rows, chunked, tokenizer, task)
    return {"texts": texts, "stream": stream, "documents": documents}, tokenizer, config


def _steps(plan) -> list[tuple[int, int]]:
    return [(step.seq_length, step.num_examples) for step in plan]


def test_each_kind_plans_as_the_function_it_calls_through(kinds):
    data, _, _ = kinds
    texts, stream, documents = data["texts"], data["stream"], data["documents"]
    assert isinstance(documents, LabelledDocuments) and type(texts) is LabelledData

    want = plan_batches(texts.encoded.packed_lengths, BUCKETS, 8, shuffle=True, seed=5, epoch=1,
                        run_length=2)  # fmt: skip
    got = texts.plan(TRAINING, shuffle=True, epoch=1)
    assert [(b.seq_length, b.indices.tolist()) for b in got] == [
        (b.seq_length, b.indices.tolist()) for b in want
    ]

    want = plan_documents(documents.documents, 8, shuffle=True, seed=5, epoch=1,
                          buckets=chunk_buckets(4), run_length=2)  # fmt: skip
    got = documents.plan(TRAINING, shuffle=True, epoch=1)
    assert [(b.seq_length, b.indices.tolist()) for b in got] == [
        (b.seq_length, b.indices.tolist()) for b in want
    ]

    layout = StreamLayout.of(stream.manifest, BUCKETS, pipelines=1, rows_per_step=8)
    want = layout.plan(shuffle=True, seed=5, epoch=1, run_length=2)
    assert stream.plan(TRAINING, shuffle=True, epoch=1) == want


def test_the_same_rows_streamed_or_in_memory_give_the_same_buckets_steps_and_profile(kinds):
    data, _, config = kinds
    texts, stream = data["texts"], data["stream"]
    assert len(texts) == len(stream) == 37
    np.testing.assert_array_equal(np.sort(texts.lengths()), np.sort(stream.lengths()))
    chosen = [
        d.resolve_buckets(config, rows_read=37, trace_tokens=TRACE_TOKENS) for d in (texts, stream)
    ]
    assert chosen[0] == chosen[1]
    batching = Batching(chosen[0].lengths, batch_size=4, micro_batches=2, run_length=2, seed=5)
    assert _steps(texts.plan(batching, shuffle=False)) == _steps(
        stream.plan(batching, shuffle=False)
    )
    assert texts.profile(batching).to_dict() == stream.profile(batching).to_dict()
    assert (texts.labels is not None, stream.labels) == (True, None)  # a stream's stay on disk


def test_documents_are_cut_to_one_length_and_batched_by_chunk_count(kinds):
    data, _, config = kinds
    documents, texts = data["documents"], data["texts"]
    chunked = _config("documents.csv", long_documents="chunk", max_chunks=4)
    resolved = documents.resolve_buckets(chunked, rows_read=13, trace_tokens=TRACE_TOKENS)
    assert resolved.lengths == (16,) and resolved.note is None
    batching = Batching(resolved.lengths, batch_size=4)
    assert documents.profile(batching).buckets == [1, 2, 4]  # windows against chunk counts
    assert documents.row_shape(4) == (4, 16) and texts.row_shape(8) == (8,)
    assert documents.notes(chunked, batching)[0].startswith("long documents in windows: 13 ")
    assert documents.window_profile().documents == 13
    assert texts.window_profile() is None and data["stream"].window_profile() is None


def test_fingerprints_are_what_a_resumed_run_compares(kinds):
    data, _, _ = kinds
    assert data["texts"].fingerprint() == TEXTS_FINGERPRINT
    stream = data["stream"]
    assert stream.fingerprint() == hashlib.sha256(read_manifest(stream.directory)).hexdigest()
    error = stream.read_error(tf.errors.DataLossError(None, None, "bad"))
    assert error.code == "data-shard-damaged"  # the shards named, not TensorFlow's message
    assert data["texts"].read_error(ValueError("x")) is None  # raised as it is


def test_each_input_feeds_the_plan_from_its_start_with_weights_only_in_training(kinds):
    data, tokenizer, config = kinds
    strategy = tf.distribute.get_strategy()
    texts = data["texts"]
    texts.weights = np.full(len(texts), 2.0, np.float32)
    try:
        for name, kind in data.items():
            plan = kind.plan(TRAINING, shuffle=True, epoch=1)
            fed = kind.input(TRAINING, strategy, special_ids=tokenizer.special_ids,
                             shuffle=True, epoch=1, start=1)  # fmt: skip
            assert len(fed) == len(plan) - 1, name
            assert _steps(fed.plan) == _steps(plan[1:]), name
        evaluation = Batching.of(config, BUCKETS, training=False)
        fed = texts.input(evaluation, strategy, special_ids=tokenizer.special_ids, shuffle=False)
        assert (fed.weights == 1).all() and fed.micro_batches == 1
    finally:
        texts.weights = None


def test_batching_of_a_run_trains_in_micro_batches_and_evaluates_in_single_steps(kinds):
    _, _, config = kinds
    training = Batching.of(config, BUCKETS, training=True, pipelines=2)
    assert training == Batching(BUCKETS, 4, 2, 2, seed=5, pipelines=2, weighted=True)
    assert training.rows_per_step == 8
    evaluation = Batching.of(config, BUCKETS, training=False, pipelines=2)
    assert (evaluation.micro_batches, evaluation.run_length, evaluation.weighted) == (1, 1, False)
    one_replica = Batching.of(config, BUCKETS, training=True, pipelines=2, batch_size=1)
    assert (one_replica.batch_size, one_replica.pipelines) == (1, 1)  # `check`: one pipeline
