"""Relative position buckets, a part of the family kit (`model/blocks.py`): T5's bucketing of the
distance between a query and a key (Raffel et al., 2020, `relative_position_bucket`), which
MPNet's attention bias uses (`model/mpnet.py`).

Half the buckets are for keys before the query, half for keys after it (bidirectional); in each
half, distances below `num_buckets // 4` keep a bucket each, and longer ones share buckets
logarithmically up to `max_distance`, beyond which they all fall in the last. The logarithm is
taken in float32, as Hugging Face's, so a bucket edge falls where theirs does.
"""

from __future__ import annotations

import math

from keras import ops


def relative_position_buckets(relative, num_buckets: int = 32, max_distance: int = 128):
    """The bucket (int32) of each int32 `relative` position (key - query), T5's bidirectional
    bucketing as Hugging Face's `MPNetEncoder.relative_position_bucket` computes it.

    Examples:
    >>> relative = ops.convert_to_tensor([-200, -20, -3, 0, 3, 20, 200], "int32")
    >>> ops.convert_to_numpy(relative_position_buckets(relative)).tolist()
    [15, 10, 3, 0, 19, 26, 31]
    """
    half = num_buckets // 2
    distance = -relative  # how far the key lies before the query
    bucket = ops.where(distance < 0, half, 0)
    distance = ops.abs(distance)
    exact = half // 2
    # log(0) never reaches a bucket (short distances keep their own), but it would be -inf.
    far = ops.cast(ops.maximum(distance, exact), "float32")
    scale = ops.convert_to_tensor(math.log(max_distance / exact), "float32")
    logarithmic = ops.log(far / float(exact)) / scale * float(half - exact)
    large = ops.minimum(exact + ops.cast(logarithmic, "int32"), half - 1)
    return bucket + ops.where(distance < exact, distance, large)
