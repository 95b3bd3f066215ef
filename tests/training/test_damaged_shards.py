"""A prepared set damaged after `bertfit prepare` (a partial copy, a flipped bit, a lost file):
refused before training when the sizes show it, else stopped with the shard named and the run
marked failed, never a raw `DataLossError` / `End of sequence`."""

from __future__ import annotations

import json

import pytest

from bertfit.cli import main
from bertfit.data.tfrecord import Manifest, damaged_shard
from tests.tiny import sentiment_rows, train_args, write_csv

SHARD = "shard-00001-of-00002.tfrecord"


@pytest.fixture
def prepared(trainable_hf_dir, tmp_path):
    train = write_csv(tmp_path / "train.csv", sentiment_rows(40, seed=5))
    args = ["prepare", str(train), str(tmp_path / "prepared"), "--model", str(trainable_hf_dir)]
    assert main([*args, "--max-seq-length", "16", "--shards", "2"]) == 0
    return tmp_path / "prepared"


def test_a_truncated_or_missing_shard_is_refused_before_training(
    trainable_hf_dir, prepared, tmp_path, capsys
):
    shard = prepared / SHARD
    written = Manifest.load(prepared).shards[1].bytes
    assert written == shard.stat().st_size
    shard.write_bytes(shard.read_bytes()[: written // 2])  # a partial copy
    args = train_args(trainable_hf_dir, prepared, tmp_path / "run", buckets="8,16")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{shard}: the shard is {written // 2} bytes, but {written} were written" in err
    assert "prepare the data again" in err and "Traceback" not in err
    assert not (tmp_path / "run" / "config.yaml").exists()
    shard.unlink()
    assert main(args) == 2
    assert f"{shard}: the shard is missing" in capsys.readouterr().err


@pytest.mark.slow
def test_a_corrupted_shard_stops_the_run_naming_it_and_marks_it_failed(
    trainable_hf_dir, prepared, tmp_path, capsys
):
    shard = prepared / SHARD
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one bit flipped: the record's checksum fails
    shard.write_bytes(bytes(data))
    run = tmp_path / "run"
    assert main(train_args(trainable_hf_dir, prepared, run, buckets="8,16")) == 2
    err = capsys.readouterr().err
    assert f"{shard}: the shard cannot be read (DataLossError" in err, err
    assert "Traceback" not in err and "End of sequence" not in err
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "failed" and SHARD in metrics["error"]


def test_fewer_records_than_the_manifest_says_is_named(prepared):
    """An old manifest (no sizes) and a shard cut at a record boundary: `End of sequence`
    while streaming, explained by counting each shard's records."""
    manifest = Manifest.load(prepared)
    shard = prepared / SHARD
    records = manifest.shards[1].rows
    # TFRecord framing: 8-byte length, 4-byte CRC, data, 4-byte CRC; keep all but the last
    data, kept, offset = shard.read_bytes(), 0, 0
    while kept < records - 1:
        offset += 16 + int.from_bytes(data[offset : offset + 8], "little")
        kept += 1
    shard.write_bytes(data[:offset])
    error = damaged_shard(manifest, prepared, RuntimeError("End of sequence"))
    assert error.code == "data-shard-damaged"
    assert str(error).startswith(f"{shard}: the shard holds {records - 1} records, the manifest")
    assert damaged_shard(Manifest.load(prepared), prepared, RuntimeError("x")).path == str(shard)


def test_check_names_a_truncated_shard_as_train_does(trainable_hf_dir, prepared, capsys):
    shard = prepared / SHARD
    shard.write_bytes(shard.read_bytes()[:100])
    args = train_args(trainable_hf_dir, prepared, command="check", buckets="8,16", quiet=None)
    assert main(args) == 2
    out = capsys.readouterr().out
    assert "data-shard-damaged" in out and SHARD in out, out
