"""The run's token-length histogram in TensorBoard is written from the length counts, not from
one value per row: `tf.summary.histogram` on 5M rows took 2.5 GB, and a streamed run's peak
memory grew with its data through it (issue 33)."""

from __future__ import annotations

import resource

import tensorflow as tf

from bertfit.data.profile import LengthProfile
from bertfit.training.summaries import RunSummaries


def test_five_million_rows_histogram_counts_exactly_without_a_value_per_row(tmp_path):
    profile = LengthProfile(
        buckets=[16, 64],
        counts={12: 3_000_000, 40: 1_999_999, 64: 1},
        examples=[3_000_000, 2_000_000],
        real_tokens=[36_000_000, 80_000_024],
        slots=[48_000_000, 128_000_000],
    )
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    summaries = RunSummaries(tmp_path)
    summaries.lengths(profile)
    summaries.close()
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 200  # tf.summary.histogram of 5M values: +2,500 MiB

    tensors = [
        tf.make_ndarray(value.tensor)
        for path in tmp_path.glob("events.out.tfevents.*")
        for event in tf.compat.v1.train.summary_iterator(str(path))
        for value in event.summary.value
        if value.tag == "data/token_length"
    ]
    assert len(tensors) == 1
    assert tensors[0].tolist() == [
        [11.5, 12.5, 3_000_000],
        [39.5, 40.5, 1_999_999],
        [63.5, 64.5, 1],
    ]
