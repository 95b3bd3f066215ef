"""The Trainer on windowed documents (issue 35): one row per document in the step, the loss and
the predictions; gradient accumulation equals the big batch; one trace per chunk-count bucket."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bertfit.config import TrainConfig
from bertfit.data.tasks import MULTI_LABEL, REGRESSION
from bertfit.data.windowed import WindowedInput, encode_documents, plan_documents
from bertfit.model.chunked import ChunkedClassifier
from bertfit.model.classifier import BertClassifier
from bertfit.text import BertTokenizer
from bertfit.text.windows import WindowSpec, tokenize_windows
from bertfit.training.loop import Trainer
from tests.tiny import WORDS, tiny_encoder, write_vocab

SPEC = WindowSpec(max_seq_length=12, stride=2, max_chunks=4)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    tokenizer = BertTokenizer(write_vocab(tmp_path_factory.mktemp("vocab")))
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(1, 40))) for _ in range(14)]
    labels = np.asarray([("good" in t.split()) for t in texts], np.int32)
    return tokenizer, texts, labels, encode_documents(tokenizer, texts, SPEC)


def _trainer(batch_size: int, grad_accum: int, total_steps: int = 10) -> Trainer:
    config = TrainConfig(
        batch_size=batch_size, grad_accum=grad_accum, learning_rate=1e-3, jit_compile=False
    )

    def build():
        classifier = BertClassifier(tiny_encoder(), 2, "mean", dropout=0.0, seed=0)
        return ChunkedClassifier(classifier, "attention")

    return Trainer(build, tf.distribute.get_strategy(), config, total_steps, frozen=("pooler",))


def _input(data, trainer: Trainer, global_batch: int, epoch: int = 0, micro: int = 1):
    tokenizer, _, labels, documents = data
    plan = plan_documents(documents, global_batch, shuffle=True, seed=1, epoch=epoch)
    return WindowedInput(
        documents,
        labels,
        plan,
        trainer.strategy,
        special_ids=tokenizer.special_ids,
        micro_batches=micro,
    )


def test_training_and_prediction_see_one_row_per_document_and_trace_once_per_bucket(data):
    tokenizer, texts, _, documents = data
    trainer = _trainer(batch_size=4, grad_accum=1)
    losses = []
    for epoch in range(2):
        for results in trainer.run_plan(_input(data, trainer, 4, epoch)):
            losses += [loss for loss, _ in results]
    assert np.isfinite(losses).all()
    predictions = _input(data, trainer, 4)
    probabilities = trainer.predict(predictions, len(texts))
    assert probabilities.shape == (14, 2)
    for i, text in enumerate(texts):
        inputs = tokenize_windows(tokenizer, [text], SPEC)
        inputs = {k: v for k, v in inputs.items() if k not in ("windows", "dropped_tokens")}
        alone = tf.nn.softmax(trainer.model(inputs))[0].numpy()
        np.testing.assert_allclose(probabilities[i], alone, rtol=0, atol=1e-5)
    buckets = {batch.seq_length for batch in predictions.plan}
    assert len(buckets) > 1
    assert trainer.trace_counts() == {"train_step": len(buckets), "predict_step": len(buckets)}


def test_gradient_accumulation_over_windowed_documents_equals_the_big_batch(data):
    big = _trainer(batch_size=8, grad_accum=1)
    accumulated = _trainer(batch_size=4, grad_accum=2)
    for trainer, micro in ((big, 1), (accumulated, 2)):
        data_input = _input(data, trainer, 8, micro=micro)
        data_input.plan = data_input.plan[:1]  # one optimizer step on the same 8 documents
        next(iter(trainer.run_plan(data_input)))
    for a, b in zip(big.model.trainable_variables, accumulated.model.trainable_variables,
                    strict=True):  # fmt: skip
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kind", [MULTI_LABEL, REGRESSION])
def test_multi_label_and_regression_train_and_predict_one_row_per_document(data, kind):
    tokenizer, texts, labels, documents = data
    if kind == MULTI_LABEL:  # "good" and "bad" tags, 2 outputs
        targets = np.asarray([[w in t.split() for w in ("good", "bad")] for t in texts], "float32")
    else:  # the document's length in words, 1 output
        targets = np.asarray([len(t.split()) / 40 for t in texts], "float32")
    outputs = 2 if kind == MULTI_LABEL else 1
    config = TrainConfig(batch_size=4, learning_rate=1e-3, jit_compile=False)

    def build():
        classifier = BertClassifier(tiny_encoder(), outputs, "mean", dropout=0.0, seed=0)
        return ChunkedClassifier(classifier, "max")

    trainer = Trainer(build, tf.distribute.get_strategy(), config, 4, ("pooler",), task_kind=kind)
    plan = plan_documents(documents, 4, shuffle=True, seed=0)
    strategy, ids = trainer.strategy, tokenizer.special_ids
    training = WindowedInput(documents, targets, plan, strategy, special_ids=ids)
    losses = [loss for results in trainer.run_plan(training) for loss, _ in results]
    assert len(losses) == len(plan) and np.isfinite(losses).all()
    predicting = WindowedInput(documents, None, plan, strategy, special_ids=ids)
    predictions = trainer.predict(predicting, len(texts))
    assert predictions.shape == ((14, 2) if kind == MULTI_LABEL else (14, 1))
    assert np.isfinite(predictions).all()


@pytest.mark.slow
def test_the_xla_compiled_step_is_traced_once_per_chunk_count_bucket(data):
    tokenizer, _, labels, documents = data
    config = TrainConfig(batch_size=4, learning_rate=1e-3, jit_compile=True)

    def build():
        classifier = BertClassifier(tiny_encoder(), 2, "cls", dropout=0.0, seed=0)
        return ChunkedClassifier(classifier, "attention")

    trainer = Trainer(build, tf.distribute.get_strategy(), config, 20)
    assert trainer.xla.replica_step
    losses = []
    for epoch in range(2):
        plan = plan_documents(documents, 4, shuffle=True, seed=1, epoch=epoch)
        batches = WindowedInput(
            documents, labels, plan, trainer.strategy, special_ids=tokenizer.special_ids
        )
        losses += [loss for step in trainer.run_plan(batches) for loss, _ in step]
    buckets = {batch.seq_length for batch in plan}
    assert len(buckets) == 3 and np.isfinite(losses).all()
    assert trainer.train_steps.experimental_get_tracing_count() == len(buckets)
    assert trainer._replica_gradients.experimental_get_tracing_count() == len(buckets)
