"""Training and evaluation data read from gs://, s3:// and ram:// as from a local file: the
same examples, and errors as clear for a missing object or bucket."""

from __future__ import annotations

import gzip
import io

import pytest

from bertfit import storage
from bertfit.data.sources import SourceSpec, read_examples
from bertfit.errors import DataError

CSV = 'text,label\n"a fine, quiet film",pos\nnot good,neg\n'
JSONL = '{"text": "a fine film", "label": "pos"}\n{"text": "dull", "label": "neg"}\n'


def _parquet_bytes() -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(pa.table({"text": ["a fine film", "dull"], "label": ["pos", "neg"]}), buffer)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("train.csv", CSV.encode()),
        ("train.jsonl", JSONL.encode()),
        # mtime=0: the bytes are part of the test id, which pytest-xdist workers must agree on
        ("train.csv.gz", gzip.compress(CSV.encode(), mtime=0)),
        ("train.parquet", None),
    ],
)
def test_a_remote_file_reads_as_the_same_local_file(remote, tmp_path, name, data):
    data = _parquet_bytes() if data is None else data
    url = storage.join(remote, "data", name)
    storage.write_bytes(url, data)
    (tmp_path / name).write_bytes(data)

    from_store = read_examples(url)
    local = read_examples(tmp_path / name)

    assert [(e.text, e.label, e.line) for e in from_store] == [
        (e.text, e.label, e.line) for e in local
    ]
    assert len(from_store) == 2


def test_a_missing_object_is_a_data_error_naming_the_url(remote):
    url = storage.join(remote, "nothing-here.csv")
    with pytest.raises(DataError, match="not found") as caught:
        read_examples(url)
    assert url in str(caught.value)
    assert caught.value.code == "data-file-not-found"


@pytest.mark.parametrize("protocol", ["gs", "s3"])
def test_a_missing_bucket_is_a_data_error_naming_the_url(object_stores, protocol):
    url = f"{protocol}://no-such-bucket-here/train.csv"
    with pytest.raises(DataError, match="no such bucket") as caught:
        read_examples(url)
    assert url in str(caught.value)


def test_a_folder_of_objects_is_refused_as_a_folder(remote):
    storage.write_bytes(storage.join(remote, "data", "part-0.csv"), CSV.encode())
    with pytest.raises(DataError, match="not found"):
        read_examples(storage.join(remote, "data") + ".csv")
    with pytest.raises(DataError, match="is a folder"):
        read_examples(storage.join(remote, "data"), SourceSpec(format="csv"))


def test_a_malformed_remote_file_names_the_url_and_line(remote):
    url = storage.join(remote, "bad.jsonl")
    storage.write_bytes(url, b'{"text": "fine", "label": "pos"}\n{"text": \n')
    with pytest.raises(DataError) as caught:
        read_examples(url)
    assert f"{url}:2" in str(caught.value)


def test_an_unknown_scheme_says_which_schemes_work():
    with pytest.raises(storage.StorageError, match="no file system serves nosuch://"):
        read_examples("nosuch://bucket/train.csv")


def test_a_train_glob_in_a_bucket_reads_every_match_in_name_order(remote):
    from bertfit.config import DataConfig, ModelConfig, RunConfig
    from bertfit.data.run_files import read_training_examples

    for part, label in (("b", "neg"), ("a", "pos")):
        text = f"text,label\n{part} one,{label}\n{part} two,{label}\n"
        storage.write_bytes(storage.join(remote, "data", f"train-{part}.csv"), text.encode())
    storage.write_bytes(storage.join(remote, "data", "other.csv"), CSV.encode())
    pattern = storage.join(remote, "data", "train-*.csv")
    config = RunConfig(model=ModelConfig(name="m"), data=DataConfig(train=pattern))

    rows = read_training_examples(pattern, config)

    assert [e.text for e in rows] == ["a one", "a two", "b one", "b two"]
    with pytest.raises(DataError, match="matches no file"):
        read_training_examples(storage.join(remote, "nothing-*.csv"), config)
