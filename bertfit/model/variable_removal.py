"""Removing many of a model's variables with one garbage collection, not one each.

Keras' `Layer.__delattr__` runs a full `gc.collect()` for every variable attribute deleted
(Keras 3.15: so that a device frees the buffer at once). Storing a base in int8 (Keras'
`Dense.quantize`) and merging LoRA adapters delete one to three variables per adapted layer,
and in a process with TensorFlow and a model loaded each collection walks about a million
objects: tens of full collections for a tiny model, hundreds for BERT-large's.
`one_collection()` runs them as one, when its block ends.
"""

from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def one_collection():
    """Within the block, `gc.collect()` collects nothing (Keras' per-variable calls); one full
    collection runs as the block ends."""
    collect = gc.collect
    gc.collect = lambda generation=2: 0
    try:
        yield
    finally:
        gc.collect = collect
        collect()
