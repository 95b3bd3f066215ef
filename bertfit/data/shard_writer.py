"""Writing a data file as tokenized TFRecord shards and their manifest (`bertfit.data.tfrecord`),
holding one chunk of rows at a time: what `bertfit prepare` and `train --streaming` run.

The file is read twice, in chunks (`bertfit.data.chunks`):
1. the labels: the task is inferred from one row per distinct label (the checks of
   `infer_task` see each label's first line); a regression task's mean and standard deviation
   are summed over every row;
2. the texts: each chunk is tokenized with the given tokenizer and its rows written in order,
   rows [s*n/K, (s+1)*n/K) to shard s.

The file may be a glob (its matches in name order) and at a URL (streamed: `bertfit.storage`);
the output a local directory or a URL that TensorFlow reads (`gs://`, `ram://`: training
streams the shards with tf.data, and TF 2.21 has no `s3://`). Whole or nothing (`Destination`):
a shard becomes visible under its name only when whole (renamed locally, one upload at a URL),
an old manifest is removed before anything is written and the new one written last, so a
directory with a manifest is a whole prepared set and one without is refused as unfinished.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import math
import os
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import tensorflow as tf

from bertfit import storage
from bertfit.data.chunks import CHUNK_ROWS, read_chunks, source_files
from bertfit.data.sources import Example, SourceSpec
from bertfit.data.tasks import (
    MULTI_LABEL,
    REGRESSION,
    SINGLE_LABEL,
    Task,
    infer_task,
    normalize_label,
    parse_number,
)
from bertfit.data.tfrecord import (
    MANIFEST,
    Manifest,
    Shard,
    check_tensorflow_reads,
    manifest_path,
    serialize_batch,
    tokenizer_fingerprint,
)
from bertfit.errors import ConfigError, DataError
from bertfit.paths import check_output_dir

# What a prepared folder holds: the manifest, the shards, a killed run's staging files.
_PREPARED_FILE = re.compile(r"manifest\.json|\.?shard-\d+-of-\d+\.tfrecord(\.tmp)?")
ROWS_PER_SHARD = 100_000  # the default number of shards: one per this many rows
MAX_DEFAULT_SHARDS = 256


@dataclasses.dataclass(frozen=True)
class ShardSource:
    """What to prepare: the file, how to read it, the task asked for (None: inferred) and
    the label separator, and the model (its name, for the manifest) and max_seq_length."""

    path: str
    spec: SourceSpec
    model: str
    max_seq_length: int
    task: str | None = None
    separator: str | None = None


@dataclasses.dataclass
class LabelScan:
    """What the first pass keeps: one example per distinct label, the rows, and the sums
    a regression task's mean and standard deviation need."""

    firsts: dict
    rows: int = 0
    count: int = 0
    total: float = 0.0
    squares: float = 0.0

    def add(self, chunk: list[Example]) -> None:
        for e in chunk:
            self.rows += 1
            if e.label not in self.firsts:
                self.firsts[e.label] = Example("", None, e.label, e.line)
            value = parse_number(normalize_label(e.label)) if isinstance(e.label, str) else None
            if value is not None:
                self.count += 1
                self.total += value
                self.squares += value * value

    def regression_moments(self) -> tuple[float, float]:
        mean = self.total / max(self.count, 1)
        return mean, math.sqrt(max(self.squares / max(self.count, 1) - mean * mean, 0.0))


def default_shards(rows: int) -> int:
    return max(1, min(MAX_DEFAULT_SHARDS, math.ceil(rows / ROWS_PER_SHARD)))


def write_prepared(
    source: ShardSource,
    output: str | os.PathLike,
    tokenizer,
    *,
    shards: int | None = None,
    chunk_rows: int = CHUNK_ROWS,
    overwrite: bool = False,
) -> Manifest:
    """Tokenizes `source` with `tokenizer` into TFRecord shards and a manifest in `output`.

    Args:
        source: the file (or glob: its matches in name order) and how to read it; local or
            at a URL.
        output: the directory to write (created; one with a manifest needs `overwrite`): a
            local path or a URL that TensorFlow reads (`gs://`, `ram://`; not `s3://`).
        tokenizer: the model's tokenizer.
        shards: how many shards (default: one per 100,000 rows, at most 256; never more
            than the rows).
        chunk_rows: rows held in memory at a time.

    Raises:
        DataError: the file's problems, as `train` reports them; an `output` already prepared;
            an `output` TensorFlow cannot read.
        ConfigError: fewer than one shard asked for.
    """
    if shards is not None and shards < 1:
        raise ConfigError(f"--shards {shards}: a prepared set needs at least one shard.")
    check_tensorflow_reads(output)
    files = source_files(source.path)
    if not storage.is_url(output):  # a file, an input, an unwritable place: before any work
        check_output_dir(output, "OUT", inputs=files)
    destination = Destination(output)
    destination.check_only_shards()
    if destination.has_manifest() and not overwrite:
        raise DataError(
            "already holds a prepared data set (manifest.json); choose another directory "
            "or pass --overwrite",
            path=destination.name,
            code="data-output-exists",
        )
    scan = LabelScan({})
    for _, chunk in _chunks(files, source.spec, chunk_rows):
        scan.add(chunk)
    task, _ = infer_task(
        list(scan.firsts.values()), source.path, kind=source.task, separator=source.separator
    )
    if task.kind == REGRESSION:
        mean, std = scan.regression_moments()
        task = dataclasses.replace(task, mean=mean, std=std)
    count = min(shards or default_shards(scan.rows), scan.rows)
    with destination:
        destination.clear()  # the old manifest first: from here the old set is incomplete
        written = _write_shards(
            source, files, destination, tokenizer, task, (scan.rows, count, chunk_rows)
        )
        manifest = Manifest(
            source=source.path,
            model=source.model,
            max_seq_length=source.max_seq_length,
            tokenizer_fingerprint=tokenizer_fingerprint(tokenizer),
            task=task,
            pair=source.spec.text_pair_column is not None,
            shards=tuple(written),
        )
        destination.save(manifest)
    return manifest


def _said(method):
    """A `Destination` method whose store-client errors (a missing bucket, no permission to
    write, the network) are a `StorageError` naming the output, not a traceback."""

    @functools.wraps(method)
    def wrapper(self, *args):
        if not self.is_url:
            return method(self, *args)
        with storage.writes_said(self.name):
            return method(self, *args)

    return wrapper


class Destination:
    """The directory a prepared set is written to, local or at a URL, whole or not at all.

    Each shard is written to a staging file and becomes visible under its name only when
    whole: renamed in a local directory, uploaded in one upload at a URL (the staging file is
    local, and removed once uploaded: one shard on local disk at a time). The manifest is
    written last by the caller; `clear` removes an old one before anything else.
    """

    def __init__(self, output: str | os.PathLike):
        self.is_url = storage.is_url(output)
        self.root: str | Path = storage.path_text(output) if self.is_url else Path(output)
        self.name = str(self.root)
        self._scratch: str | None = None

    def __enter__(self) -> Destination:
        if self.is_url:
            self._scratch = tempfile.mkdtemp(prefix="bertfit-prepare-")
        else:
            self.root.mkdir(parents=True, exist_ok=True)
        return self

    def __exit__(self, *exc) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    @_said
    def has_manifest(self) -> bool:
        if self.is_url:
            return storage.exists(manifest_path(self.root))
        return (self.root / MANIFEST).exists()

    @_said
    def check_only_shards(self) -> None:
        """Refuses a folder holding anything but a prepared set's files (a run directory,
        someone's data): shards written there would mix with them, and --overwrite would not
        make it a prepared set."""
        if self.is_url:
            names = storage.list_files(self.root)
        else:
            names = [p.name for p in self.root.iterdir()] if self.root.is_dir() else []
        strangers = sorted(n for n in names if not _PREPARED_FILE.fullmatch(n))
        if strangers:
            shown = ", ".join(strangers[:5]) + (", ..." if len(strangers) > 5 else "")
            raise DataError(
                f"holds files that are not a prepared set's ({shown}"
                f"{': a run directory' if 'config.yaml' in strangers else ''}); bertfit prepare "
                "writes only into a new or empty folder, or one holding a prepared set (with "
                "--overwrite). Choose another OUT",
                path=self.name,
                code="data-output-exists",
            )

    @_said
    def clear(self) -> None:
        """Removes a manifest, then every shard (and staging file) of an earlier set."""
        if self.is_url:
            if storage.exists(manifest_path(self.root)):
                storage.remove(manifest_path(self.root))
            for relative in storage.list_files(self.root):
                if fnmatch.fnmatch(relative, "shard-*.tfrecord*"):
                    storage.remove(storage.join(self.root, relative))
        else:
            (self.root / MANIFEST).unlink(missing_ok=True)
            for old in self.root.glob(".shard-*.tfrecord.tmp"):
                old.unlink()
            for old in self.root.glob("shard-*.tfrecord"):
                old.unlink()

    @_said
    def save(self, manifest: Manifest) -> None:
        """Writes the manifest: last, the mark of a whole set."""
        manifest.save(self.root)

    def staging(self, name: str) -> str:
        """Where shard `name` is written before `commit`."""
        if self.is_url:
            return os.path.join(self._scratch, name)
        return str(self.root / f".{name}.tmp")

    @_said
    def commit(self, name: str) -> int:
        """Makes the whole staged shard `name` visible under its name; returns its bytes
        (the manifest keeps them: a truncated copy is refused before training)."""
        size = os.path.getsize(self.staging(name))
        if self.is_url:
            storage.put_file(self.staging(name), storage.join(self.root, name))
            os.remove(self.staging(name))
        else:
            os.replace(self.staging(name), self.root / name)
        return size


def _chunks(files: list[str], spec: SourceSpec, chunk_rows: int):
    """(file, chunk of its examples) for every file in order."""
    for file in files:
        for chunk in read_chunks(file, spec, rows=chunk_rows):
            yield file, chunk


def _write_shards(
    source: ShardSource,
    files: list[str],
    destination: Destination,
    tokenizer,
    task: Task,
    sizes: tuple[int, int, int],
) -> list[Shard]:
    """The second pass: every row tokenized and written to its shard, in order. `sizes`:
    the rows counted by the first pass, the shards, the rows per chunk."""
    rows, count, chunk_rows = sizes
    sink = _ShardSink(destination, rows, count, source.max_seq_length)
    try:
        for records, lengths in _encoded_chunks(source, files, tokenizer, task, chunk_rows):
            if sink.row + len(records) > rows:
                raise _changed(source, rows, "more")
            sink.write(records, lengths)
    finally:
        sink.close()
    if sink.row != rows:
        raise _changed(source, rows, str(sink.row))
    sink.commit_last()
    return sink.shards()


def _encoded_chunks(source: ShardSource, files: list[str], tokenizer, task: Task, chunk_rows):
    """(serialized records, packed lengths) of each chunk of rows, in order.

    Python reads the chunks (and their targets); a `tf.data` pipeline tokenizes them and
    serializes their records in the graph (`serialize_batch`), several chunks at a time on
    TensorFlow's threads, while Python reads the next and writes the last: the file is read
    once more, but no row becomes a Python list of ids or a Python protobuf.
    """
    pair = source.spec.text_pair_column is not None
    failures: list[BaseException] = []

    def chunks():
        start = 0
        try:
            for file, chunk in _chunks(files, source.spec, chunk_rows):
                texts = [e.text for e in chunk]
                pairs = [e.text_pair for e in chunk] if pair else texts
                yield texts, pairs, task.targets(chunk, file), start
                start += len(chunk)
        except Exception as e:  # noqa: BLE001 - said in Python, not as a TF error
            failures.append(e)

    @tf.autograph.experimental.do_not_convert
    def encode(texts, pairs, targets, start):
        ids_a = tokenizer.tokenize(texts)
        lengths = tf.cast(ids_a.row_lengths(), tf.int64) + 2
        ids_b = None
        if pair:
            ids_b = tokenizer.tokenize(pairs)
            lengths += tf.cast(ids_b.row_lengths(), tf.int64) + 1
        rows = start + tf.range(tf.shape(lengths, out_type=tf.int64)[0])
        max_len = source.max_seq_length
        return serialize_batch(ids_a, ids_b, targets, lengths, rows, max_len), lengths

    label = _target_spec(task)
    signature = (_STRINGS, _STRINGS, label, tf.TensorSpec([], tf.int64))
    dataset = tf.data.Dataset.from_generator(chunks, output_signature=signature)
    dataset = dataset.map(encode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    yield from dataset.prefetch(2).as_numpy_iterator()
    if failures:
        raise failures[0]


_STRINGS = tf.TensorSpec([None], tf.string)


def _target_spec(task: Task) -> tf.TensorSpec:
    """What `Task.targets` gives for a chunk: int32 [n], float32 [n, labels] or float32 [n]."""
    if task.kind == SINGLE_LABEL:
        return tf.TensorSpec([None], tf.int32)
    if task.kind == MULTI_LABEL:
        return tf.TensorSpec([None, len(task.labels)], tf.float32)
    return tf.TensorSpec([None], tf.float32)


def _changed(source: ShardSource, rows: int, then: str) -> DataError:
    return DataError(
        f"changed while it was read ({rows} rows, then {then}); prepare it again",
        path=source.path,
        code="data-changed",
    )


class _ShardSink:
    """Rows [s*n/K, (s+1)*n/K) into shard s, in order: each shard committed as soon as the
    next begins (so a URL's staging holds one shard), with its rows and length histogram."""

    def __init__(self, destination: Destination, rows: int, count: int, max_seq_length: int):
        self.destination, self.rows, self.max_seq_length = destination, rows, max_seq_length
        self.names = [f"shard-{s:05d}-of-{count:05d}.tfrecord" for s in range(count)]
        self.histograms: list[dict[int, int]] = [{} for _ in range(count)]
        self.counts = [0] * count
        self.sizes: list[int | None] = [None] * count
        self.row, self.current, self.writer = 0, -1, None

    def write(self, records: np.ndarray, lengths: np.ndarray) -> None:
        """Writes the next rows (serialized records and their packed lengths)."""
        done = 0
        while done < len(records):
            shard = self.row * len(self.names) // self.rows
            if shard != self.current:
                self._begin(shard)
            end_row = -(-(shard + 1) * self.rows // len(self.names))  # the next shard's first
            take = min(len(records) - done, end_row - self.row)
            for record in records[done : done + take]:
                self.writer.write(record)
            clipped = np.minimum(lengths[done : done + take], self.max_seq_length)
            histogram = self.histograms[shard]
            for length, n in zip(*np.unique(clipped, return_counts=True), strict=True):
                histogram[int(length)] = histogram.get(int(length), 0) + int(n)
            self.counts[shard] += take
            self.row += take
            done += take

    def _begin(self, shard: int) -> None:
        if self.writer is not None:
            self.close()
            self.sizes[self.current] = self.destination.commit(self.names[self.current])
        staging = self.destination.staging(self.names[shard])
        self.current, self.writer = shard, tf.io.TFRecordWriter(staging)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def commit_last(self) -> None:
        if self.current >= 0:
            self.sizes[self.current] = self.destination.commit(self.names[self.current])

    def shards(self) -> list[Shard]:
        fields = zip(self.names, self.counts, self.histograms, self.sizes, strict=True)
        return [Shard(*values) for values in fields]
