"""`bertfit train --long-documents chunk` end to end on a tiny BERT (issue 35): every task
trains on whole documents cut into windows, evaluation counts each document once, the step is
traced once per chunk-count bucket, and the attention pooling's weights are checkpointed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertfit.cli import main
from bertfit.data.windowed import chunk_buckets
from bertfit.text.windows import WindowSpec
from tests.tiny import FILLER, NEGATIVE, POSITIVE, train_args, write_csv, write_jsonl

# max_seq_length 16: windows of 14 ids, stride 3 (a quarter), so 1 to 5 windows below 60 words
SPEC = WindowSpec(max_seq_length=16, stride=3, max_chunks=4)
FLAGS = {  # over tests.tiny.TRAIN_FLAGS
    "long_documents": "chunk",
    "max_chunks": 4,
    "learning_rate": "5e-3",
    "dropout": 0,
    "seed": 0,
    "jit_compile": "false",
    "pooling": "mean",
}


def long_text(rng, words: int, signal: list[str]) -> str:
    """`words` filler words (one id each in the tiny vocabulary) with `signal` spread in."""
    text = list(rng.choice(FILLER, size=max(words - len(signal), 0)))
    for word in signal:
        text.insert(int(rng.integers(0, len(text) + 1)), word)
    return " ".join(map(str, text))


def documents(n: int, seed: int, kind: str) -> list[tuple]:
    """Rows of 2 to 60 words (1 to 5 windows of `SPEC`) for each task."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        words = int(rng.integers(2, 61))
        if kind == "single-label":
            word = str(rng.choice(POSITIVE if i % 2 else NEGATIVE))
            rows.append((long_text(rng, words, [word]), ("neg", "pos")[i % 2]))
        elif kind == "multi-label":
            labels = [name for name in ("pos", "neg") if rng.random() < 0.5]
            signal = [str(rng.choice(POSITIVE if n == "pos" else NEGATIVE)) for n in labels]
            rows.append((long_text(rng, words, signal), labels))
        else:
            good = int(rng.integers(0, 3))
            rows.append((long_text(rng, words, [str(rng.choice(POSITIVE))] * good), good + 0.5))
    return rows


def buckets_used(rows: list[tuple]) -> set[int]:
    """The chunk-count buckets the rows' documents fall in."""
    buckets = np.asarray(chunk_buckets(SPEC.max_chunks))
    windows = np.minimum(SPEC.windows_needed([len(r[0].split()) for r in rows]), 4)
    return set(buckets[np.searchsorted(buckets, windows)].tolist())


def _metrics(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


@pytest.mark.parametrize(
    "kind, pooling, xla",
    [
        ("single-label", "attention", "true"),  # the step compiled with XLA (the CLI's way)
        ("multi-label", "max", "false"),
        ("regression", "mean", "false"),
    ],
)
def test_train_chunk_counts_every_document_once_and_traces_once_per_chunk_bucket(
    trainable_hf_dir, tmp_path, kind, pooling, xla
):
    train_rows, eval_rows = documents(29, 0, kind), documents(13, 1, kind)
    write = write_jsonl if kind == "multi-label" else write_csv
    train = write(tmp_path / f"train.{'jsonl' if kind == 'multi-label' else 'csv'}", train_rows)
    dev = write(tmp_path / f"dev.{'jsonl' if kind == 'multi-label' else 'csv'}", eval_rows)
    run = tmp_path / "run"
    extra = ["--eval", str(dev), "--chunk-pooling", pooling]
    if kind == "regression":  # with gradient accumulation: 2 micro-batches of 8 documents
        extra += ["--task", "regression", "--grad-accum", "2"]
    flags = {**FLAGS, "epochs": 2, "no_report": None, "jit_compile": xla}  # report: windows
    assert main(train_args(trainable_hf_dir, train, run, *extra, **flags)) == 0

    metrics = _metrics(run)
    assert metrics["status"] == "finished" and metrics["task"] == kind
    assert metrics["data"]["train_rows"] == 29 and metrics["train_num_examples"] == 29
    for epoch in metrics["epochs"]:  # one row per document, never one per window
        assert epoch["train_examples"] == 29 and epoch["eval"]["num_examples"] == 13
    assert metrics["final"]["num_examples"] == 13
    outputs = np.load(run / "eval_outputs.npz")
    assert len(outputs[outputs.files[0]]) == 13
    assert len(buckets_used(train_rows)) > 1
    assert metrics["trace_counts"] == {  # two epochs, one trace per (length, K) bucket
        "train_step": len(buckets_used(train_rows)),
        "predict_step": len(buckets_used(eval_rows)),
    }
    config = (run / "config.yaml").read_text()
    assert "long_documents: chunk" in config and f"chunk_pooling: {pooling}" in config

    # what the report shows: documents' lengths against the window, windows, text dropped
    lengths = np.asarray([len(row[0].split()) for row in train_rows])  # one id per word
    needed = SPEC.windows_needed(lengths)
    kept = np.minimum(needed, SPEC.max_chunks)
    covered = SPEC.content + (kept - 1) * SPEC.step
    windows = metrics["data"]["windows"]
    assert windows["documents"] == 29 and windows["max_tokens"] == lengths.max()
    assert windows["windows"] == {str(k): int((kept == k).sum()) for k in np.unique(kept)}
    assert windows["cut_documents"] == int((needed > SPEC.max_chunks).sum()) > 0
    dropped = np.maximum(lengths - covered, 0).sum() / lengths.sum()
    assert windows["dropped_share"] == pytest.approx(dropped)
    assert windows["token_counts"] == {str(n): int((lengths == n).sum()) for n in set(lengths)}
    report = (run / "report.html").read_text()
    assert "Long documents in windows" in report and f"{dropped:.1%}" in report
    (run / "report.html").unlink()
    assert main(["report", str(run)]) == 0  # redrawn from the run directory alone
    assert (run / "report.html").read_text().count("document token-length histogram") == 1
    tags = _tensorboard_tags(run)
    assert {"data/document_tokens", "data/windows_per_document", "data/windows"} <= tags
    assert "data/token_length" not in tags  # a chunk run's lengths are documents' and windows'


def _tensorboard_tags(run: Path) -> set[str]:
    import tensorflow as tf

    files = (run / "tensorboard").glob("events.out.tfevents.*")
    events = [e for file in files for e in tf.compat.v1.train.summary_iterator(str(file))]
    return {value.tag for event in events for value in event.summary.value}


def _attention_trainer(total_steps: int = 4):
    import tensorflow as tf

    from bertfit.config import TrainConfig
    from bertfit.model.chunked import ChunkedClassifier
    from bertfit.model.classifier import BertClassifier
    from bertfit.training.loop import Trainer
    from tests.tiny import tiny_encoder

    def build():
        return ChunkedClassifier(BertClassifier(tiny_encoder(), 2, "mean", 0.0), "attention")

    config = TrainConfig(batch_size=4, learning_rate=1e-2, jit_compile=False)
    strategy = tf.distribute.get_strategy()
    return Trainer(build, strategy, config, total_steps, frozen=("pooler",))


def test_attention_pooling_weights_are_saved_and_restored_with_their_optimizer_slots(tmp_path):
    from bertfit.data.windowed import WindowedInput, encode_documents, plan_documents
    from bertfit.runs.checkpoint_files import latest_checkpoint
    from bertfit.runs.weights import restore_model
    from bertfit.text import BertTokenizer
    from bertfit.training.checkpointing import RunCheckpoints, TrainingState
    from tests.tiny import write_vocab

    tokenizer = BertTokenizer(write_vocab(tmp_path))
    rows = documents(8, 2, "single-label")
    docs = encode_documents(tokenizer, [text for text, _ in rows], SPEC)
    labels = np.asarray([label == "pos" for _, label in rows], np.int32)
    trained = _attention_trainer()
    plan = plan_documents(docs, 4, shuffle=False)
    data = WindowedInput(docs, labels, plan, trained.strategy, special_ids=tokenizer.special_ids)
    for _ in trained.run_plan(data):
        pass
    score = trained.model.window_pooling.score.kernel
    assert np.abs(score.numpy()).max() > 0  # trained away from its zero start
    saved = RunCheckpoints(trained.model, trained.optimizer, tmp_path / "latest", tmp_path / "best")
    saved.save_latest(TrainingState(global_step=len(plan)))
    saved.save_best(TrainingState(global_step=len(plan)))

    resumed = _attention_trainer()
    assert RunCheckpoints(
        resumed.model, resumed.optimizer, tmp_path / "latest", tmp_path / "best"
    ).restore_latest() == TrainingState(global_step=len(plan))
    pairs = [
        *zip(trained.model.weights, resumed.model.weights, strict=True),
        *zip(trained.optimizer.variables, resumed.optimizer.variables, strict=True),
    ]
    for a, b in pairs:
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    inference = _attention_trainer(total_steps=None).model  # what evaluate/predict build
    restore_model(inference, latest_checkpoint(tmp_path / "best"))
    np.testing.assert_array_equal(inference.window_pooling.score.kernel.numpy(), score.numpy())


@pytest.mark.slow
def test_a_killed_attention_pooling_run_resumes_to_the_weights_of_an_uninterrupted_one(
    one_layer_hf_dir, tmp_path, capsys
):
    from tests.distributed import cluster
    from tests.training.kill import resume_args, run_killed, train_here

    train = write_csv(tmp_path / "train.csv", documents(24, 3, "single-label"))
    dev = write_csv(tmp_path / "dev.csv", documents(9, 4, "single-label"))
    flags = {
        **FLAGS,
        "chunk_pooling": "attention",
        "dropout": "0.2",
        "eval": str(dev),
        "buckets": None,
    }
    args = resume_args(one_layer_hf_dir, train, **flags)
    plain, killed = tmp_path / "plain", tmp_path / "killed"
    code, err = train_here([*args, "--output-dir", str(plain)], capsys)
    assert code == 0, err
    run_killed([*args, "--output-dir", str(killed)], ("steps", 2))  # mid-epoch 1
    code, err = train_here([*args, "--output-dir", str(killed)], capsys)
    assert code == 0 and "resuming the unfinished run" in err, err
    cluster.assert_same_weights(plain, killed, atol=1e-6)
    weights = cluster.final_weights(killed)
    (score,) = [value for name, value in weights.items() if "window_pooling" in name]
    assert np.abs(score).max() > 0  # the attention score trained, and was saved and restored


def _setup(model_dir, tmp_path, train_rows, eval_rows=None, **model):
    import tensorflow as tf

    from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
    from bertfit.training.setup import prepare
    from bertfit.training.xla import XlaChoice

    dev = None if eval_rows is None else str(write_csv(tmp_path / "dev.csv", eval_rows))
    config = RunConfig(
        model=ModelConfig(name=str(model_dir), max_seq_length=16, dropout=0.0, **model),
        data=DataConfig(train=str(write_csv(tmp_path / "train.csv", train_rows)), eval=dev),
        train=TrainConfig(batch_size=8, epochs=1, strategy="default", jit_compile=False),
    )
    strategy = tf.distribute.get_strategy()
    return prepare(config, strategy, XlaChoice.for_run(False, strategy))


def test_padding_documents_reach_neither_the_loss_nor_the_evaluation(trainable_hf_dir, tmp_path):
    import tensorflow as tf

    from bertfit.model.losses import per_example_loss
    from bertfit.progress import Console
    from bertfit.text.windows import tokenize_windows
    from bertfit.training.run import evaluate_data

    train_rows, eval_rows = documents(13, 5, "single-label"), documents(11, 6, "single-label")
    setup = _setup(trainable_hf_dir, tmp_path, train_rows, eval_rows, long_documents="chunk",
                   max_chunks=4, chunk_pooling="attention")  # fmt: skip
    model, tokenizer = setup.trainer.model, setup.tokenizer
    model.window_pooling.score.kernel.assign(np.full([32, 1], 0.3, "float32"))  # not the mean
    keys = ("input_word_ids", "input_mask", "input_type_ids", "window_mask")

    def alone(text: str) -> tf.Tensor:  # the document's logits, classified on its own
        inputs = tokenize_windows(tokenizer, [text], SPEC)
        return model({k: inputs[k] for k in keys})[0]

    labels = {"neg": 0, "pos": 1}
    padded = 0
    for batch in setup.batches(setup.train, shuffle=False, training=True):
        _, batch = batch
        real = batch["index"].numpy() >= 0
        padded += int((~real).sum())
        assert (batch["window_mask"].numpy()[~real] == 0).all()
        _, loss = setup.trainer.replica_step(batch)
        rows = [train_rows[i] for i in batch["index"].numpy()[real]]
        logits = tf.stack([alone(text) for text, _ in rows])
        want = per_example_loss("single-label", [labels[y] for _, y in rows], logits)
        np.testing.assert_allclose(float(loss), float(tf.reduce_mean(want)), rtol=1e-5)
    assert padded > 0  # some batches had padding documents

    metrics, outputs = evaluate_data(setup, setup.eval, Console(silent=True))
    assert metrics["num_examples"] == 11 and outputs.shape == (11, 2)
    each = tf.nn.softmax(tf.stack([alone(text) for text, _ in eval_rows])).numpy()
    np.testing.assert_allclose(outputs, each, atol=1e-5)
    gold = np.asarray([labels[y] for _, y in eval_rows])
    assert metrics["accuracy"] == pytest.approx(float((each.argmax(1) == gold).mean()))
    loss = per_example_loss("single-label", gold, np.log(each)).numpy().mean()
    assert metrics["loss"] == pytest.approx(float(loss), rel=1e-4)


def test_truncate_suggests_chunk_once_when_many_rows_lose_tokens(trainable_hf_dir, tmp_path):
    from bertfit.data.training_data import CHUNK_SUGGESTION_SHARE

    rows = documents(20, 7, "single-label")
    over = np.mean([len(text.split()) + 2 > 16 for text, _ in rows])
    assert over > CHUNK_SUGGESTION_SHARE
    notes = _setup(trainable_hf_dir, tmp_path, rows).notes
    suggestions = [note for note in notes if "--long-documents chunk" in note]
    assert suggestions == [
        f"{over:.1%} of the training rows are longer than --max-seq-length 16 and lose tokens; "
        "--long-documents chunk classifies them whole (windows pooled per document)."
    ]
    short = [(" ".join(text.split()[:10]), label) for text, label in rows]
    assert not any("--long-documents" in n for n in _setup(trainable_hf_dir, tmp_path, short).notes)
    chunked = _setup(trainable_hf_dir, tmp_path, rows, long_documents="chunk", max_chunks=4)
    assert not any("--long-documents chunk classifies" in n for n in chunked.notes)


@pytest.mark.parametrize(
    "extra, says",
    [
        (["--text-pair-column", "text_pair"], "--text-pair-column text_pair gives pairs"),
        (["--streaming"], "needs whole documents"),
        (["--buckets", "8,16"], "Leave --buckets out"),
    ],
)
def test_what_chunk_cannot_do_is_refused_before_anything_is_written(
    trainable_hf_dir, tmp_path, capsys, extra, says
):
    rows = [(text, text, label) for text, label in documents(8, 8, "single-label")]
    train = write_csv(tmp_path / "train.csv", rows, header=("text", "text_pair", "label"))
    run = tmp_path / "run"
    assert main(train_args(trainable_hf_dir, train, run, *extra, **FLAGS)) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err
    assert not run.exists()


def test_check_estimates_memory_for_every_window_and_reports_the_cut_documents(
    trainable_hf_dir, tmp_path
):
    from bertfit.checks.api import check
    from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig

    rows = documents(24, 9, "single-label")
    model = dict(name=str(trainable_hf_dir), max_seq_length=16, long_documents="chunk")
    config = RunConfig(
        model=ModelConfig(**model, max_chunks=4),
        data=DataConfig(train=str(write_csv(tmp_path / "train.csv", rows))),
        train=TrainConfig(batch_size=8, jit_compile=False),
    )
    report = check(config, compile=False)
    assert not [f for f in report.findings if f.severity == "error"], report.render()
    assert "data-truncated" not in report.codes
    (cut,) = [f for f in report.findings if f.code == "data-windows-cut"]
    lengths = np.asarray([len(text.split()) for text, _ in rows])
    needed = SPEC.windows_needed(lengths)
    assert cut.message.startswith(f"{int((needed > 4).sum())} of 24 document(s)")
    used = sorted(buckets_used(rows))
    activations = report.memory["activations_bytes"]
    assert list(activations) == [f"[8, {k}, 16]" for k in used]
    # the encoder runs on batch·K windows: the estimate of [8, K, 16] is K times [8, 1, 16]
    one = activations["[8, 1, 16]"]
    assert [activations[f"[8, {k}, 16]"] for k in used] == [pytest.approx(k * one) for k in used]


def test_a_chunk_runs_saved_config_is_accepted_again():
    """config.yaml holds the resolved buckets, [max_seq_length]: `--config` reruns it."""
    from bertfit.config import DataConfig, ModelConfig, RunConfig
    from bertfit.data.labelled import window_spec

    model = ModelConfig(max_seq_length=16, long_documents="chunk", max_chunks=4)
    saved = RunConfig(model=model, data=DataConfig(train="train.csv", buckets=[16]))
    assert window_spec(saved) == SPEC
    assert window_spec(RunConfig(data=DataConfig(train="train.csv", buckets=[8, 16]))) is None
