"""The streaming input of a prepared TFRecord set (issue 33): the same rows as the in-memory
path, every row once per epoch, equal step counts on every worker, shards split by file."""

from __future__ import annotations

import collections
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from bertfit.cli import main
from bertfit.config import DataConfig, ModelConfig, RunConfig
from bertfit.data.labelled import encode_labelled, infer_run_task
from bertfit.data.pipeline import PAD_INDEX, BucketedInput, plan_batches
from bertfit.data.run_files import read_training_examples
from bertfit.data.stream_source import cached_shards
from bertfit.data.streaming import StreamedInput, StreamLayout, TrainStream
from bertfit.data.tfrecord import Manifest
from bertfit.model.inputs import GLOBAL_EXAMPLES, INDEX, WEIGHT, WORD_IDS
from bertfit.training.setup import load_checkpoint, run_tokenizer
from bertfit.training.shards import prepare_shards
from tests.tiny import sentiment_rows, train_args, write_csv

BUCKETS = (8, 16)


@pytest.fixture(scope="module")
def prepared(tiny_hf_dir, tmp_path_factory):
    """37 rows prepared into 3 shards, and the same rows tokenized in memory."""
    model, _ = tiny_hf_dir
    folder = tmp_path_factory.mktemp("stream")
    train = write_csv(folder / "train.csv", sentiment_rows(37, seed=3))
    config = RunConfig(
        model=ModelConfig(name=str(model), max_seq_length=16), data=DataConfig(train=str(train))
    )
    prepare_shards(config, folder / "prepared", shards=3, chunk_rows=10)
    tokenizer = run_tokenizer(load_checkpoint(config), config)
    examples = read_training_examples(str(train), config)
    task, _ = infer_run_task(examples, config)
    memory = encode_labelled(str(train), examples, config, tokenizer, task)
    stream = TrainStream(folder / "prepared", Manifest.load(folder / "prepared"))
    return stream, memory, tokenizer


def _rows(batches) -> list[tuple[int, tuple[int, ...]]]:
    """(index, unpadded word ids) of every real row of per-replica batches."""
    seen = []
    for batch in batches:
        for index, ids in zip(batch[INDEX].numpy(), batch[WORD_IDS].numpy(), strict=True):
            if index != PAD_INDEX:
                seen.append((int(index), tuple(int(i) for i in ids if i)))
    return seen


def test_an_epoch_streams_the_rows_the_in_memory_path_trains(prepared):
    stream, memory, tokenizer = prepared
    layout = StreamLayout.of(stream.manifest, BUCKETS, pipelines=1, rows_per_step=8)
    streamed = StreamedInput(
        stream,
        layout,
        tf.distribute.get_strategy(),
        special_ids=tokenizer.special_ids,
        seed=1,
        epoch=0,
        shuffle_buffer=4,
    )
    plan = plan_batches(memory.encoded.packed_lengths, BUCKETS, 8, shuffle=True, seed=1)
    in_memory = BucketedInput(
        memory.encoded,
        memory.labels,
        plan,
        tf.distribute.get_strategy(),
        special_ids=tokenizer.special_ids,
    )
    assert sorted(s.seq_length for s in streamed.plan) == sorted(b.seq_length for b in plan)
    by_bucket = sorted((s.seq_length, s.num_examples) for s in streamed.plan)
    assert by_bucket == sorted((b.seq_length, b.num_examples) for b in plan)

    batches, memory_batches, counts = [], [], []
    iterators = streamed.iterators()
    for step in streamed.plan:
        batch = next(iterators[step.seq_length])
        assert batch[WORD_IDS].shape == (8, step.seq_length)
        real = int((batch[INDEX].numpy() != PAD_INDEX).sum())
        assert real == step.num_examples == batch[GLOBAL_EXAMPLES].numpy()
        assert batch[WEIGHT].numpy().sum() == real
        batches.append(batch)
        counts.append(real)
    memory_batches = [batch for _, batch in in_memory]
    streamed_rows, memory_rows = _rows(batches), _rows(memory_batches)
    assert sorted(streamed_rows) == sorted(memory_rows)  # same rows, same ids
    assert collections.Counter(i for i, _ in streamed_rows) == collections.Counter(range(37))
    assert sum(counts) == 37


def test_a_resumed_epoch_skips_exactly_the_steps_taken(prepared):
    stream, _, tokenizer = prepared
    layout = StreamLayout.of(stream.manifest, BUCKETS, pipelines=1, rows_per_step=4)

    def rows(start):
        streamed = StreamedInput(
            stream,
            layout,
            tf.distribute.get_strategy(),
            special_ids=tokenizer.special_ids,
            seed=2,
            epoch=1,
            start=start,
            shuffle_buffer=8,
        )
        iterators = streamed.iterators()
        return [_rows([next(iterators[step.seq_length])]) for step in streamed.plan]

    whole = rows(0)
    assert rows(3) == whole[3:]
    assert sorted(i for step in whole for i, _ in step) == list(range(37))


def _pipeline_rows(streamed: StreamedInput, pipelines: int, replicas: int) -> list[list[int]]:
    seen = []
    for p in range(pipelines):
        context = tf.distribute.InputContext(pipelines, p, replicas)
        rows = []
        for b in range(len(BUCKETS)):
            elements = list(streamed.dataset(b, context))
            steps = int(streamed.layout.steps()[b])
            assert len(elements) == steps * replicas // pipelines  # equal on every worker
            rows += [int(i) for e in elements for i in e[INDEX].numpy() if i != PAD_INDEX]
        seen.append(rows)
    return seen


def test_two_workers_read_disjoint_files_that_cover_every_row(prepared):
    stream, _, tokenizer = prepared
    layout = StreamLayout.of(stream.manifest, BUCKETS, pipelines=2, rows_per_step=4)
    assert layout.files == ((0, 2), (1,)) and not layout.by_row and layout.note is None
    streamed = StreamedInput(
        stream,
        layout,
        tf.distribute.get_strategy(),
        special_ids=tokenizer.special_ids,
        seed=0,
        epoch=0,
    )
    first, second = _pipeline_rows(streamed, pipelines=2, replicas=4)
    shards = [s.rows for s in stream.manifest.shards]  # rows 0-12, 13-24, 25-36
    assert sorted(first) == list(range(shards[0])) + list(range(37 - shards[2], 37))
    assert sorted(second) == list(range(shards[0], shards[0] + shards[1]))
    plan = layout.plan(shuffle=True)
    assert sum(step.num_examples for step in plan) == 37


def test_more_workers_than_files_split_the_rows(prepared):
    stream, _, tokenizer = prepared
    layout = StreamLayout.of(stream.manifest, BUCKETS, pipelines=4, rows_per_step=2)
    assert layout.by_row and "fewer files than the 4 workers" in layout.note
    streamed = StreamedInput(
        stream,
        layout,
        tf.distribute.get_strategy(),
        special_ids=tokenizer.special_ids,
        seed=0,
        epoch=0,
    )
    seen = _pipeline_rows(streamed, pipelines=4, replicas=4)
    assert sorted(i for rows in seen for i in rows) == list(range(37))
    assert all(not set(a) & set(b) for a in seen for b in seen if a is not b)


# ---- bertfit train on a prepared set ----


@pytest.fixture(scope="module")
def prepared_run_data(trainable_hf_dir, tmp_path_factory):
    """A prepared training set (2 shards) of 40 rows and an eval file of 13."""
    folder = tmp_path_factory.mktemp("streamed_train")
    train = write_csv(folder / "train.csv", sentiment_rows(40, seed=5))
    evaluation = write_csv(folder / "eval.csv", sentiment_rows(13, seed=6))
    args = ["prepare", str(train), str(folder / "prepared"), "--model", str(trainable_hf_dir)]
    assert main([*args, "--max-seq-length", "16", "--shards", "2"]) == 0
    return folder / "prepared", evaluation


def test_train_on_prepared_shards_trains_every_row_and_evaluates_every_eval_row(
    trainable_hf_dir, prepared_run_data, tmp_path, capsys
):
    prepared, evaluation = prepared_run_data
    args = train_args(trainable_hf_dir, prepared, tmp_path / "run", epochs=2, buckets="8,16")
    assert main([*args, "--eval", str(evaluation)]) == 0, capsys.readouterr().err
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["status"] == "finished"
    assert [e["train_examples"] for e in metrics["epochs"]] == [40, 40]
    assert [e["eval"]["num_examples"] for e in metrics["epochs"]] == [13, 13]
    assert metrics["data"]["train_rows"] == 40
    steps = [json.loads(line) for line in (tmp_path / "run" / "steps.jsonl").open()]
    per_epoch = len(StreamLayout.of(Manifest.load(prepared), BUCKETS, 1, 8).plan(shuffle=False))
    assert len(steps) == 2 * per_epoch
    assert sum(s["examples"] for s in steps if s["epoch"] == 1) == 40
    assert "streaming the prepared set" in (tmp_path / "run" / "train.log").read_text()


def test_shards_of_another_tokenizer_are_refused(
    trainable_hf_dir, prepared_run_data, tmp_path, capsys
):
    prepared, _ = prepared_run_data
    args = train_args(trainable_hf_dir, prepared, tmp_path / "run", lower_case="false")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "prepared with another tokenizer" in err and "Traceback" not in err
    assert not (tmp_path / "run" / "config.yaml").exists()


def test_streaming_a_data_file_prepares_it_once_into_the_cache(
    trainable_hf_dir, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("BERTFIT_CACHE", str(tmp_path / "cache"))
    train = write_csv(tmp_path / "train.csv", sentiment_rows(30, seed=7))
    for run in ("a", "b"):
        args = train_args(trainable_hf_dir, train, tmp_path / run, streaming=True, buckets="8,16")
        assert main(args) == 0, capsys.readouterr().err
        metrics = json.loads((tmp_path / run / "metrics.json").read_text())
        assert [e["train_examples"] for e in metrics["epochs"]] == [30]
    (prepared,) = (tmp_path / "cache" / "prepared").iterdir()  # the second run reused it
    assert Manifest.load(prepared).rows == 30
    assert "streaming the prepared set" in (tmp_path / "b" / "train.log").read_text()


def test_a_prepared_set_at_a_url_is_streamed(trainable_hf_dir, prepared_run_data, tmp_path):
    """TensorFlow's `ram://` file system stands for `gs://`: the manifest is read through
    `bertfit.storage`, the shards by `tf.data` itself, nothing through local-only calls."""
    prepared, _ = prepared_run_data
    url = f"ram://prepared-{tmp_path.name}"
    tf.io.gfile.makedirs(url)
    for file in prepared.iterdir():
        tf.io.gfile.copy(str(file), f"{url}/{file.name}")
    args = train_args(trainable_hf_dir, url, tmp_path / "run", buckets="8,16")
    assert main(args) == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert [e["train_examples"] for e in metrics["epochs"]] == [40]
    assert metrics["data"]["train"] == url


def test_check_on_a_prepared_set_samples_and_says_so(
    trainable_hf_dir, prepared_run_data, tmp_path, capsys
):
    prepared, evaluation = prepared_run_data
    args = train_args(trainable_hf_dir, prepared, command="check", buckets="8,16", quiet=None)
    code = main([*args, "--eval", str(evaluation), "--json"])
    out = capsys.readouterr().out
    report = json.loads(out)
    assert code == 0, out
    assert "40 in 2 shards" in report["stats"]["training rows"]
    assert "samples the first batch of each bucket" in report["stats"]["training rows"]
    assert report["stats"]["buckets used"] == [8, 16]

    code = main(
        [
            *train_args(trainable_hf_dir, prepared, command="check", quiet=None),
            "--lower-case",
            "false",
        ]
    )
    assert code != 0
    assert "prepared with another tokenizer" in capsys.readouterr().out


def test_buckets_are_chosen_from_the_histogram_or_its_quantiles(prepared):
    stream, memory, _ = prepared
    lengths = np.sort(np.minimum(memory.encoded.packed_lengths, 16))
    np.testing.assert_array_equal(np.sort(stream.lengths()), lengths)
    quantiles = lengths[np.linspace(0, len(lengths) - 1, 10).astype(np.int64)]
    np.testing.assert_array_equal(stream.lengths(limit=10), quantiles)


@pytest.mark.parametrize("shuffle, run_length", [(False, 1), (True, 1), (True, 3)])
def test_a_plan_takes_each_buckets_steps_in_order_in_runs_and_counts_every_row(shuffle, run_length):
    counts = np.array([[0, 41, 7, 130], [3, 38, 0, 129]])  # 2 pipelines, 4 buckets
    layout = StreamLayout((8, 16, 32, 64), ((0,), (1,)), False, counts, rows_per_step=4)
    plan = layout.plan(shuffle=shuffle, seed=5, epoch=1, run_length=run_length)
    assert sum(step.num_examples for step in plan) == counts.sum()
    for b, length in enumerate(layout.buckets):
        taken = [step.num_examples for step in plan if step.seq_length == length]
        assert taken == layout.global_examples(b).tolist()  # in order, padding last
    in_bucket_order = [s.seq_length for s in plan] == sorted(s.seq_length for s in plan)
    assert in_bucket_order != shuffle
    assert plan == layout.plan(shuffle=shuffle, seed=5, epoch=1, run_length=run_length)


@pytest.mark.slow
def test_the_streaming_cache_follows_the_file_s_bytes_not_its_mtime(
    tiny_hf_dir, tmp_path, monkeypatch
):
    """Labels changed with the modification time restored (`cp -p`, `touch -r`): the cache
    keyed on path, size and mtime gave the old labels; keyed on the bytes, the new ones."""
    monkeypatch.setenv("BERTFIT_CACHE", str(tmp_path / "cache"))
    model, _ = tiny_hf_dir
    train = tmp_path / "train.csv"
    train.write_text("text,label\ngood film,pos\nbad film,neg\nfine film,pos\n")
    config = RunConfig(
        model=ModelConfig(name=str(model), max_seq_length=16),
        data=DataConfig(train=str(train), streaming=True),
    )
    tokenizer = run_tokenizer(load_checkpoint(config), config)
    first = cached_shards(config, tokenizer)
    stat = train.stat()
    train.write_text("text,label\ngood film,pos\nbad film,neg\nfine film,meh\n")  # same size
    os.utime(train, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert train.stat().st_size == stat.st_size
    second = cached_shards(config, tokenizer)
    assert second != first
    assert Manifest.load(first).task.labels == ("neg", "pos")
    assert Manifest.load(second).task.labels == ("meh", "neg", "pos")
    assert cached_shards(config, tokenizer) == second  # the same bytes: reused


@pytest.mark.slow
def test_a_training_file_over_the_size_setting_is_streamed_and_said_up_front(
    trainable_hf_dir, tmp_path, monkeypatch, capsys
):
    """$BERTFIT_STREAM_ABOVE_MB (64 by default) set to 1 kB stands for a large file."""
    monkeypatch.setenv("BERTFIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("BERTFIT_STREAM_ABOVE_MB", "0.001")
    train = write_csv(tmp_path / "train.csv", sentiment_rows(40, seed=7))
    assert train.stat().st_size > 1000
    args = train_args(trainable_hf_dir, train, tmp_path / "run", buckets="8,16")
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"{train} is 0 MB (over BERTFIT_STREAM_ABOVE_MB=0.001 MB): streaming it" in err
    assert "streaming the prepared set" in (tmp_path / "run" / "train.log").read_text()
    assert "streaming: true" in (tmp_path / "run" / "config.yaml").read_text()
    assert err.index("streaming it") < err.index("streaming the prepared set")  # up front

    # an option that needs the rows in memory: kept there, and the wait said
    args = train_args(
        trainable_hf_dir, train, tmp_path / "weighted", buckets="8,16", class_weights="balanced"
    )
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "streaming would start sooner but --class-weights needs the rows in memory" in err
    assert "streaming the prepared set" not in (tmp_path / "weighted" / "train.log").read_text()

    monkeypatch.setenv("BERTFIT_STREAM_ABOVE_MB", "lots")
    assert main(train_args(trainable_hf_dir, train, tmp_path / "x")) == 2
    assert "BERTFIT_STREAM_ABOVE_MB='lots': expected a size in MB" in capsys.readouterr().err
