"""`bertfit prepare`: TFRecord shards and a manifest that hold exactly the in-memory path's
tokenization, read in chunks (issue 33)."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
import tensorflow as tf

from bertfit.cli import main
from bertfit.config import DataConfig, ModelConfig, RunConfig
from bertfit.data import shard_writer
from bertfit.data.chunks import read_chunks
from bertfit.data.labelled import encode_labelled, infer_run_task
from bertfit.data.run_files import read_training_examples
from bertfit.data.sources import Example, SourceSpec, read_examples
from bertfit.data.tfrecord import (
    Manifest,
    parser,
    serialize,
    serialize_batch,
    tokenizer_fingerprint,
)
from bertfit.errors import DataError
from bertfit.training.setup import load_checkpoint, run_tokenizer
from bertfit.training.shards import prepare_shards
from tests.tiny import scored_rows, sentiment_rows, tagged_rows, write_csv, write_jsonl


def _config(model, train, **data) -> RunConfig:
    return RunConfig(
        model=ModelConfig(name=str(model), max_seq_length=16),
        data=DataConfig(train=str(train), **data),
    )


def _records(directory, manifest: Manifest) -> list[dict]:
    parse = parser(manifest.task, manifest.pair)
    dataset = tf.data.TFRecordDataset(manifest.paths(directory)).map(parse)
    return [{k: v.numpy() for k, v in r.items()} for r in dataset]


def test_chunks_are_the_rows_of_read_examples(tmp_path):
    rows = sentiment_rows(23)
    for path in (write_csv(tmp_path / "a.csv", rows), write_jsonl(tmp_path / "a.jsonl", rows)):
        whole = read_examples(path)
        chunks = list(read_chunks(path, rows=5))
        assert [len(c) for c in chunks] == [5, 5, 5, 5, 3]
        assert [e for c in chunks for e in c] == whole
    packed = tmp_path / "a.csv.gz"
    packed.write_bytes(gzip.compress((tmp_path / "a.csv").read_bytes()))
    assert [e for c in read_chunks(packed, rows=4) for e in c] == read_examples(tmp_path / "a.csv")


def test_chunks_report_the_line_of_a_bad_row(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("text,label\na,pos\nb\n")
    with pytest.raises(DataError, match=r"bad.csv:3: expected 2 fields"):
        list(read_chunks(path, SourceSpec(), rows=1))


def test_prepared_shards_hold_the_in_memory_tokenization(tiny_hf_dir, tmp_path):
    model, _ = tiny_hf_dir
    train = write_csv(tmp_path / "train.csv", sentiment_rows(37))
    config = _config(model, train)
    manifest = prepare_shards(config, tmp_path / "out", shards=3, chunk_rows=8)

    tokenizer = run_tokenizer(load_checkpoint(config), config)
    examples = read_training_examples(str(train), config)
    task, _ = infer_run_task(examples, config)
    memory = encode_labelled(str(train), examples, config, tokenizer, task)

    loaded = Manifest.load(tmp_path / "out")
    assert loaded == manifest
    assert loaded.task == task
    assert [s.rows for s in loaded.shards] == [13, 12, 12]
    assert loaded.tokenizer_fingerprint == tokenizer_fingerprint(tokenizer)
    np.testing.assert_array_equal(
        np.sort(loaded.lengths()), np.sort(np.minimum(memory.encoded.packed_lengths, 16))
    )
    records = _records(tmp_path / "out", loaded)
    assert [r["row"] for r in records] == list(range(37))
    for r, ids, length, label in zip(
        records,
        memory.encoded.ids_a.to_list(),
        memory.encoded.packed_lengths,
        memory.labels,
        strict=True,
    ):
        assert r["ids_a"].tolist() == ids[:16]
        assert r["length"] == length
        assert r["label"] == label
    summary = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert summary["rows"] == 37 and sum(summary["lengths"].values()) == 37


def test_multi_label_pairs_through_the_cli(tiny_hf_dir, tmp_path, capsys):
    model, _ = tiny_hf_dir
    rows = [(text, text[::-1], labels) for text, labels in tagged_rows(20)]
    train = write_jsonl(tmp_path / "train.jsonl", rows, keys=("text", "pair", "label"))
    out = tmp_path / "prepared"
    args = ["prepare", str(train), str(out), "--model", str(model), "--max-seq-length", "16"]
    assert main([*args, "--text-pair-column", "pair", "--shards", "2"]) == 0
    assert json.loads(capsys.readouterr().out) == {"output": str(out), "rows": 20, "shards": 2}

    config = _config(model, train, text_pair_column="pair")
    tokenizer = run_tokenizer(load_checkpoint(config), config)
    examples = read_training_examples(str(train), config)
    task, _ = infer_run_task(examples, config)
    memory = encode_labelled(str(train), examples, config, tokenizer, task)
    manifest = Manifest.load(out)
    assert manifest.pair and manifest.task == task
    records = _records(out, manifest)
    assert [r["ids_b"].tolist() for r in records] == [
        ids[:16] for ids in memory.encoded.ids_b.to_list()
    ]
    np.testing.assert_array_equal(np.stack([r["label"] for r in records]), memory.labels)

    assert main([*args, "--text-pair-column", "pair"]) == 2  # a prepared set is not replaced
    assert "already holds a prepared data set" in capsys.readouterr().err


@pytest.mark.parametrize(
    "labels",
    [
        np.array([1, 0, 2], np.int32),  # single-label class ids
        np.array([[1, 0], [0, 1], [1, 1]], np.float32),  # multi-hot rows
        np.array([0.5, -1.25, 2.0], np.float32),  # standardised values
    ],
)
@pytest.mark.parametrize("pair", [False, True])
def test_records_serialized_in_the_graph_are_those_serialized_in_python(labels, pair):
    ids_a, ids_b = [[5, 6, 7, 8], [9], [10, 11]], [[1], [2, 3, 4, 5, 6], [7]]
    lengths, rows = [7, 5, 6], [10, 11, 12]
    batch = serialize_batch(
        tf.ragged.constant(ids_a),
        tf.ragged.constant(ids_b) if pair else None,
        tf.constant(labels),
        tf.constant(lengths, tf.int64),
        tf.constant(rows, tf.int64),
        3,
    ).numpy()
    for i, record in enumerate(batch):
        one = serialize(ids_a[i], ids_b[i] if pair else None, labels[i], lengths[i], rows[i], 3)
        assert tf.train.Example.FromString(record) == tf.train.Example.FromString(one)


def _second_pass_reads(monkeypatch, extra):
    """The file as the first pass read it, then with `extra` rows appended (it changed)."""
    real, calls = shard_writer._chunks, []

    def chunks(files, spec, chunk_rows):
        calls.append(files)
        yield from real(files, spec, chunk_rows)
        if len(calls) == 2:
            yield files[0], extra

    monkeypatch.setattr(shard_writer, "_chunks", chunks)


def test_a_file_that_grows_between_the_passes_is_refused_and_leaves_no_set(
    tiny_hf_dir, tmp_path, monkeypatch
):
    model, _ = tiny_hf_dir
    train = write_csv(tmp_path / "train.csv", sentiment_rows(12))
    _second_pass_reads(monkeypatch, [Example("good", None, "pos", 14)])
    with pytest.raises(DataError, match=r"changed while it was read \(12 rows, then more\)"):
        prepare_shards(_config(model, train), tmp_path / "out", shards=2)
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_data_error_of_the_second_pass_is_said_as_the_data_error_it_is(
    tiny_hf_dir, tmp_path, monkeypatch
):
    """A row read inside the tf.data pipeline's generator fails as itself (file and line),
    not as a TensorFlow error."""
    model, _ = tiny_hf_dir
    train = write_csv(tmp_path / "train.csv", sentiment_rows(12))
    _second_pass_reads(monkeypatch, [Example("good", None, "meh", 14)])
    with pytest.raises(DataError, match=r"train.csv:14: label 'meh' was not seen"):
        prepare_shards(_config(model, train), tmp_path / "out")
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_regression_task_prepares_the_standardised_targets_of_the_in_memory_path(
    tiny_hf_dir, tmp_path
):
    model, _ = tiny_hf_dir
    train = write_jsonl(tmp_path / "scores.jsonl", scored_rows(21))
    config = _config(model, train)
    manifest = prepare_shards(config, tmp_path / "out", shards=2, chunk_rows=4)

    tokenizer = run_tokenizer(load_checkpoint(config), config)
    examples = read_training_examples(str(train), config)
    task, _ = infer_run_task(examples, config)
    memory = encode_labelled(str(train), examples, config, tokenizer, task)
    assert manifest.task.kind == "regression"
    np.testing.assert_allclose([manifest.task.mean, manifest.task.std], [task.mean, task.std])
    records = _records(tmp_path / "out", manifest)
    assert [r["row"] for r in records] == list(range(21))
    np.testing.assert_allclose([r["label"] for r in records], memory.labels, rtol=1e-6)
    assert [r["ids_a"].tolist() for r in records] == [
        ids[:16] for ids in memory.encoded.ids_a.to_list()
    ]


def test_fewer_than_one_shard_is_refused_with_the_flag(tiny_hf_dir, tmp_path, capsys):
    model, _ = tiny_hf_dir
    train = write_csv(tmp_path / "train.csv", sentiment_rows(6))
    args = ["prepare", str(train), str(tmp_path / "out"), "--model", str(model)]
    assert main([*args, "--max-seq-length", "16", "--shards", "0"]) == 2
    error = capsys.readouterr().err
    assert "--shards 0: a prepared set needs at least one shard" in error
    assert "Traceback" not in error and not (tmp_path / "out").exists()


def test_an_output_that_is_a_file_a_run_directory_or_past_the_positions_is_refused(
    tiny_hf_dir, tmp_path, capsys
):
    model, _ = tiny_hf_dir
    train = write_csv(tmp_path / "train.csv", sentiment_rows(6))

    def prepare(out, length="16", *extra):
        args = ["prepare", str(train), str(out), "--model", str(model), "--max-seq-length"]
        code = main([*args, length, *extra])
        err = capsys.readouterr().err
        assert "Traceback" not in err
        return code, err

    (tmp_path / "a-file").write_text("mine")
    code, err = prepare(tmp_path / "a-file")
    assert code == 2 and f"OUT {tmp_path / 'a-file'} is a file, not a folder" in err
    assert (tmp_path / "a-file").read_text() == "mine"

    run = tmp_path / "run"  # a finished run directory
    run.mkdir()
    (run / "config.yaml").write_text("model: {}\n")
    (run / "metrics.json").write_text('{"status": "finished"}')
    for extra in ([], ["--overwrite"]):
        code, err = prepare(run, "16", *extra)
        assert code == 2 and "holds files that are not a prepared set's (config.yaml" in err
        assert sorted(p.name for p in run.iterdir()) == ["config.yaml", "metrics.json"]

    code, err = prepare(tmp_path / "long", "4096")
    assert code == 2 and "max_seq_length 4096 is longer than" in err
    assert "position table (max_position_embeddings 64)" in err
    assert not (tmp_path / "long").exists()

    code, _ = prepare(tmp_path / "set")  # a prepared set is rewritten with --overwrite
    assert code == 0 and prepare(tmp_path / "set", "16", "--overwrite")[0] == 0
