"""The input pipeline in NumPy on the host: the batches `BucketedInput` (and `WindowedInput`)
make with tf.data, made here without TensorFlow, for a backend that reads NumPy arrays (JAX:
`JaxTrainer`, `JaxClassifier`).

`HostInput` follows a plan of global batches (`plan_batches`, `plan_documents`): each step's
batch is its examples' ids packed to the bucket's length (`text.host_packing`), their targets
and loss weights, 0 on padding rows, the rows' example indices (-1 on padding rows) and the real
examples of the step. A batch holds every row of the global batch (every micro-batch's, one
after another): the backend splits it over its devices. The elements are those of the tf.data
pipelines under TensorFlow's default strategy, key for key, dtype for dtype, value for value
(tests/data/test_host_input.py). A process of a multi-host run makes only its share of each
global batch's rows (`iterators(share)`): the processes' shares, one after another, are the
global batch.

While the device computes a step, the next batches are made on a background thread
(`Prefetched`): a bucket's iterator keeps its next `PREFETCH` batches in the making.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import itertools
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from bertfit.data.pipeline import PAD_INDEX, Batch, EncodedTexts
from bertfit.model.inputs import GLOBAL_EXAMPLES, INDEX, LABEL, WEIGHT
from bertfit.text.host_packing import pack_ids, pack_rows, window_ids
from bertfit.text.lengths import WINDOW_MASK

# Batches each bucket's iterator has made (or is making) ahead of the one taken.
PREFETCH = 2
# A share of a global batch's rows, (part, parts): its rows cut into `parts` equal parts, of
# which the `part`-th (a process's of a multi-host run: `jax_devices.DeviceSplit.share`).
WHOLE = (0, 1)


class HostInput:
    """The NumPy batches of a plan, one iterator per bucket.

    Args:
        encoded: the tokenized examples.
        labels: the examples' targets (`Task.targets`), or None (prediction: zeros).
        plan: the global batches in the order the steps take them (`Batch`: its bucket's
            length, its examples' indices, -1 on padding rows).
        special_ids: the tokenizer's `special_ids` (its special ids and pair template).
        weights: float32 weight of each example in the loss, or None for 1.
        slots: packed batches (`--packing`, `bertfit.data.packed`): the plan's indices are
            [rows, slots], and each row holds its slots' examples one after another
            (`host_packing.pack_rows`); None: one example per row.

    Iterating yields `(seq_length, batch)` in plan order; `iterators()` gives each bucket's
    batches in plan order. A batch is a dict of NumPy arrays: `input_word_ids`,
    `input_mask`, `input_type_ids` ([rows, seq_length] int32), `label` (the targets' dtype
    and row shape, zeros on padding rows), `example_weight` (float32, 0 on padding rows),
    `index` (int64, -1 on padding rows) and `global_examples` (float32 scalar: the step's
    real examples). A packed batch adds `input_positions` [rows, seq_length] and
    `example_starts` [rows, slots], and its `label`, `example_weight` and `index` are per slot
    ([rows, slots, ...]). `plan` may be cut short before `iterators()` is called
    (`--max-steps`).
    """

    def __init__(
        self,
        encoded: EncodedTexts,
        labels: np.ndarray | None,
        plan: list[Batch],
        *,
        special_ids: dict[str, int],
        weights: np.ndarray | None = None,
        slots: int | None = None,
    ):
        self.encoded = encoded
        self.slots = slots
        self.labels = np.zeros(len(encoded), np.int32) if labels is None else labels
        self.weights = np.ones(len(encoded), np.float32) if weights is None else weights
        self.plan = plan
        self.special_ids = special_ids

    def __len__(self) -> int:
        return len(self.plan)

    def batch(self, step: Batch, share: tuple[int, int] = WHOLE) -> dict[str, np.ndarray]:
        """The arrays of one step (see the class docstring), or of `share` of its rows."""
        part, parts = share
        index = np.split(step.indices, parts)[part]
        safe = np.maximum(index, 0)  # a padding row packs example 0, weighed 0
        real = index != PAD_INDEX
        label = self.labels[safe]
        label[~real] = 0
        if self.slots is None:
            inputs = self.inputs(safe, step.seq_length)
        else:  # each slot's example packed alone (an empty slot's with no token), then in rows
            inputs = self.inputs(safe.reshape(-1), step.seq_length)
            inputs["input_mask"] *= real.reshape(-1, 1)
            pad_id = self.special_ids.get("pad_id", 0)
            inputs = pack_rows(inputs, self.slots, step.seq_length, pad_id)
        return {
            **inputs,
            LABEL: label,
            WEIGHT: np.where(real, self.weights[safe], 0).astype(np.float32),
            INDEX: index,
            GLOBAL_EXAMPLES: np.float32(step.num_examples),
        }

    def inputs(self, rows: np.ndarray, seq_length: int) -> dict[str, np.ndarray]:
        """The model's inputs of the examples at `rows`, packed to `seq_length`."""
        ids_b = self.encoded.ids_b
        return pack_ids(
            self.encoded.ids_a.rows(rows),
            None if ids_b is None else ids_b.rows(rows),
            max_seq_length=seq_length,
            **self.special_ids,
        )

    def iterators(
        self, share: tuple[int, int] = WHOLE
    ) -> dict[int, Iterator[dict[str, np.ndarray]]]:
        """A fresh iterator over each bucket's batches (or `share` of their rows: see
        `batch`), by bucket key, each making its next batches in the background."""
        keys = dict.fromkeys(step.seq_length for step in self.plan)
        make = functools.partial(self.batch, share=share)
        return {
            key: Prefetched(make, [step for step in self.plan if step.seq_length == key])
            for key in keys
        }

    def __iter__(self) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        iterators = self.iterators()
        for step in self.plan:
            yield step.seq_length, next(iterators[step.seq_length])


class HostWindowedInput(HostInput):
    """`HostInput` of documents cut into windows (`--long-documents chunk`): the batches of
    `WindowedInput`. A plan step's `seq_length` is its bucket's chunk count K; a batch's
    inputs are [rows, K, max_seq_length] int32 and its `window_mask` [rows, K] int32 (all 0 on
    padding rows)."""

    def __init__(self, documents, *args, **kwargs):
        self.documents = documents
        super().__init__(EncodedTexts(documents.ids, None, documents.windows), *args, **kwargs)

    def batch(self, step: Batch, share: tuple[int, int] = WHOLE) -> dict[str, np.ndarray]:
        batch = super().batch(step, share)
        batch[WINDOW_MASK][batch[INDEX] == PAD_INDEX] = 0
        return batch

    def inputs(self, rows: np.ndarray, seq_length: int) -> dict[str, np.ndarray]:
        windows = window_ids(
            self.documents.ids.rows(rows),
            self.documents.spec,
            max_chunks=seq_length,
            **self.special_ids,
        )
        keys = ("input_word_ids", "input_mask", "input_type_ids", WINDOW_MASK)
        return {key: windows[key] for key in keys}


class Prefetched:
    """An iterator over `make(item)` for each of `items`, in order, the next `depth` of them
    made ahead on bertfit's background thread (`assembler`)."""

    def __init__(self, make: Callable, items: Iterable, depth: int = PREFETCH):
        self._make, self._items, self._depth = make, iter(items), depth
        self._pending: collections.deque = collections.deque()
        self._fill()

    def _fill(self) -> None:
        for item in itertools.islice(self._items, self._depth - len(self._pending)):
            self._pending.append(assembler().submit(self._make, item))

    def __iter__(self) -> Prefetched:
        return self

    def __next__(self):
        if not self._pending:
            raise StopIteration
        made = self._pending.popleft().result()
        self._fill()
        return made


@functools.cache
def assembler() -> concurrent.futures.ThreadPoolExecutor:
    """The one thread that makes the host's batches ahead of the steps (NumPy releases the
    interpreter in its copies; the device computes meanwhile)."""
    return concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="bertfit-batches")
