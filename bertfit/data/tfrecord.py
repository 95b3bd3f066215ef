"""Tokenized training data as TFRecord shards and their manifest (`bertfit prepare` writes them,
`bertfit train` streams them: `bertfit.data.streaming`).

A prepared directory holds `shard-00000-of-0000K.tfrecord` files and `manifest.json`. Each record
is a `tf.train.Example` of one row:

- `ids_a` (int64 list): the WordPiece ids of the text, without special tokens, at most
  max_seq_length of them (packing truncates further, exactly as the in-memory path does);
- `ids_b` (int64 list): those of the text pair, present only in pair data;
- `label`: the target: the class id (int64 [1]), the multi-hot row (float [labels]) or the
  standardised value (float [1]), as `Task.targets` computes it;
- `length` (int64 [1]): the packed length, special tokens included, before truncation;
- `row` (int64 [1]): the row's index in the prepared data (0-based, over all shards).

The manifest (JSON) says what the shards hold: the task (labels.json's content), the model and
max_seq_length they were prepared for, the tokenizer's fingerprint (`tokenizer_fingerprint`: a
digest of its saved files: a run with another tokenizer refuses the shards), and per shard its
file, rows and length histogram (packed lengths clipped to max_seq_length). The manifest is
written last, atomically: a directory without one is not a prepared set.

The manifest is read without TensorFlow; the records are TensorFlow's (imported where they are
written, read or checked).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bertfit import storage
from bertfit.atomic import write_text_atomic
from bertfit.data.tasks import MULTI_LABEL, SINGLE_LABEL, Task
from bertfit.errors import DataError

if TYPE_CHECKING:
    import tensorflow as tf

MANIFEST = "manifest.json"
FORMAT = "bertfit-tfrecord-1"
IDS_A, IDS_B, LABEL, LENGTH, ROW = "ids_a", "ids_b", "label", "length", "row"


def tokenizer_fingerprint(tokenizer) -> str:
    """A sha256 digest of the files `tokenizer.save` writes (names and contents): two
    tokenizers with one fingerprint turn every text into the same ids."""
    digest = hashlib.sha256()
    with tempfile.TemporaryDirectory() as folder:
        tokenizer.save(folder)
        for file in sorted(Path(folder).rglob("*")):
            if file.is_file():
                digest.update(file.relative_to(folder).as_posix().encode() + b"\0")
                digest.update(file.read_bytes() + b"\0")
    return digest.hexdigest()


@dataclasses.dataclass(frozen=True)
class Shard:
    """One TFRecord file of a prepared set: its name in the directory, rows, length
    histogram ({packed length clipped to max_seq_length: rows}) and size in bytes (None in a
    manifest written before sizes were kept)."""

    file: str
    rows: int
    lengths: dict[int, int]
    bytes: int | None = None


@dataclasses.dataclass(frozen=True)
class Manifest:
    """What a prepared directory holds; see the module docstring."""

    source: str
    model: str
    max_seq_length: int
    tokenizer_fingerprint: str
    task: Task
    pair: bool
    shards: tuple[Shard, ...]

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)

    def histogram(self) -> dict[int, int]:
        """{packed length clipped to max_seq_length: rows} over every shard."""
        return _total(self.shards)

    def lengths(self, shards: list[int] | None = None) -> np.ndarray:
        """Every row's packed length (of the shards given by index; default all), from the
        histograms: what `resolve_buckets` chooses buckets from."""
        chosen = self.shards if shards is None else [self.shards[i] for i in shards]
        values = [(length, count) for s in chosen for length, count in s.lengths.items()]
        if not values:
            return np.zeros(0, np.int64)
        return np.repeat([v for v, _ in values], [c for _, c in values]).astype(np.int64)

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "source": self.source,
            "model": self.model,
            "max_seq_length": self.max_seq_length,
            "tokenizer_fingerprint": self.tokenizer_fingerprint,
            "task": self.task.to_dict(),
            "pair": self.pair,
            "rows": self.rows,
            "lengths": {str(k): v for k, v in sorted(_total(self.shards).items())},
            "shards": [
                {
                    "file": s.file,
                    "rows": s.rows,
                    "lengths": {str(k): v for k, v in sorted(s.lengths.items())},
                    **({} if s.bytes is None else {"bytes": s.bytes}),
                }
                for s in self.shards
            ],
        }

    def save(self, directory: str | os.PathLike) -> None:
        """Writes manifest.json whole (renamed into place; one upload at a URL)."""
        text = json.dumps(self.to_dict(), indent=1) + "\n"
        if storage.is_url(directory):
            storage.write_text(manifest_path(directory), text)
        else:
            write_text_atomic(Path(directory) / MANIFEST, text)

    @classmethod
    def load(cls, directory: str | os.PathLike) -> Manifest:
        """The manifest of a prepared directory: a local path, or a URL (`bertfit.storage`)
        whose scheme TensorFlow reads (`check_tensorflow_reads`)."""
        check_tensorflow_reads(directory)
        file = manifest_path(directory)
        try:
            values = json.loads(read_manifest(directory).decode("utf-8"))
            if values.get("format") != FORMAT:
                raise ValueError(f"format {values.get('format')!r}, expected {FORMAT!r}")
            return cls(
                source=values["source"],
                model=values["model"],
                max_seq_length=int(values["max_seq_length"]),
                tokenizer_fingerprint=values["tokenizer_fingerprint"],
                task=Task.from_dict(values["task"], str(file)),
                pair=bool(values["pair"]),
                shards=tuple(
                    Shard(
                        s["file"],
                        int(s["rows"]),
                        {int(k): v for k, v in s["lengths"].items()},
                        None if s.get("bytes") is None else int(s["bytes"]),
                    )
                    for s in values["shards"]
                ),
            )
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise DataError(
                f"is not a manifest `bertfit prepare` wrote ({e}); prepare the data again",
                path=str(file),
                code="data-unreadable",
            ) from None

    def paths(self, directory: str | os.PathLike) -> list[str]:
        """The shards' paths (URLs in a directory at a URL)."""
        if storage.is_url(directory):
            return [storage.join(directory, s.file) for s in self.shards]
        return [str(Path(directory) / s.file) for s in self.shards]


DAMAGED_FIX = (
    "prepare the data again (bertfit prepare ... --overwrite), or copy the set whole again; "
    "the run's latest checkpoint is kept, and the same command resumes it once the shards "
    "are whole"
)


def check_shards(manifest: Manifest, directory: str | os.PathLike) -> None:
    """Every shard the manifest names is there at the size it was written (a partial copy or
    upload, a truncated or deleted file), checked before training: stat calls, no reading.

    Raises:
        DataError: the shard, what is wrong and the fix (`DAMAGED_FIX`).
    """
    import tensorflow as tf

    for shard, path in zip(manifest.shards, manifest.paths(directory), strict=True):
        try:
            size = tf.io.gfile.stat(path).length
        except tf.errors.NotFoundError:
            raise DataError(
                f"the shard is missing (the manifest lists it, {shard.rows} rows); " + DAMAGED_FIX,
                path=storage.path_text(path),
                code="data-shard-damaged",
            ) from None
        if shard.bytes is not None and size != shard.bytes:
            raise DataError(
                f"the shard is {size} bytes, but {shard.bytes} were written (truncated or "
                f"changed since `bertfit prepare`); " + DAMAGED_FIX,
                path=storage.path_text(path),
                code="data-shard-damaged",
            )


def damaged_shard(manifest: Manifest, directory: str | os.PathLike, error: Exception) -> DataError:
    """What a TensorFlow read error (`DataLossError`: a bad checksum or a cut record;
    `OutOfRangeError`: fewer records than planned) met while streaming means: each shard is
    read through (checksums verified) and its records counted against the manifest, and the
    first that differs is named. Called only once streaming failed."""
    import tensorflow as tf

    for shard, path in zip(manifest.shards, manifest.paths(directory), strict=True):
        records = tf.data.TFRecordDataset(path)
        try:
            count = int(records.reduce(np.int64(0), lambda n, _: n + 1))
        except (tf.errors.DataLossError, tf.errors.OutOfRangeError, tf.errors.NotFoundError) as e:
            what = str(getattr(e, "message", e)).splitlines()[0][:200]
            return DataError(
                f"the shard cannot be read ({type(e).__name__}: {what}); " + DAMAGED_FIX,
                path=storage.path_text(path),
                code="data-shard-damaged",
            )
        if count != shard.rows:
            return DataError(
                f"the shard holds {count} records, the manifest {shard.rows}; " + DAMAGED_FIX,
                path=storage.path_text(path),
                code="data-shard-damaged",
            )
    what = str(getattr(error, "message", error)).splitlines()[0][:200]
    return DataError(
        f"streaming the prepared set failed ({type(error).__name__}: {what}), though every "
        "shard reads whole now (was one being rewritten?); " + DAMAGED_FIX,
        path=storage.path_text(directory),
        code="data-shard-damaged",
    )


def check_tensorflow_reads(directory: str | os.PathLike) -> None:
    """Training streams the shards with `tf.data`, which reads only TensorFlow's own file
    systems: a prepared set at a URL of another scheme (`s3://`: TF 2.21 has none) is refused
    here, before anything is written or trained.

    Raises:
        DataError: the scheme, why, and where to put the set instead.
    """
    if storage.is_url(directory) and not storage.tensorflow_reads(directory):
        import tensorflow as tf

        scheme = os.fspath(directory).partition("://")[0]
        raise DataError(
            f"TensorFlow {tf.__version__} has no {scheme}:// file system, so training could "
            "not stream TFRecord shards from there (tf.data reads local paths, gs:// and "
            "ram://). Prepare into gs:// or a local directory, or copy the set there (e.g. "
            "`aws s3 cp --recursive` to a local directory). Data files (CSV, JSONL, Parquet) "
            f"are still read from {scheme}:// by `prepare` and `train`",
            path=storage.path_text(directory),
            code="data-unreadable",
        )


def manifest_path(directory: str | os.PathLike) -> str:
    if storage.is_url(directory):
        return storage.join(directory, MANIFEST)
    return str(Path(directory) / MANIFEST)


def read_manifest(directory: str | os.PathLike) -> bytes:
    """The manifest's bytes, from a local directory or a URL."""
    if storage.is_url(directory):
        return storage.read_bytes(manifest_path(directory))
    return Path(manifest_path(directory)).read_bytes()


def _total(shards) -> dict[int, int]:
    total: dict[int, int] = {}
    for s in shards:
        for length, count in s.lengths.items():
            total[length] = total.get(length, 0) + count
    return total


def is_prepared(path: str | os.PathLike | None) -> bool:
    """Whether `path` is a directory `bertfit prepare` wrote (or its manifest.json), local or
    at a URL (`gs://`, `ram://`, ...)."""
    if path is None:
        return False
    if storage.is_url(path):
        return storage.exists(manifest_path(prepared_directory(path)))
    path = Path(path)
    return (path / MANIFEST).is_file() or (path.name == MANIFEST and path.is_file())


def prepared_directory(path: str | os.PathLike) -> str | Path:
    """The directory of a prepared set named by its directory or its manifest."""
    if storage.is_url(path):
        url = str(path).rstrip("/")
        return url[: -len(MANIFEST) - 1] if storage.name_of(url) == MANIFEST else url
    path = Path(path)
    return path.parent if path.name == MANIFEST else path


# ---- records ----


def _int64(values) -> tf.train.Feature:
    import tensorflow as tf

    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def _float(values) -> tf.train.Feature:
    import tensorflow as tf

    return tf.train.Feature(float_list=tf.train.FloatList(value=values))


def serialize(ids_a, ids_b, label: np.ndarray, length: int, row: int, max_seq_length: int) -> bytes:
    """One row as a serialized `tf.train.Example` (see the module docstring)."""
    import tensorflow as tf

    label = np.atleast_1d(label)
    features = {
        IDS_A: _int64(ids_a[:max_seq_length]),
        LABEL: _int64(label) if label.dtype.kind in "iu" else _float(label),
        LENGTH: _int64([int(length)]),
        ROW: _int64([int(row)]),
    }
    if ids_b is not None:
        features[IDS_B] = _int64(ids_b[:max_seq_length])
    example = tf.train.Example(features=tf.train.Features(feature=features))
    return example.SerializeToString()


def serialize_batch(
    ids_a: tf.RaggedTensor,
    ids_b: tf.RaggedTensor | None,
    labels: tf.Tensor,
    lengths: tf.Tensor,
    rows: tf.Tensor,
    max_seq_length: int,
) -> tf.Tensor:
    """`serialize` of a batch of rows, in the graph (`tf.io.encode_proto`): string [n], the
    same `tf.train.Example`s that `serialize` writes one by one in Python.

    Args:
        ids_a, ids_b: ragged [n, None] token ids (ids_b None: no pairs).
        labels: int [n] class ids, or float [n] / [n, labels] targets.
        lengths, rows: [n] packed lengths and row indices.
        max_seq_length: ids beyond it are not stored.
    """
    import tensorflow as tf

    n = tf.shape(lengths)[0]
    int_label = labels.dtype.is_integer
    features = {
        IDS_A: _ragged_feature(ids_a[:, :max_seq_length], "int64_list"),
        LABEL: _dense_feature(labels, "int64_list" if int_label else "float_list"),
        LENGTH: _dense_feature(lengths, "int64_list"),
        ROW: _dense_feature(rows, "int64_list"),
    }
    if ids_b is not None:
        features[IDS_B] = _ragged_feature(ids_b[:, :max_seq_length], "int64_list")
    entries = [
        _encode("tensorflow.Features.FeatureEntry", {"key": tf.fill([n], key), "value": value})
        for key, value in features.items()
    ]
    listed = _encode("tensorflow.Features", {"feature": tf.stack(entries, axis=1)})
    return _encode("tensorflow.Example", {"features": listed})


def _encode(message: str, fields: dict[str, tf.Tensor], sizes: tf.Tensor | None = None):
    """One serialized `message` per row; each field's values [n] (one each) or [n, k] (the
    first `sizes` [n] of each row's k; all k when None)."""
    import tensorflow as tf

    values = [v if v.shape.rank > 1 else v[:, tf.newaxis] for v in fields.values()]
    n = tf.shape(values[0])[0]
    if sizes is None:
        counts = tf.stack([tf.fill([n], tf.shape(v)[1]) for v in values], axis=1)
    else:
        counts = tf.cast(sizes, tf.int32)[:, tf.newaxis]
    return tf.io.encode_proto(counts, values, list(fields), message)


def _ragged_feature(ids: tf.RaggedTensor, kind: str) -> tf.Tensor:
    import tensorflow as tf

    ids = tf.cast(ids, tf.int64)
    listed = _encode("tensorflow.Int64List", {"value": ids.to_tensor()}, ids.row_lengths())
    return _encode("tensorflow.Feature", {kind: listed})


def _dense_feature(values: tf.Tensor, kind: str) -> tf.Tensor:
    import tensorflow as tf

    if kind == "int64_list":
        message, values = "tensorflow.Int64List", tf.cast(values, tf.int64)
    else:
        message, values = "tensorflow.FloatList", tf.cast(values, tf.float32)
    return _encode("tensorflow.Feature", {kind: _encode(message, {"value": values})})


def feature_spec(task: Task, pair: bool) -> dict:
    """The `tf.io.parse_single_example` spec of a prepared set's records."""
    import tensorflow as tf

    if task.kind == SINGLE_LABEL:
        label = tf.io.FixedLenFeature([], tf.int64)
    elif task.kind == MULTI_LABEL:
        label = tf.io.FixedLenFeature([len(task.labels)], tf.float32)
    else:
        label = tf.io.FixedLenFeature([], tf.float32)
    spec = {
        IDS_A: tf.io.VarLenFeature(tf.int64),
        LABEL: label,
        LENGTH: tf.io.FixedLenFeature([], tf.int64),
        ROW: tf.io.FixedLenFeature([], tf.int64),
    }
    if pair:
        spec[IDS_B] = tf.io.VarLenFeature(tf.int64)
    return spec


def parser(task: Task, pair: bool):
    """A function from a serialized record to {ids_a, ids_b?: int32 [None], label (the
    targets' dtype: int32 for single-label), length, row: int64}."""
    import tensorflow as tf

    spec = feature_spec(task, pair)

    @tf.autograph.experimental.do_not_convert
    def parse(record):
        values = tf.io.parse_single_example(record, spec)
        out = {
            IDS_A: tf.cast(tf.sparse.to_dense(values[IDS_A]), tf.int32),
            LABEL: values[LABEL],
            LENGTH: values[LENGTH],
            ROW: values[ROW],
        }
        if task.kind == SINGLE_LABEL:
            out[LABEL] = tf.cast(values[LABEL], tf.int32)
        if pair:
            out[IDS_B] = tf.cast(tf.sparse.to_dense(values[IDS_B]), tf.int32)
        return out

    return parse
