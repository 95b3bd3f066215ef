"""`bertfit prepare` reading data from gs://, s3:// and ram:// (files and globs) and writing
the prepared set to gs:// and ram://, whole or not at all; s3:// as the output (or as a
prepared set to train on) refused with the reason (issue 33, item 3)."""

from __future__ import annotations

import gzip
import io
import json

import pytest

from bertfit import storage
from bertfit.cli import main
from bertfit.data import shard_writer
from bertfit.data.chunks import read_chunks
from bertfit.data.sources import read_examples
from bertfit.data.tfrecord import Manifest, is_prepared
from bertfit.errors import DataError
from tests.tiny import sentiment_rows, write_csv


class Killed(BaseException):
    """The process dying (SIGKILL) at that point: nothing after it runs, no handler sees it."""


def _prepare(model, data, out, *extra) -> list[str]:
    return ["prepare", data, out, "--model", str(model), "--max-seq-length", "16", *extra]


def _local_set(model, tmp_path, csv, shards: int) -> tuple[Manifest, dict[str, bytes]]:
    """The set prepared from a local copy: what every remote prepare must equal."""
    out = tmp_path / "local-prepared"
    assert main(_prepare(model, str(csv), str(out), "--shards", str(shards))) == 0
    manifest = Manifest.load(out)
    return manifest, {s.file: (out / s.file).read_bytes() for s in manifest.shards}


def _remote_files(url: str) -> dict[str, bytes]:
    return {name: storage.read_bytes(storage.join(url, name)) for name in storage.list_files(url)}


@pytest.mark.parametrize("output", ["gs", "ram"])
def test_a_remote_file_prepares_into_a_bucket_as_a_local_file_does(
    tiny_hf_dir, tmp_path, remote, output, object_stores, capsys
):
    """DATA on gs://, s3:// or ram:// (gzip), OUT on gs:// or ram://: the same shards, byte for
    byte, and the same manifest as a local prepare of the same file."""
    model, _ = tiny_hf_dir
    csv = write_csv(tmp_path / "train.csv", sentiment_rows(41))
    data = storage.join(remote, "data", "train.csv.gz")
    storage.write_bytes(data, gzip.compress(csv.read_bytes(), mtime=0))
    out = f"{output}://{remote.partition('://')[2]}/prepared"
    local, local_shards = _local_set(model, tmp_path, csv, shards=3)
    capsys.readouterr()

    assert main(_prepare(model, data, out, "--shards", "3")) == 0
    assert json.loads(capsys.readouterr().out) == {"output": out, "rows": 41, "shards": 3}
    assert is_prepared(out)
    manifest = Manifest.load(out)
    assert manifest.source == data
    assert (manifest.task, manifest.shards) == (local.task, local.shards)
    files = _remote_files(out)
    assert files.pop("manifest.json")
    assert files == local_shards  # nothing else: no staging file is left behind


def test_a_glob_in_a_bucket_prepares_every_match_in_name_order(
    tiny_hf_dir, tmp_path, remote, capsys
):
    model, _ = tiny_hf_dir
    rows = sentiment_rows(30)
    whole = write_csv(tmp_path / "train.csv", rows)
    for i, part in enumerate((rows[:12], rows[12:20], rows[20:])):
        part_csv = write_csv(tmp_path / f"part-{i}.csv", part)
        storage.write_bytes(storage.join(remote, f"data/train-{i}.csv"), part_csv.read_bytes())
    storage.write_bytes(storage.join(remote, "data/other.csv"), whole.read_bytes())
    out = str(tmp_path / "from-glob")
    local, local_shards = _local_set(model, tmp_path, whole, shards=2)

    assert (
        main(_prepare(model, storage.join(remote, "data/train-*.csv"), out, "--shards", "2")) == 0
    )
    manifest = Manifest.load(out)
    assert manifest.rows == 30 and manifest.shards == local.shards
    assert {s.file: (tmp_path / "from-glob" / s.file).read_bytes() for s in manifest.shards} == (
        local_shards
    )

    no_match = _prepare(model, storage.join(remote, "data/none-*.csv"), out + "2")
    assert main(no_match) == 2
    assert "matches no file" in capsys.readouterr().err


def test_an_s3_output_is_refused_before_anything_is_read_or_written(
    tiny_hf_dir, tmp_path, s3, capsys
):
    model, _ = tiny_hf_dir
    csv = write_csv(tmp_path / "train.csv", sentiment_rows(10))
    assert main(_prepare(model, str(csv), storage.join(s3, "prepared"))) == 2
    error = capsys.readouterr().err
    assert "has no s3:// file system" in error and "Prepare into gs:// or a local" in error
    assert "Traceback" not in error
    assert storage.list_files(s3) == []


def test_a_prepared_set_on_s3_is_refused_for_training(tiny_hf_dir, tmp_path, s3, capsys):
    """Copied to s3:// by hand, the set is found (its manifest exists) and refused with the
    reason, before any training."""
    model, _ = tiny_hf_dir
    csv = write_csv(tmp_path / "train.csv", sentiment_rows(10))
    local = tmp_path / "prepared"
    assert main(_prepare(model, str(csv), str(local))) == 0
    url = storage.join(s3, "prepared")
    for file in local.iterdir():
        storage.put_file(file, storage.join(url, file.name))
    assert is_prepared(url)
    with pytest.raises(DataError, match=r"has no s3:// file system, so training could not"):
        Manifest.load(url)

    train = ["train", "--model", str(model), "--max-seq-length", "16", "--train", url]
    assert main([*train, "--output-dir", str(tmp_path / "run"), "--epochs", "1"]) == 2
    error = capsys.readouterr().err
    assert "has no s3:// file system" in error and "Traceback" not in error


def test_a_killed_upload_leaves_no_manifest_and_the_set_is_refused_as_unfinished(
    tiny_hf_dir, tmp_path, gcs, monkeypatch
):
    """The third shard's upload dies: two whole shards, no manifest; reading the folder as
    data says it is an unfinished prepare; prepared again (with an old manifest removed first
    on --overwrite) the folder holds exactly the new set."""
    model, _ = tiny_hf_dir
    csv = write_csv(tmp_path / "train.csv", sentiment_rows(40))
    out = storage.join(gcs, "prepared")
    assert main(_prepare(model, str(csv), out, "--shards", "2")) == 0

    uploads = []
    real_put = storage.put_file

    def dying_put(local, url):
        if len(uploads) == 2:
            raise Killed  # the process dies mid-prepare
        uploads.append(url)
        real_put(local, url)

    monkeypatch.setattr(storage, "put_file", dying_put)
    with pytest.raises(Killed):
        main(_prepare(model, str(csv), out, "--shards", "4", "--overwrite"))
    assert storage.list_files(out) == [
        "shard-00000-of-00004.tfrecord",
        "shard-00001-of-00004.tfrecord",
    ]
    assert not is_prepared(out)
    with pytest.raises(
        DataError, match="no manifest.json: a `bertfit prepare` that did not finish"
    ):
        read_examples(out)

    monkeypatch.setattr(storage, "put_file", real_put)
    assert main(_prepare(model, str(csv), out, "--shards", "3")) == 0
    assert storage.list_files(out) == [
        "manifest.json",
        *(f"shard-0000{i}-of-00003.tfrecord" for i in range(3)),
    ]
    assert Manifest.load(out).rows == 40


def test_an_unfinished_local_set_is_refused_as_unfinished(tiny_hf_dir, tmp_path, monkeypatch):
    model, _ = tiny_hf_dir
    csv = write_csv(tmp_path / "train.csv", sentiment_rows(20))
    out = tmp_path / "prepared"
    real_commit = shard_writer.Destination.commit

    def dying_commit(self, name):
        if name.startswith("shard-00001"):
            raise Killed
        real_commit(self, name)

    monkeypatch.setattr(shard_writer.Destination, "commit", dying_commit)
    with pytest.raises(Killed):
        main(_prepare(model, str(csv), str(out), "--shards", "2"))
    assert not is_prepared(out)
    with pytest.raises(DataError, match="no manifest.json"):
        read_examples(out)


def test_a_shard_larger_than_one_simple_upload_arrives_whole(remote, tmp_path):
    """gcsfs sends files of 5 MiB or more as a resumable upload (the object appears when it
    is finalised): `put_file` streams such a file and the object holds every byte."""
    data = bytes(range(256)) * (6 * 2**20 // 256 + 7)
    local = tmp_path / "big.tfrecord"
    local.write_bytes(data)
    url = storage.join(remote, "big.tfrecord")
    storage.put_file(local, url)
    assert storage.read_bytes(url) == data
    with storage.open_read(url) as f:
        f.seek(6 * 2**20)
        assert f.read(5) == data[6 * 2**20 : 6 * 2**20 + 5]


@pytest.mark.parametrize("name", ["train.jsonl.gz", "train.parquet", "train.tsv"])
def test_chunks_of_a_remote_file_are_the_rows_of_the_local_file(remote, tmp_path, name):
    """Streamed from the store (never read whole), in chunks of 3 rows: the same examples,
    lines included, as the local file read at once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = sentiment_rows(8)
    local = tmp_path / name
    if name.endswith(".parquet"):
        table = pa.table({"text": [t for t, _ in rows], "label": [label for _, label in rows]})
        pq.write_table(table, local, row_group_size=3)
    elif name.endswith(".tsv"):
        local.write_text("text\tlabel\n" + "".join(f"{t}\t{label}\n" for t, label in rows))
    else:
        lines = "".join(json.dumps({"text": t, "label": label}) + "\n" for t, label in rows)
        local.write_bytes(gzip.compress(lines.encode(), mtime=0))
    url = storage.join(remote, "data", name)
    storage.put_file(local, url)

    chunks = list(read_chunks(url, rows=3))
    assert [len(c) for c in chunks] == [3, 3, 2]
    assert [e for c in chunks for e in c] == read_examples(local)


def test_a_store_clients_own_error_is_a_data_error_naming_the_url(monkeypatch):
    """Permissions or the network failing in the client (gcsfs and s3fs raise their own
    exception types) are said as the URL that cannot be read, not as a traceback."""

    class Forbidden(Exception):
        pass

    class Failing(io.BytesIO):
        def read(self, *size):
            raise Forbidden("403 caller does not have storage.objects.get access")

    url = "gs://bucket/data/train.csv"
    monkeypatch.setattr(storage, "exists", lambda u: True)
    monkeypatch.setattr(storage, "isdir", lambda u: False)
    monkeypatch.setattr(storage, "open_read", lambda u: Failing())
    with pytest.raises(
        DataError, match=r"^gs://bucket/data/train.csv: cannot be read: Forbidden: 403"
    ):
        list(read_chunks(url))

    def refused(u):
        raise Forbidden("403 on the bucket")

    monkeypatch.setattr(storage, "exists", refused)
    with pytest.raises(DataError, match=r"cannot be read: Forbidden: 403 on the bucket"):
        list(read_chunks(url))


def test_prepare_into_a_missing_bucket_says_so_and_names_the_output(
    tiny_hf_dir, tmp_path, object_stores, capsys
):
    model, _ = tiny_hf_dir
    csv = write_csv(tmp_path / "train.csv", sentiment_rows(10))
    out = "gs://no-such-bucket-of-bertfit/prepared"
    assert main(_prepare(model, str(csv), out)) == 2
    error = capsys.readouterr().err
    assert f"{out}: cannot be written" in error and "check that the bucket exists" in error
    assert "Traceback" not in error
