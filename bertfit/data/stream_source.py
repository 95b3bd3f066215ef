"""Which prepared set a run streams, and whether it suits the run.

A run streams its training rows (`TrainStream`) when `--train` is a prepared set (`bertfit
prepare`), with `--streaming`, or when its training file is larger than
`$BERTFIT_STREAM_ABOVE_MB` (`auto_streaming`). A data file streamed is tokenized once into
the cache (`cached_shards`); every set is checked against the run first (`check_stream`).
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from bertfit import storage
from bertfit.cache import cache_root
from bertfit.config import NO_CLASS_WEIGHTS, TRUNCATE, RunConfig
from bertfit.data.run_files import source_spec
from bertfit.data.shard_writer import ShardSource, write_prepared
from bertfit.data.streaming import TrainStream
from bertfit.data.tfrecord import (
    Manifest,
    check_shards,
    is_prepared,
    prepared_directory,
    tokenizer_fingerprint,
)
from bertfit.errors import ConfigError, DataError

# A training file larger than this (MB; the setting $BERTFIT_STREAM_ABOVE_MB) is streamed
# without --streaming: see `auto_streaming`.
STREAM_ABOVE_MB = 64
STREAM_ABOVE_ENV = "BERTFIT_STREAM_ABOVE_MB"


def stream_above_bytes() -> int:
    """`$BERTFIT_STREAM_ABOVE_MB` (default `STREAM_ABOVE_MB`) in bytes: the size of a training
    file above which `train` streams it without --streaming (`auto_streaming`)."""
    text = os.environ.get(STREAM_ABOVE_ENV, str(STREAM_ABOVE_MB))
    try:
        megabytes = float(text)
    except ValueError:
        raise ConfigError(
            f"{STREAM_ABOVE_ENV}={text!r}: expected a size in MB, e.g. 64 (or inf never to "
            "stream without --streaming)"
        ) from None
    return int(min(megabytes * 1e6, 2**62))


def auto_streaming(config: RunConfig) -> tuple[RunConfig, str | None]:
    """The run's config with `--streaming` turned on for a training file larger than
    `stream_above_bytes()` (decided once, before the run directory is planned, so the run
    saves it and the same command resumes it alike), and the note that says so up front.

    Measured (issue 47): a 1M-row, 126 MB CSV took 57-99 s to its first step in memory at
    1.35x the RSS of a 10k-row run; the same rows prepared started in 12.6 s at 1.03x. Kept in
    memory, with the note, when an option needs every row there, or the file is a glob, a URL
    or a prepared set."""
    data = config.data
    path = data.train
    if data.streaming or path is None or is_prepared(path) or glob.has_magic(path):
        return config, None
    if storage.is_url(path) or not Path(path).is_file():
        return config, None
    size, limit = Path(path).stat().st_size, stream_above_bytes()
    if size <= limit:
        return config, None
    said = f"{path} is {size / 1e6:.0f} MB (over {STREAM_ABOVE_ENV}={limit / 1e6:g} MB)"
    in_memory_only = [
        flag
        for flag, given in {
            "--max-train-examples": data.max_train_examples is not None,
            "--class-weights": config.train.class_weights != NO_CLASS_WEIGHTS,
            "--long-documents chunk": config.model.long_documents != TRUNCATE,
        }.items()
        if given
    ]
    if in_memory_only:
        return config, (
            f"{said}: reading and tokenizing it in memory takes a while before the first step "
            f"(~1 min per 100 MB); streaming would start sooner but {', '.join(in_memory_only)} "
            "needs the rows in memory"
        )
    streamed = dataclasses.replace(config, data=dataclasses.replace(data, streaming=True))
    return streamed, (
        f"{said}: streaming it (--streaming: tokenized once into the cache, then read in "
        f"batches) instead of holding every row in memory; set {STREAM_ABOVE_ENV}=inf to keep "
        "files of any size in memory"
    )


def shard_source(config: RunConfig) -> ShardSource:
    """What `bertfit prepare` and `--streaming` tokenize: `--train`, read as the run reads it."""
    return ShardSource(
        path=config.data.train,
        spec=source_spec(config),
        model=config.model.name,
        max_seq_length=config.model.max_seq_length,
        task=config.model.task,
        separator=config.data.label_separator,
    )


def cached_shards(config: RunConfig, tokenizer) -> Path:
    """`--streaming` on a data file: its shards in the cache (`$BERTFIT_CACHE/prepared/KEY`,
    KEY a digest of the file's bytes, the tokenizer and how the file is read), written once
    with `write_prepared` (into a temporary directory renamed into place: two processes
    preparing one file both end with one whole set).

    The bytes, not the path, size and modification time: a file whose labels changed with its
    mtime restored (a copy with `cp -p`, a checkout, `touch -r`) trained on the old labels.
    SHA-256 of a 126 MB CSV takes 0.2 s here, against ~13 s to start streaming it."""
    path = config.data.train
    if glob.has_magic(path) or not Path(path).is_file():
        raise ConfigError(
            f"--streaming reads one data file; {path!r} is not one. Prepare the data with "
            "`bertfit prepare DATA OUT` and pass --train OUT."
        )
    source = shard_source(config)
    with open(path, "rb") as f:
        content = hashlib.file_digest(f, "sha256").hexdigest()
    key = json.dumps(
        [
            content,
            tokenizer_fingerprint(tokenizer),
            dataclasses.asdict(source),
        ],
        sort_keys=True,
    )
    directory = cache_root() / "prepared" / hashlib.sha256(key.encode()).hexdigest()[:24]
    if is_prepared(directory):
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
    try:
        write_prepared(source, scratch, tokenizer)
        os.rename(scratch, directory)
    except OSError:
        if not is_prepared(directory):  # another process did not finish it either
            raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return directory


def check_stream(manifest: Manifest, config: RunConfig, tokenizer, where: str) -> None:
    """A prepared set must suit the run: every shard there at its written size, the model's
    tokenizer, a max_seq_length it holds, the task asked for, and no option that needs every
    row in memory. `where`: the set's directory or manifest, as the user named it."""
    check_shards(manifest, prepared_directory(where))
    if manifest.tokenizer_fingerprint != tokenizer_fingerprint(tokenizer):
        raise DataError(
            f"was prepared with another tokenizer (for --model {manifest.model}) than that of "
            f"--model {config.model.name}{' with --lower-case' if config.model.lower_case else ''}"
            ": its ids would mean other words. Prepare the data again with this model "
            "(`bertfit prepare DATA OUT --model ...`)",
            path=where,
            code="data-tokenizer-mismatch",
        )
    if config.model.max_seq_length > manifest.max_seq_length:
        raise ConfigError(
            f"--max-seq-length {config.model.max_seq_length} is longer than the "
            f"{manifest.max_seq_length} {where} was prepared for (its ids are cut there); "
            "prepare it again with the longer length, or train with a shorter one."
        )
    if config.model.task is not None and config.model.task != manifest.task.kind:
        raise ConfigError(
            f"--task {config.model.task}: {where} was prepared as {manifest.task.kind}; "
            "prepare it again with --task, or leave --task out."
        )
    in_memory_only = {
        "--max-train-examples": config.data.max_train_examples is not None,
        "--class-weights": config.train.class_weights != NO_CLASS_WEIGHTS,
    }
    for flag, given in in_memory_only.items():
        if given:
            raise ConfigError(
                f"{flag} needs the training rows in memory; a prepared set ({where}) is "
                f"streamed. Leave {flag} out, or train on the data file."
            )


def open_stream(config: RunConfig, tokenizer) -> TrainStream:
    """The prepared set the run streams (`--train`, or `--streaming`'s `cached_shards`),
    checked against the run (`check_stream`)."""
    if is_prepared(config.data.train):
        directory = prepared_directory(config.data.train)
    else:
        directory = cached_shards(config, tokenizer)
    stream = TrainStream(directory, Manifest.load(directory))
    check_stream(stream.manifest, config, tokenizer, str(directory))
    return stream
