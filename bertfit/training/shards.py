"""`bertfit prepare DATA OUT`: a data file tokenized once, with the model's own tokenizer, into
TFRecord shards and a manifest (`bertfit.data.shard_writer`), so that training streams ids and
tokenizes nothing (`bertfit.data.streaming`).

    prepare_shards(RunConfig(model=ModelConfig("minilm-l6", 128),
                             data=DataConfig(train="train.csv")), "prepared/", shards=8)
"""

from __future__ import annotations

import os

from bertfit.config import RunConfig
from bertfit.data.chunks import CHUNK_ROWS
from bertfit.data.shard_writer import write_prepared
from bertfit.data.stream_source import shard_source
from bertfit.data.tfrecord import Manifest
from bertfit.training.setup import load_checkpoint, shard_tokenizer


def prepare_shards(
    config: RunConfig,
    output: str | os.PathLike,
    *,
    shards: int | None = None,
    chunk_rows: int = CHUNK_ROWS,
    overwrite: bool = False,
) -> Manifest:
    """Tokenizes `config.data.train` for `config.model` into TFRecord shards in `output`
    (`write_prepared`): the model's name, max_seq_length, lower_case and task, and how to read
    the file (format, columns, label separator) come from `config`."""
    tokenizer = shard_tokenizer(load_checkpoint(config), config)
    return write_prepared(
        shard_source(config),
        output,
        tokenizer,
        shards=shards,
        chunk_rows=chunk_rows,
        overwrite=overwrite,
    )
