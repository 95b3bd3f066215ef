"""A run's data files as `bertfit train` reads them, without TensorFlow: how it reads them
(`source_spec`), the rows of `--train` (`read_training_examples`), and `check_run_files`, which
reads them through before TensorFlow loads.

Loading TensorFlow takes 5-10 s; reading a file of ten thousand rows, a tenth of one. So the
commands that train read their files first: a missing file, a format it cannot tell, a missing
column or a bad row is said at once, in the words of the reader the run uses
(`bertfit.data.sources`, `bertfit.data.chunks`). Only what needs neither tokenizer nor task is
checked there; the run reads the files again (nothing is kept: a local CSV reads at about
9 µs a row on a 2-core CPU, 1.8 s for 200,000 rows of a sentence).

    >>> from bertfit.config import DataConfig, RunConfig
    >>> _ = Path("train.csv").write_text("text,label\\na fine film,pos\\n \\t,neg\\n")
    >>> check_run_files(RunConfig(data=DataConfig(train="train.csv")))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    bertfit.errors.DataError: train.csv:3: the text (column 'text') is only whitespace (' \\t'); ...
"""

from __future__ import annotations

import os
from pathlib import Path

from bertfit import storage
from bertfit.config import RunConfig
from bertfit.data.chunks import read_chunks, source_files
from bertfit.data.sources import STDIN, Example, SourceSpec, check_source, read_examples


def source_spec(config: RunConfig) -> SourceSpec:
    """How a run reads its files: `--format` and the column flags."""
    d = config.data
    return SourceSpec(
        format=d.format,
        text_column=d.text_column,
        text_pair_column=d.text_pair_column,
        label_column=d.label_column,
        empty_labels=True,  # the task decides: the empty set in multi-label data, else an error
    )


def read_training_examples(pattern: str, config: RunConfig) -> list[Example]:
    """The rows of one file, or of every file a glob matches (sorted by name, concatenated).

    Every worker reads all of them: the batch plan is global and each worker's input pipeline
    takes its replicas' rows of every global batch (see data/pipeline.py), which uses each
    example exactly once per epoch and keeps every worker at the same step count.
    """
    spec = source_spec(config)
    return [e for path in source_files(pattern, "--train") for e in read_examples(path, spec)]


def check_run_files(config: RunConfig, *, first_rows_only: bool = False) -> None:
    """Reads `--train` and `--eval` through as the run will, raising the `DataError` it would.

    Every row of a file the run reads in memory; with `--streaming` (or `first_rows_only`:
    `bertfit prepare`) the first chunk of each training file, through the reader that streams
    it (its other rows are read as the run streams them). Left to the run: standard input
    (read once), a prepared set (`bertfit prepare`'s folder or manifest) and a URL (read once,
    not fetched twice).
    """
    data, spec = config.data, source_spec(config)
    train = source_files(data.train, "--train") if _read_here(data.train) else []
    evaluation = [data.eval] if _read_here(data.eval) else []
    for path in train + evaluation:  # a missing file said before any is read
        check_source(path, spec.format)
    for path in train:
        if data.streaming or first_rows_only:
            next(read_chunks(path, spec), None)
        else:
            read_examples(path, spec)
    for path in evaluation:
        read_examples(path, spec)


def _read_here(path: str | None) -> bool:
    if not path or path == STDIN or storage.is_url(path):
        return False
    return not (os.path.isdir(path) or Path(path).name == "manifest.json")
