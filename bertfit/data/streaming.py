"""Training on a prepared TFRecord set (`bertfit prepare`) without holding it in memory.

`bertfit train --train PREPARED_DIR` streams the shards instead of reading and tokenizing every
row before the first step. The host plans each epoch's steps as the in-memory path does (a list
of (bucket length, real examples) steps, runs of `--steps-per-execution` of one bucket, the runs
shuffled by (seed, epoch)), from the manifest's per-shard length histograms alone; the rows
themselves only pass through `tf.data`:

1. **Sharding** (`StreamLayout`): each input pipeline (one per worker, `tf.distribute`'s
   `InputContext`) reads its own files, shard i going to pipeline i mod P. With fewer files than
   pipelines every pipeline reads every file and keeps its share of each bucket's rows
   (`Dataset.shard`), which `StreamLayout.note` says.
2. **Bucketing in-stream**: one dataset per length bucket, so every batch has the bucket's
   static shape: the pipeline's files are read (interleaved; only the lengths parsed, in
   batches), the rows of the bucket kept and parsed with a parallel map, shuffled with a
   bounded buffer (seeded by seed, epoch, bucket and pipeline: a resumed epoch skips exactly
   the batches it took), packed to the bucket length.
3. **Equal step counts, nothing dropped**: a bucket takes, on every worker, as many steps as
   the pipeline with the most rows of that bucket needs; a pipeline with fewer rows fills its
   last batches with padding rows (weight 0, index -1, as `pipeline.PAD_INDEX`). Each step's
   `global_examples` (the loss normaliser) is computed on the host from every pipeline's counts,
   so the loss is exactly the mean over the real rows of the global batch. Every row of the
   prepared set is trained exactly once per epoch, on every worker count.

Reading costs: each bucket's dataset reads the pipeline's files once per epoch (a prepared set
is read once per bucket per epoch: lengths parsed in batches, whole rows only for the bucket's
own, no tokenizing). Memory holds `SHUFFLE_BUFFER` rows per pipeline, split among the buckets
by their share of its rows (at least `MIN_BUCKET_BUFFER` each), and a few batches per bucket,
whatever the number of rows.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tensorflow as tf

from bertfit.config import RunConfig
from bertfit.data.pipeline import PAD_INDEX, bucket_of
from bertfit.data.profile import LengthProfile
from bertfit.data.tasks import MULTI_LABEL, SINGLE_LABEL
from bertfit.data.tfrecord import (
    IDS_A,
    IDS_B,
    LABEL,
    LENGTH,
    ROW,
    Manifest,
    damaged_shard,
    parser,
    read_manifest,
)
from bertfit.data.training_data import Batching, TrainingData
from bertfit.errors import BertfitError, DataError
from bertfit.model.inputs import GLOBAL_EXAMPLES, INDEX, WEIGHT
from bertfit.text.packing import pack_inputs

SHUFFLE_BUFFER = 10_000  # rows per pipeline, split among its buckets: the shuffle's memory bound
MIN_BUCKET_BUFFER = 256  # rows in the shuffle buffer of a bucket, however rare
SAMPLE_FOR_BUCKETS = 1_000_000  # lengths that choose the buckets (a larger set is sampled)
LENGTH_BATCH = 256  # records whose lengths are parsed together (the buckets' filter)


class TrainStream(TrainingData):
    """A prepared training set: its directory (a local path, or a URL that TensorFlow's file
    systems read: `gs://`, `ram://`, ...) and manifest (`len`: its rows). Its rows are never
    in memory: the plan comes from the manifest's length histograms (`StreamLayout`), the
    batches from the shards (`StreamedInput`)."""

    def __init__(self, directory: str | Path, manifest: Manifest):
        self.directory = directory
        self.manifest = manifest
        self.path = str(directory)
        self.labels = None  # never in memory
        self.weights = None
        self._layouts: dict[tuple, StreamLayout] = {}

    def __len__(self) -> int:
        return self.manifest.rows

    @property
    def files(self) -> list[str]:
        return self.manifest.paths(self.directory)

    def fingerprint(self) -> str:
        """A digest of the manifest: the rows' shards, counts, lengths and tokenizer."""
        return hashlib.sha256(read_manifest(self.directory)).hexdigest()

    def lengths(self, limit: int = SAMPLE_FOR_BUCKETS) -> np.ndarray:
        """Packed lengths to choose the buckets from: all of them, or for a larger set `limit`
        evenly spaced quantiles of the histogram (the same shape, never all rows in memory)."""
        histogram = self.manifest.histogram()
        values = np.asarray(sorted(histogram), np.int64)
        counts = np.asarray([histogram[v] for v in values], np.int64)
        rows = int(counts.sum())
        if rows <= limit:
            return np.repeat(values, counts)
        positions = np.linspace(0, rows - 1, limit).astype(np.int64)
        return values[np.searchsorted(np.cumsum(counts), positions, side="right")]

    def layout(self, batching: Batching) -> StreamLayout:
        """How the set is split among `batching`'s input pipelines and cut into its steps."""
        key = (batching.buckets, batching.pipelines, batching.rows_per_step)
        if key not in self._layouts:
            rows_per_step = batching.rows_per_step // batching.pipelines
            self._layouts[key] = StreamLayout.of(
                self.manifest, batching.buckets, batching.pipelines, rows_per_step
            )
        return self._layouts[key]

    def notes(self, config: RunConfig, batching: Batching) -> list[str]:
        note = self.layout(batching).note
        return [
            f"streaming the prepared set {self.directory} ({len(self)} rows, "
            f"{len(self.files)} files)",
            *([note] if note else []),
        ]

    def plan(self, batching: Batching, *, shuffle: bool, epoch: int = 0) -> list[StreamStep]:
        return self.layout(batching).plan(
            shuffle=shuffle, seed=batching.seed, epoch=epoch, run_length=batching.run_length
        )

    def input(
        self,
        batching: Batching,
        strategy: tf.distribute.Strategy | None,
        *,
        special_ids: dict[str, int],
        shuffle: bool,
        epoch: int = 0,
        start: int = 0,
    ) -> StreamedInput:
        """The epoch's batches from the shards, always shuffled: a stream serves training only
        (its loss weights are 1). tf.data reads the shards on any backend: with no strategy,
        under the default one (whole global batches, which a NumPy backend reads as arrays)."""
        return StreamedInput(
            self,
            self.layout(batching),
            strategy or tf.distribute.get_strategy(),
            special_ids=special_ids,
            seed=batching.seed,
            epoch=epoch,
            start=start,
            run_length=batching.run_length,
            micro_batches=batching.micro_batches,
            pad_to_longest=batching.pad_to_longest,
        )

    def profile(self, batching: Batching) -> LengthProfile:
        return self.layout(batching).profile(self.manifest)

    def read_error(self, error: Exception) -> DataError | None:
        """The damaged shard named (`damaged_shard`), not TensorFlow's `DataLossError` (or
        the `OutOfRangeError` of a shard with fewer records than planned)."""
        if not isinstance(error, (tf.errors.DataLossError, tf.errors.OutOfRangeError)):
            return None
        return damaged_shard(self.manifest, self.directory, error)


def input_pipelines(strategy: tf.distribute.Strategy) -> int:
    """How many input pipelines `distribute_datasets_from_function` makes: one per worker
    (MultiWorkerMirroredStrategy), per TPU host, else one."""
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        resolver = strategy.cluster_resolver
        spec = resolver.cluster_spec().as_dict() if resolver is not None else {}
        return max(1, len(spec.get("worker", [])) + len(spec.get("chief", [])))
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return int(strategy.extended.num_hosts)
    return 1


@dataclasses.dataclass(frozen=True)
class StreamStep:
    """One global step of a streamed epoch: its bucket length and its real examples."""

    seq_length: int
    num_examples: int


@dataclasses.dataclass(frozen=True)
class StreamLayout:
    """How a prepared set is split among the input pipelines and cut into steps.

    Args:
        buckets: the run's bucket lengths.
        files: the shard indices each pipeline reads (every shard for every pipeline when
            `by_row`).
        by_row: fewer files than pipelines: each pipeline keeps its share of each bucket's rows.
        counts: [pipelines, buckets] rows each pipeline feeds to each bucket per epoch.
        rows_per_step: rows one pipeline feeds per global step (its replicas' batches of
            every micro-batch).
    """

    buckets: tuple[int, ...]
    files: tuple[tuple[int, ...], ...]
    by_row: bool
    counts: np.ndarray
    rows_per_step: int

    @classmethod
    def of(
        cls, manifest: Manifest, buckets: Sequence[int], pipelines: int, rows_per_step: int
    ) -> StreamLayout:
        """Shard i to pipeline i mod `pipelines`, or every shard to all and rows split."""
        buckets = tuple(int(b) for b in buckets)
        shard_counts = np.zeros((len(manifest.shards), len(buckets)), np.int64)
        for i, shard in enumerate(manifest.shards):
            lengths = np.asarray(list(shard.lengths), np.int64)
            rows = np.asarray(list(shard.lengths.values()), np.int64)
            np.add.at(shard_counts[i], bucket_of(lengths, buckets), rows)
        if len(manifest.shards) >= pipelines:
            files = tuple(
                tuple(range(p, len(manifest.shards), pipelines)) for p in range(pipelines)
            )
            counts = np.stack([shard_counts[list(f)].sum(axis=0) for f in files])
            return cls(buckets, files, False, counts, rows_per_step)
        total = shard_counts.sum(axis=0)
        counts = np.stack([total // pipelines + (p < total % pipelines) for p in range(pipelines)])
        every = tuple(range(len(manifest.shards)))
        return cls(buckets, (every,) * pipelines, True, counts, rows_per_step)

    @property
    def pipelines(self) -> int:
        return len(self.files)

    @property
    def note(self) -> str | None:
        if not self.by_row or self.pipelines == 1:
            return None
        return (
            f"the prepared set has fewer files than the {self.pipelines} workers: every worker "
            "reads every file and keeps its share of the rows (prepare it with --shards "
            f"{self.pipelines} or more so that each reads only its own files)"
        )

    def steps(self) -> np.ndarray:
        """Steps per bucket per epoch: what the pipeline with the most rows needs."""
        return -(-self.counts.max(axis=0) // self.rows_per_step)

    def global_examples(self, bucket: int) -> np.ndarray:
        """The real rows of each global step of `bucket`, in order (padding comes last)."""
        steps = np.arange(self.steps()[bucket], dtype=np.int64)
        left = self.counts[:, bucket, np.newaxis] - steps * self.rows_per_step
        return np.clip(left, 0, self.rows_per_step).sum(axis=0)

    def plan(
        self, *, shuffle: bool, seed: int = 0, epoch: int = 0, run_length: int = 1
    ) -> list[StreamStep]:
        """The epoch's global steps, as `pipeline.plan_batches` orders them: each bucket's
        steps in runs of `run_length`, the runs shuffled by (seed, epoch)."""
        # Vectorised: a 5M-row epoch has ~156k steps (a Python loop over them took ~4 s).
        steps = self.steps()
        run_bucket = np.concatenate(
            [np.full(-(-n // run_length), b, np.int64) for b, n in enumerate(steps)]
        )
        run_size = np.concatenate(
            [np.minimum(run_length, n - np.arange(0, n, run_length)) for n in steps]
        )
        if shuffle:
            order = np.random.default_rng([seed, epoch]).permutation(len(run_bucket))
            run_bucket, run_size = run_bucket[order], run_size[order]
        bucket = np.repeat(run_bucket, run_size)
        # a bucket's batches come out of its dataset in order, its padding last: the k-th
        # step of bucket b in the plan is b's k-th step
        taken = np.empty(len(bucket), np.int64)
        for b in range(len(steps)):
            where = np.flatnonzero(bucket == b)
            taken[where] = np.arange(len(where))
        examples = np.zeros(len(bucket), np.int64)
        for b in range(len(steps)):
            where = bucket == b
            examples[where] = self.global_examples(b)[taken[where]]
        lengths = np.asarray(self.buckets, np.int64)[bucket]
        return list(map(StreamStep, lengths.tolist(), examples.tolist()))

    def profile(self, manifest: Manifest) -> LengthProfile:
        """The lengths against the buckets (what the report and TensorBoard show), from the
        manifest's histogram."""
        histogram: dict[int, int] = {}
        for shard in manifest.shards:
            for length, rows in shard.lengths.items():
                clipped = min(length, self.buckets[-1])
                histogram[clipped] = histogram.get(clipped, 0) + rows
        lengths = np.asarray(sorted(histogram), np.int64)
        rows = np.asarray([histogram[v] for v in lengths], np.int64)
        assignment = bucket_of(lengths, self.buckets)
        global_batch = self.rows_per_step * self.pipelines
        steps = self.steps()
        return LengthProfile(
            list(self.buckets),
            {int(v): int(c) for v, c in zip(lengths, rows, strict=True)},
            [int(rows[assignment == b].sum()) for b in range(len(self.buckets))],
            [int((lengths * rows)[assignment == b].sum()) for b in range(len(self.buckets))],
            [int(steps[b] * global_batch * length) for b, length in enumerate(self.buckets)],
        )


class StreamedInput:
    """The distributed datasets of one streamed epoch, one per bucket, that follow its plan
    from step `start` on; the same interface as `pipeline.BucketedInput` for training
    (`plan`, `len`, `iterators`).

    Args:
        stream: the prepared set.
        layout: its split among pipelines and steps.
        strategy: the strategy that consumes the batches.
        special_ids: the tokenizer's `special_ids`.
        seed, epoch: what the shuffles depend on.
        start: the epoch's steps already taken (a resumed epoch).
        run_length: `--steps-per-execution`.
        micro_batches: `--grad-accum`.
        pad_to_longest: pad each batch to its longest row (no XLA), as `BucketedInput`.
        shuffle_buffer: rows in each bucket's shuffle buffer.
    """

    def __init__(
        self,
        stream: TrainStream,
        layout: StreamLayout,
        strategy: tf.distribute.Strategy,
        *,
        special_ids: dict[str, int],
        seed: int,
        epoch: int,
        start: int = 0,
        run_length: int = 1,
        micro_batches: int = 1,
        pad_to_longest: bool = False,
        shuffle_buffer: int = SHUFFLE_BUFFER,
    ):
        self.stream, self.layout, self.strategy = stream, layout, strategy
        self.special_ids, self.seed, self.epoch = special_ids, seed, epoch
        self.micro_batches, self.pad_to_longest = micro_batches, pad_to_longest
        self.shuffle_buffer = shuffle_buffer
        full = layout.plan(shuffle=True, seed=seed, epoch=epoch, run_length=run_length)
        self.plan = full[start:]
        self.taken = [step.seq_length for step in full[:start]]
        self._datasets: dict | None = None

    def __len__(self) -> int:
        return len(self.plan)

    @property
    def datasets(self) -> dict:
        """The distributed dataset of each bucket the plan uses, by bucket length."""
        if self._datasets is None:
            self._datasets = {
                length: self.strategy.distribute_datasets_from_function(
                    lambda context, b=b: self.dataset(b, context)
                )
                for b, length in enumerate(self.layout.buckets)
                if any(step.seq_length == length for step in self.plan)
            }
        return self._datasets

    def iterators(self) -> dict:
        return {length: iter(d) for length, d in self.datasets.items()}

    def _records(self, pipeline: int) -> tf.data.Dataset:
        """(serialized record, its packed length) of every row of the pipeline's files, the
        files in a (seed, epoch) order. Only the length is parsed, a batch of records at a
        time: each bucket's dataset reads every row and keeps its own, and parsing just the
        lengths in batches made that filter ~5x cheaper than parsing whole rows one by one."""
        files = [self.stream.files[i] for i in self.layout.files[pipeline]]
        # split by row, every pipeline must read the rows in one order
        key = [self.seed, self.epoch] + ([] if self.layout.by_row else [pipeline])
        order = np.random.default_rng(key).permutation(len(files))
        files = tf.data.Dataset.from_tensor_slices([files[i] for i in order])
        length = {LENGTH: tf.io.FixedLenFeature([], tf.int64)}

        @tf.autograph.experimental.do_not_convert
        def with_lengths(records):
            return records, tf.io.parse_example(records, length)[LENGTH]

        records = files.interleave(
            tf.data.TFRecordDataset,
            cycle_length=min(4, len(order)),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        return (
            records.batch(LENGTH_BATCH)
            .map(with_lengths, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
            .unbatch()
        )

    def _padding(self, rows: int) -> tf.data.Dataset:
        """`rows` padding rows: no ids, a zero label, weight 0, index -1."""
        task = self.stream.manifest.task
        if task.kind == SINGLE_LABEL:
            label = tf.constant(0, tf.int32)
        elif task.kind == MULTI_LABEL:
            label = tf.zeros([len(task.labels)], tf.float32)
        else:
            label = tf.constant(0.0, tf.float32)
        row = {
            IDS_A: tf.zeros([0], tf.int32),
            LABEL: label,
            WEIGHT: tf.constant(0.0),
            INDEX: tf.constant(PAD_INDEX, tf.int64),
        }
        if self.stream.manifest.pair:
            row[IDS_B] = tf.zeros([0], tf.int32)
        return tf.data.Dataset.from_tensors(row).repeat(rows)

    def dataset(self, bucket: int, context: tf.distribute.InputContext) -> tf.data.Dataset:
        """The per-replica batches of `bucket` that the pipeline `context` names feeds in this
        epoch from the plan's first step on (its replicas take them in turn)."""
        layout, pipeline = self.layout, context.input_pipeline_id
        local_replicas = context.num_replicas_in_sync // context.num_input_pipelines
        skip = self.taken.count(layout.buckets[bucket])
        if context.num_input_pipelines != layout.pipelines:
            raise BertfitError(
                f"internal error: {context.num_input_pipelines} input pipelines, planned for "
                f"{layout.pipelines}"
            )
        buckets = layout.buckets
        low = buckets[bucket - 1] if bucket else 0
        high = buckets[bucket] if bucket < len(buckets) - 1 else np.iinfo(np.int64).max
        pair = self.stream.manifest.pair

        @tf.autograph.experimental.do_not_convert
        def in_bucket(record, length):
            return (length > low) & (length <= high)

        @tf.autograph.experimental.do_not_convert
        def record_only(record, length):
            return record

        def example(row):
            out = {IDS_A: row[IDS_A], LABEL: row[LABEL], WEIGHT: 1.0, INDEX: row[ROW]}
            if pair:
                out[IDS_B] = row[IDS_B]
            return out

        records = self._records(pipeline).filter(in_bucket).map(record_only)
        if layout.by_row:
            records = records.shard(layout.pipelines, pipeline)
        manifest = self.stream.manifest
        rows = records.map(
            parser(manifest.task, manifest.pair),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        seed = int(np.random.default_rng([self.seed, self.epoch, bucket, pipeline]).integers(2**31))
        rows = rows.shuffle(
            self.bucket_buffer(bucket, pipeline), seed=seed, reshuffle_each_iteration=False
        )
        steps = int(layout.steps()[bucket])
        padding = steps * layout.rows_per_step - int(layout.counts[pipeline, bucket])
        rows = rows.map(example).concatenate(self._padding(padding))
        per_element = layout.rows_per_step // local_replicas
        counts = np.repeat(layout.global_examples(bucket), local_replicas).astype(np.float32)
        batches = tf.data.Dataset.zip(
            rows.ragged_batch(per_element, drop_remainder=True),
            tf.data.Dataset.from_tensor_slices(counts),
        )
        packed = batches.map(
            tf.autograph.experimental.do_not_convert(self._packer(buckets[bucket], per_element)),
            num_parallel_calls=2,
            deterministic=True,
        )
        # tf.data's autotuner off (parallel calls AUTOTUNE then take the host's cores): with
        # it, deleting an iterator that has not reached its end (every bucket's at the end of
        # an epoch, or of a --max-steps run) waits for the autotuner, 23 s for 16 buckets of a
        # 10k-row set on a loaded 2-core CPU (measured; as pipeline.BucketedInput).
        options = tf.data.Options()
        options.autotune.enabled = False
        return packed.skip(skip * local_replicas).prefetch(2).with_options(options)

    def bucket_buffer(self, bucket: int, pipeline: int) -> int:
        """The rows of `bucket`'s shuffle buffer: its share of the pipeline's `shuffle_buffer`,
        at least `MIN_BUCKET_BUFFER`. A buffer of its own per bucket filled before the bucket's
        first batch: 16 buckets of 10,000 rows of a 5M-row set took 4 GB and read millions of
        rows for the rare buckets (60 batches: 142 s; split by share: 23 s, 1.0 GB)."""
        counts = self.layout.counts[pipeline]
        share = counts[bucket] / max(int(counts.sum()), 1)
        floor = min(MIN_BUCKET_BUFFER, self.shuffle_buffer)
        return max(floor, int(self.shuffle_buffer * share))

    def _packer(self, seq_length: int, rows: int):
        shape = [rows, None if self.pad_to_longest else seq_length]

        def pack(batch, global_examples):
            inputs = pack_inputs(
                batch[IDS_A],
                batch.get(IDS_B),
                max_seq_length=seq_length,
                padding="longest" if self.pad_to_longest else "max_length",
                **self.special_ids,
            )
            return {
                **{k: tf.ensure_shape(v, shape) for k, v in inputs.items()},
                LABEL: batch[LABEL],
                WEIGHT: batch[WEIGHT],
                INDEX: batch[INDEX],
                GLOBAL_EXAMPLES: global_examples,
            }

        return pack
