"""The streamed datasets run without tf.data's autotuner: with it, deleting a bucket's iterator
before its end (each epoch's end, a --max-steps run's end) waited 23 s for 16 buckets of a
10k-row set on a 2-core CPU (issue 33)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from bertfit.config import DataConfig, ModelConfig, RunConfig
from bertfit.data.streaming import StreamedInput, StreamLayout, TrainStream
from bertfit.data.tfrecord import Manifest
from bertfit.training.setup import load_checkpoint, run_tokenizer
from bertfit.training.shards import prepare_shards
from tests.tiny import sentiment_rows, write_csv


def test_every_bucket_dataset_has_the_autotuner_off_and_still_feeds_its_batches(
    tiny_hf_dir, tmp_path
):
    model, _ = tiny_hf_dir
    train = write_csv(tmp_path / "train.csv", sentiment_rows(20, seed=4))
    config = RunConfig(
        model=ModelConfig(name=str(model), max_seq_length=16), data=DataConfig(train=str(train))
    )
    prepare_shards(config, tmp_path / "prepared", shards=2, chunk_rows=10)
    tokenizer = run_tokenizer(load_checkpoint(config), config)
    stream = TrainStream(tmp_path / "prepared", Manifest.load(tmp_path / "prepared"))
    layout = StreamLayout.of(stream.manifest, (8, 16), pipelines=1, rows_per_step=4)
    streamed = StreamedInput(
        stream,
        layout,
        tf.distribute.get_strategy(),
        special_ids=tokenizer.special_ids,
        seed=0,
        epoch=0,
    )
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0)
    for bucket in range(len(layout.buckets)):
        dataset = streamed.dataset(bucket, context)
        assert dataset.options().autotune.enabled is False
        assert len(list(dataset)) == layout.steps()[bucket]


def test_the_shuffle_buffer_is_split_among_the_buckets_by_their_share_of_rows():
    layout = StreamLayout(
        buckets=(8, 16, 32),
        files=((0,),),
        by_row=False,
        counts=np.asarray([[900_000, 90_000, 10]]),
        rows_per_step=32,
    )
    streamed = StreamedInput(
        None, layout, tf.distribute.get_strategy(), special_ids={}, seed=0, epoch=0
    )
    buffers = [streamed.bucket_buffer(b, 0) for b in range(3)]
    assert buffers == [9090, 909, 256]  # 10,000 rows by share; a rare bucket keeps 256
    small = StreamedInput(
        None, layout, tf.distribute.get_strategy(), special_ids={}, seed=0, epoch=0,
        shuffle_buffer=4,
    )  # fmt: skip
    assert [small.bucket_buffer(b, 0) for b in range(3)] == [4, 4, 4]
