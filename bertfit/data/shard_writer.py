"""Writing a data file as tokenized TFRecord shards and their manifest (`bertfit.data.tfrecord`),
holding one chunk of rows at a time: what `bertfit prepare` and `train --streaming` run.

The file is read twice, in chunks (`bertfit.data.chunks`):
1. the labels: the task is inferred from one row per distinct label (the checks of
   `infer_task` see each label's first line); a regression task's mean and standard deviation
   are summed over every row;
2. the texts: each chunk is tokenized with the given tokenizer and its rows written in order,
   rows [s*n/K, (s+1)*n/K) to shard s.

Shards are written under temporary names and renamed when whole; the manifest is written last
(atomically), so a directory with a manifest is a whole prepared set.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import numpy as np
import tensorflow as tf

from bertfit.data.chunks import CHUNK_ROWS, read_chunks
from bertfit.data.pipeline import encode_texts
from bertfit.data.sources import Example, SourceSpec
from bertfit.data.tasks import REGRESSION, infer_task, normalize_label, parse_number
from bertfit.data.tfrecord import MANIFEST, Manifest, Shard, serialize, tokenizer_fingerprint
from bertfit.errors import DataError

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
        source: the file and how to read it.
        output: the directory to write (created; one with a manifest needs `overwrite`).
        tokenizer: the model's tokenizer.
        shards: how many shards (default: one per 100,000 rows, at most 256; never more
            than the rows).
        chunk_rows: rows held in memory at a time.

    Raises:
        DataError: the file's problems, as `train` reports them; an `output` already prepared.
    """
    out = Path(output)
    if (out / MANIFEST).exists() and not overwrite:
        raise DataError(
            "already holds a prepared data set (manifest.json); choose another directory "
            "or pass --overwrite",
            path=str(out),
            code="data-output-exists",
        )
    scan = LabelScan({})
    for chunk in read_chunks(source.path, source.spec, rows=chunk_rows):
        scan.add(chunk)
    task, _ = infer_task(
        list(scan.firsts.values()), source.path, kind=source.task, separator=source.separator
    )
    if task.kind == REGRESSION:
        mean, std = scan.regression_moments()
        task = dataclasses.replace(task, mean=mean, std=std)
    count = min(shards or default_shards(scan.rows), scan.rows)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("shard-*.tfrecord"):
        old.unlink()  # --overwrite: no shard of the old set stays
    written = _write_shards(source, out, tokenizer, task, scan.rows, count, chunk_rows)
    manifest = Manifest(
        source=source.path,
        model=source.model,
        max_seq_length=source.max_seq_length,
        tokenizer_fingerprint=tokenizer_fingerprint(tokenizer),
        task=task,
        pair=source.spec.text_pair_column is not None,
        shards=tuple(written),
    )
    manifest.save(out)
    return manifest


def _write_shards(
    source: ShardSource, out: Path, tokenizer, task, rows: int, count: int, chunk_rows: int
):
    """The second pass: every row tokenized and written to its shard, in order."""
    max_len = source.max_seq_length
    names = [f"shard-{s:05d}-of-{count:05d}.tfrecord" for s in range(count)]
    histograms: list[dict[int, int]] = [{} for _ in range(count)]
    counts = [0] * count
    writers: dict[int, tf.io.TFRecordWriter] = {}
    row = 0
    try:
        for chunk in read_chunks(source.path, source.spec, rows=chunk_rows):
            targets = task.targets(chunk, source.path)
            pairs = [e.text_pair for e in chunk] if source.spec.text_pair_column else None
            encoded = encode_texts(tokenizer, [e.text for e in chunk], pairs)
            ids_a = encoded.ids_a.to_list()
            ids_b = encoded.ids_b.to_list() if encoded.ids_b is not None else None
            for i, length in enumerate(encoded.packed_lengths):
                shard = row * count // rows
                if shard not in writers:
                    writers[shard] = tf.io.TFRecordWriter(str(out / f".{names[shard]}.tmp"))
                writers[shard].write(
                    serialize(
                        ids_a[i],
                        None if ids_b is None else ids_b[i],
                        np.asarray(targets[i]),
                        int(length),
                        row,
                        max_len,
                    )
                )
                clipped = int(min(length, max_len))
                histograms[shard][clipped] = histograms[shard].get(clipped, 0) + 1
                counts[shard] += 1
                row += 1
    finally:
        for writer in writers.values():
            writer.close()
    if row != rows:
        raise DataError(
            f"changed while it was read ({rows} rows, then {row}); prepare it again",
            path=source.path,
            code="data-changed",
        )
    for name in names:
        os.replace(out / f".{name}.tmp", out / name)
    return [Shard(n, c, h) for n, c, h in zip(names, counts, histograms, strict=True)]
