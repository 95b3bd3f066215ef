"""A corpus of deliberately broken setups: each yields its finding code; clean setups yield none.

Config setups go through bertfit's own reader, tokenizer and bucketed pipeline (a tiny BERT);
dataset setups are the user's own `tf.data` pipelines given to `bertfit.check(dataset=...)`.
"""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

import bertfit
from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from bertfit.text.tokenizer import BertTokenizer
from tests.tiny import TINY_CONFIG, TINY_VOCAB, sentiment_rows, tiny_encoder, write_csv

CLS = 2


# ---- config setups (bertfit's pipeline) ----


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tmp_path_factory.mktemp("check_data")


def config_for(model_dir, train, eval_=None, **overrides) -> RunConfig:
    model = ModelConfig(
        name=str(model_dir),
        max_seq_length=overrides.pop("max_seq_length", 32),
        precision=overrides.pop("precision", "fp32"),
    )
    data = DataConfig(
        train=str(train),
        eval=None if eval_ is None else str(eval_),
        buckets=overrides.pop("buckets", [16, 32]),
    )
    return RunConfig(model=model, data=data, train=TrainConfig(**overrides))


def run_codes(config, **kwargs) -> list[str]:
    kwargs.setdefault("compile", False)
    return bertfit.check(config, **kwargs).codes


def good_csv(path, n=64, seed=0):
    return write_csv(path, sentiment_rows(n, seed=seed))


@pytest.mark.host_xla
def test_clean_config_yields_no_findings(files, trainable_hf_dir):
    config = config_for(
        trainable_hf_dir,
        good_csv(files / "clean.csv"),
        good_csv(files / "clean_eval.csv", 24, seed=5),
        batch_size=8,
    )
    report = bertfit.check(config, compile=True)
    assert report.codes == [], report.render(color=False)
    assert [c["shape"] for c in report.compiled] == ["[8, 16]"] and report.compiled[0]["ok"]
    assert report.memory["parameters"] > 0 and report.memory["activations_bytes"]


def test_check_compiles_the_step_the_run_compiles_at_its_precision(
    files, trainable_hf_dir, monkeypatch
):
    """--grad-accum 2: the accumulated step, fed both micro-batches of a replica; bf16 comes
    from the encoder's dtype policy, as in the run, never from a global Keras policy."""
    import bertfit.checks.api
    from bertfit.training.loop import Trainer

    compile_shapes, seen = bertfit.checks.api.compile_shapes, []

    def spy(report, step, *args, **kwargs):
        model = step.__self__.model
        policies = (model.encoder.dtype_policy.name, keras.mixed_precision.dtype_policy().name)
        seen.append((step.__func__, step == step.__self__.replica_step, policies))
        compile_shapes(report, step, *args, **kwargs)

    monkeypatch.setattr(bertfit.checks.api, "compile_shapes", spy)
    before = keras.mixed_precision.dtype_policy().name
    config = config_for(
        trainable_hf_dir,
        good_csv(files / "accum.csv"),
        batch_size=8,
        grad_accum=2,
        precision="mixed_bf16",
    )
    report = bertfit.check(config, compile=True)  # a CPU run does not use XLA: asked for
    assert seen == [(Trainer._accumulated_gradients, True, ("mixed_bfloat16", before))]
    assert keras.mixed_precision.dtype_policy().name == before == "float32"
    assert [(c["shape"], c["ok"]) for c in report.compiled] == [("[16, 16]", True)]


DATA_CASES = {
    "data-empty-file": lambda p: p.write_text("text,label\n"),
    "data-missing-column": lambda p: p.write_text("sentence,label\na good film,pos\n"),
    "data-empty-text": lambda p: p.write_text("text,label\na good film,pos\n,neg\n"),
    "data-undecodable": lambda p: p.write_bytes(b"text,label\ncaf\xe9 film,pos\nbad,neg\n"),
    "data-mixed-types": lambda p: write_csv(
        p, [(t, str(i % 2)) for i, (t, _) in enumerate(sentiment_rows(40))] + [("fun", "x")]
    ),
    "data-label-spellings": lambda p: write_csv(
        p, [(t, ("1", "01", "0")[i % 3]) for i, (t, _) in enumerate(sentiment_rows(30))]
    ),
    "data-label-looks-multi": lambda p: write_csv(
        p, [(t, ("pos|fun", "neg")[i % 2]) for i, (t, _) in enumerate(sentiment_rows(30))]
    ),
    "data-label-out-of-range": lambda p: write_csv(
        p, [(t, "07"[i % 2] if i % 3 else "1") for i, (t, _) in enumerate(sentiment_rows(30))]
    ),
    "data-single-class": lambda p: write_csv(p, [(t, "pos") for t, _ in sentiment_rows(10)]),
    "data-imbalance": lambda p: write_csv(
        p, [(t, "pos") for t, _ in sentiment_rows(100)] + [("awful film", "neg")]
    ),
}


@pytest.mark.parametrize("code", sorted(DATA_CASES))
def test_broken_training_file(code, files, trainable_hf_dir):
    path = files / f"{code}.csv"
    DATA_CASES[code](path)
    assert code in run_codes(config_for(trainable_hf_dir, path, batch_size=8))


def test_eval_labels_unseen_and_leakage(files, trainable_hf_dir):
    train = good_csv(files / "leak_train.csv")
    rows = sentiment_rows(64)[:10] + [("the plot", "meh")]
    codes = run_codes(
        config_for(trainable_hf_dir, train, write_csv(files / "leak.csv", rows), batch_size=8)
    )
    assert "data-label-unseen" in codes and "data-leakage" in codes


def test_texts_longer_than_max_seq_length(files, trainable_hf_dir):
    rows = [(" ".join(["good film"] * 20), "pos"), ("bad", "neg")] * 4
    config = config_for(
        trainable_hf_dir,
        write_csv(files / "long.csv", rows),
        batch_size=8,
        max_seq_length=16,
        buckets=[16],
    )
    report = bertfit.check(config, compile=False)
    (finding,) = [f for f in report.findings if f.code == "data-truncated"]
    assert "4 of 8 row(s)" in finding.message and finding.severity == "warning"
    chunk = "or --long-documents chunk: whole texts classified from windows of max_seq_length"
    assert finding.fix.endswith(chunk)


def test_jsonl_mixed_types_and_float_labels(files, trainable_hf_dir):
    mixed = files / "mixed.jsonl"
    mixed.write_text(
        "".join(
            json.dumps({"text": t, "label": 1 if i % 2 else "neg"}) + "\n"
            for i, (t, _) in enumerate(sentiment_rows(20))
        )
    )
    assert "data-mixed-types" in run_codes(config_for(trainable_hf_dir, mixed, batch_size=8))
    floats = files / "floats.jsonl"
    floats.write_text('{"text": "good", "label": 0.5}\n{"text": "bad", "label": 1}\n')
    assert "data-task-inferred" in run_codes(config_for(trainable_hf_dir, floats, batch_size=8))


def test_batch_and_precision_for_the_target(files, trainable_hf_dir):
    train = good_csv(files / "hw.csv")
    assert "shape-batch-not-divisible" in run_codes(
        config_for(trainable_hf_dir, train, batch_size=10), replicas=4
    )
    codes = run_codes(
        config_for(trainable_hf_dir, train, batch_size=8, precision="mixed_fp16"), target="tpu"
    )
    assert "shape-tpu-batch-multiple" in codes  # 8 over 8 TPU cores: 1 per replica
    assert "dtype-precision-unsupported" in codes


def test_signature_only_savedmodel(files, tmp_path):
    from tests.tiny import write_tiny_savedmodel

    write_tiny_savedmodel(tmp_path / "sig", signature_only=True)
    codes = run_codes(config_for(tmp_path / "sig", good_csv(files / "sig.csv"), batch_size=8))
    assert "grad-signature-only" in codes


# ---- a user's own tf.data pipelines ----


@pytest.fixture(scope="module")
def encoder():
    keras.utils.set_random_seed(0)
    return tiny_encoder()


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer(TINY_VOCAB)


def arrays(n=16, seq=12, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, seq + 1, n)
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(5, len(TINY_VOCAB), (n, seq)).astype(np.int32) * mask
    ids[:, 0] = CLS
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": np.zeros_like(ids)}, (
        np.arange(n) % 2
    ).astype(np.int32)


def dataset(features=None, labels=None, batch=8, drop=True, weights=None):
    if features is None:
        features, labels = arrays()
    parts = (features, labels) if weights is None else (features, labels, weights)
    return tf.data.Dataset.from_tensor_slices(parts).batch(batch, drop_remainder=drop)


def codes_of(ds, encoder, **kwargs):
    kwargs.setdefault("compile", False)
    return bertfit.check(dataset=ds, encoder=encoder, **kwargs).codes


def test_clean_dataset_yields_no_findings(encoder, tokenizer):
    texts = [t for t, _ in sentiment_rows(16)]
    packed = tokenizer(texts, max_seq_length=16)
    ds = dataset({k: v.numpy() for k, v in packed.items()}, np.arange(16) % 2)
    report = bertfit.check(
        dataset=ds, encoder=encoder, tokenizer=tokenizer, target="tpu", replicas=1
    )
    assert report.codes == [], report.render(color=False)
    assert [c["ok"] for c in report.compiled] == [True]


def test_tpu_rehearsal_fails_on_per_batch_padding(encoder):
    features, labels = arrays(24)
    rows = tf.data.Dataset.from_tensor_slices((features, labels)).map(
        lambda f, y: ({k: v[: tf.reduce_sum(f["input_mask"])] for k, v in f.items()}, y)
    )
    ds = rows.padded_batch(8, drop_remainder=True)  # pad to the longest row of each batch
    report = bertfit.check(dataset=ds, encoder=encoder, target="tpu")
    dynamic = [f for f in report.findings if f.code == "shape-dynamic-seq"]
    assert dynamic and dynamic[0].severity == "error" and "per-batch padding" in dynamic[0].message
    assert "shape-recompiles" in report.codes and report.exit_code() == 2
    assert len(report.compiled) >= 2  # one compilation per distinct padded length


def _mapped(fn, **kwargs):
    features, labels = arrays()
    features, labels = fn(dict(features), labels)
    return dataset(features, labels, **kwargs)


def _left_pad(f, y):
    f = {k: v[:, ::-1].copy() for k, v in f.items()}
    return f, y


DATASET_CASES = {
    "shape-dynamic-batch": lambda: dataset(*arrays(20), drop=False),
    "shape-left-padding": lambda: _mapped(_left_pad),
    "shape-batch-mismatch": lambda: dataset().map(lambda f, y: (f, y[:4])),
    "dtype-int64-on-tpu": lambda: _mapped(
        lambda f, y: ({k: v.astype(np.int64) for k, v in f.items()}, y)
    ),
    "dtype-float-labels": lambda: _mapped(lambda f, y: (f, y.astype(np.float32))),
    "input-raw-strings": lambda: tf.data.Dataset.from_tensor_slices(
        ({"input_word_ids": ["a good film"] * 8}, np.zeros(8, np.int32))
    ).batch(8),
    "input-key-names": lambda: _mapped(
        lambda f, y: ({"ids": f["input_word_ids"], "input_mask": f["input_mask"]}, y)
    ),
    "input-missing": lambda: _mapped(lambda f, y: ({"input_word_ids": f["input_word_ids"]}, y)),
    "input-no-cls": lambda: _mapped(
        lambda f, y: (
            {**f, "input_word_ids": np.where(f["input_mask"] > 0, f["input_word_ids"][:, ::-1], 0)},
            y,
        )
    ),
    "input-id-out-of-vocab": lambda: _mapped(
        lambda f, y: ({**f, "input_word_ids": f["input_word_ids"] + 1000 * f["input_mask"]}, y)
    ),
    "input-type-id-range": lambda: _mapped(
        lambda f, y: ({**f, "input_type_ids": 2 * f["input_mask"]}, y)
    ),
    "input-mask-values": lambda: _mapped(
        lambda f, y: ({**f, "input_mask": 3 * f["input_mask"]}, y)
    ),
    "grad-zero": lambda: dataset(*arrays(), weights=np.zeros(16, np.float32)),
}


@pytest.mark.parametrize("code", sorted(DATASET_CASES))
def test_broken_dataset(code, encoder, tokenizer):
    target = "tpu" if code == "dtype-int64-on-tpu" else "cpu"
    codes = codes_of(DATASET_CASES[code](), encoder, tokenizer=tokenizer, target=target)
    assert code in codes


def test_shape_dynamic_seq_on_gpu_is_a_warning(encoder):
    features, labels = arrays()
    ds = tf.data.Dataset.from_tensor_slices((features, labels)).padded_batch(
        8, padded_shapes=({k: [None] for k in features}, []), drop_remainder=True
    )
    report = bertfit.check(dataset=ds, encoder=encoder, target="gpu", compile=False)
    assert [f.severity for f in report.findings if f.code == "shape-dynamic-seq"][0] == "warning"


def test_ids_given_to_a_text_model(encoder):
    text = keras.Input(shape=(), dtype="string", name="text")
    model = keras.Model(
        text, keras.layers.Lambda(lambda t: tf.zeros([tf.shape(t)[0], 2]), output_shape=(2,))(text)
    )
    assert (
        "input-ids-to-text-encoder"
        in bertfit.check(dataset=dataset(), model=model, compile=False).codes
    )


def test_frozen_encoder_and_unused_pooler(tokenizer):
    frozen = tiny_encoder()
    frozen.trainable = False
    assert "grad-frozen-encoder" in codes_of(dataset(), frozen)
    report = bertfit.check(dataset=dataset(), encoder=tiny_encoder(), pooling="mean", compile=False)
    assert [f.severity for f in report.findings if f.code == "grad-pooler-unused"] == ["warning"]


class DisconnectedHead(keras.Model):
    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder
        self.head = keras.layers.Dense(2)
        self.head.build((None, TINY_CONFIG.hidden_size))
        self.project = keras.layers.Dense(2)

    def call(self, inputs, training=False):
        pooled = self.encoder(inputs, training=training)["pooled_output"]
        self.head(pooled)  # computed, then never used
        return self.project(pooled)


class BatchReshape(keras.Model):
    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder
        self.head = keras.layers.Dense(2)

    def call(self, inputs, training=False):
        logits = self.head(self.encoder(inputs, training=training)["pooled_output"])
        return tf.reshape(logits, [-1, 1])  # moves the class axis into the batch


class PyFunctionModel(BatchReshape):
    def call(self, inputs, training=False):
        logits = self.head(self.encoder(inputs, training=training)["pooled_output"])
        return tf.ensure_shape(tf.py_function(lambda x: x, [logits], tf.float32), logits.shape)


def test_model_level_breakage(encoder):
    assert (
        "grad-head-disconnected"
        in bertfit.check(dataset=dataset(), model=DisconnectedHead(encoder), compile=False).codes
    )
    assert (
        "shape-batch-changed"
        in bertfit.check(dataset=dataset(), model=BatchReshape(encoder), compile=False).codes
    )
    report = bertfit.check(dataset=dataset(), model=PyFunctionModel(encoder))
    (failed,) = [f for f in report.findings if f.code == "compile-failed"]
    assert "EagerPyFunc" in failed.message and "tf.py_function" in failed.message


def test_a_failed_step_says_what_failed_once_not_keras_arguments(encoder):
    # 80 ids for a 64-position encoder: bertfit's InputFormatError, raised inside a Keras layer,
    # which wraps it in its own note ending with "• training=False"
    report = bertfit.check(dataset=dataset(*arrays(seq=80)), encoder=encoder)
    (failed,) = [f for f in report.findings if f.severity == "error"]
    assert failed.code == "grad-step-failed"
    assert failed.message == (
        "the model's forward pass failed: InputFormatError: The inputs are 80 tokens long but "
        "this encoder has 64 positions (its position table, or the longest input it was "
        "trained for); pack them to at most 64 tokens (max_seq_length)."
    )
    assert report.compiled == []  # the same failure is not compiled and said again


def test_signature_only_encoder_given_to_check(tmp_path):
    from tests.tiny import write_tiny_savedmodel

    write_tiny_savedmodel(tmp_path / "sig", signature_only=True)
    encoder, _ = bertfit.load_encoder(str(tmp_path / "sig"), trainable=False)
    assert "grad-signature-only" in codes_of(dataset(), encoder)


@pytest.mark.parametrize("task", ["regression", "multi-label"])
def test_the_gradient_step_takes_the_tasks_own_loss(task, files, trainable_hf_dir):
    # One output (a value; one label): the cross-entropy against class 0 the step once took is
    # 0 whatever the weights, so every variable had an all-zero gradient (41 on this model).
    from tests.tiny import scored_rows

    if task == "regression":
        rows = scored_rows(32, seed=6)
    else:
        rows = [(t, "pos" if label == "pos" else "") for t, label in sentiment_rows(32, seed=6)]
    config = config_for(trainable_hf_dir, write_csv(files / f"{task}.csv", rows), batch_size=8)
    config.model.task = task
    report = bertfit.check(config, compile=False)
    assert "grad-zero" not in report.codes and report.exit_code() == 0, report.render(False)


def test_check_knows_the_tasks(files, trainable_hf_dir):
    from tests.tiny import scored_rows, tagged_rows, write_jsonl

    tags = write_jsonl(files / "tags.jsonl", tagged_rows(64, seed=3))
    report = bertfit.check(config_for(trainable_hf_dir, tags, batch_size=8), compile=False)
    assert report.stats["task"] == "multi-label" and "labels per row" in report.stats
    assert report.stats["schedule"].startswith("13 epochs for 64 training rows")  # issue 63
    assert "data-task-inferred" in report.codes

    single = write_jsonl(files / "single.jsonl", [(t, [label]) for t, label in sentiment_rows(32)])
    assert "data-multi-label-single" in run_codes(
        config_for(trainable_hf_dir, single, batch_size=8)
    )

    scores = scored_rows(64, seed=4) + [("good", 1e6)]
    report = bertfit.check(
        config_for(trainable_hf_dir, write_csv(files / "s.csv", scores), batch_size=8),
        compile=False,
    )
    assert report.stats["task"] == "regression" and "data-target-outliers" in report.codes

    skewed = [(t, "pos") for t, _ in sentiment_rows(100)] + [("awful film", "neg")]
    report = bertfit.check(
        config_for(trainable_hf_dir, write_csv(files / "k.csv", skewed), batch_size=8),
        compile=False,
    )
    (finding,) = [f for f in report.findings if f.code == "data-imbalance"]
    assert "--class-weights balanced" in finding.fix


@pytest.mark.host_xla
def test_raw_strings_batched_then_tokenized_is_not_a_dynamic_batch(encoder, tokenizer):
    """The pipeline `input-raw-strings` recommends: batch(drop_remainder=True), then the
    tokenizer in a map. Shape inference loses the batch size in the tokenizer's outputs
    ([None, 16]) while the labels keep it ([8]); the TPU rehearsal compiles it."""
    rows = sentiment_rows(32)
    ds = (
        tf.data.Dataset.from_tensor_slices(([t for t, _ in rows], np.arange(32) % 2))
        .batch(8, drop_remainder=True)
        .map(lambda text, label: (tokenizer(text, max_seq_length=16), label))
    )
    assert ds.element_spec[0]["input_word_ids"].shape.as_list() == [None, 16]
    report = bertfit.check(
        dataset=ds, encoder=encoder, tokenizer=tokenizer, target="tpu", replicas=1
    )
    assert "shape-dynamic-batch" not in report.codes
    assert "shape-batch-from-other-component" in report.codes
    assert report.exit_code() == 0, report.render(color=False)
    assert [c["ok"] for c in report.compiled] == [True]


@pytest.mark.host_xla
def test_tpu_rehearsal_of_the_readme_keras_example(encoder, tokenizer):
    """docs/python_api.md's Keras path (strings -> BertPreprocessor in tf.data -> BertClassifier)
    given to check(model=...) for a TPU: no finding, and its step compiles for the shape."""
    from bertfit.text.preprocessor import BertPreprocessor

    preprocessor = BertPreprocessor(tokenizer, seq_length=16)
    rows = sentiment_rows(32)
    data = (
        tf.data.Dataset.from_tensor_slices(([t for t, _ in rows], np.arange(32) % 2))
        .batch(16, drop_remainder=True)
        .map(lambda text, label: (preprocessor(text), label))
    )
    model = bertfit.BertClassifier(encoder, num_classes=2, pooling="mean")
    report = bertfit.check(dataset=data, model=model, target="tpu", replicas=2)
    assert report.exit_code() == 0, report.render(color=False)
    assert [c["ok"] for c in report.compiled] == [True]


def test_check_chooses_the_buckets_train_will_choose(files, trainable_hf_dir):
    config = config_for(
        trainable_hf_dir, good_csv(files / "auto.csv"), batch_size=8, buckets="auto"
    )
    report = bertfit.check(config, compile=False)
    assert "chosen from the training lengths" in report.stats["length buckets"]
    chosen = report.stats["length buckets"].split(" chosen")[0].removeprefix("length buckets ")
    assert set(report.stats["buckets used"]) <= {int(b) for b in chosen.split(", ")}
    assert config.data.buckets == "auto"  # the caller's config is left as it was
