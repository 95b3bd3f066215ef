"""`bertfit train` for each JSON list of arguments, one after another in this one process (one
TensorFlow start for them all), with every `tf.function` run eagerly:

    python -m tests.distributed.eager_runs '[["--model", ...], ["--model", ...]]'

Eagerly, a run of a few steps over two replicas takes ~6 s instead of the ~20 s its traced step
costs on 2 cores: for checks of what a step computes, where the traced step is pinned by a run
elsewhere. Every run asking for the same strategy gets the first one's: a second
MirroredStrategy in a process starts its collective keys where the first did, and TensorFlow
aborts its collectives ("Shape mismatch in the collective instance").
"""

from __future__ import annotations

import functools
import json
import sys

import tensorflow as tf

from bertfit.training import strategy

strategy.make_strategy = functools.cache(strategy.make_strategy)

from bertfit.cli import main  # noqa: E402 (after the patch: each run reads it anew)

if __name__ == "__main__":
    tf.config.run_functions_eagerly(True)
    for args in json.loads(sys.argv[1]):
        if main(["train", *args]) != 0:
            sys.exit(f"bertfit train {' '.join(args)} failed")
