"""TensorBoard event files of a run, in `RUN/tensorboard/` (`tensorboard --logdir runs/`).

Written by the chief only. Scalars per optimizer step under `train/` (loss, learning_rate,
grad_norm before clipping, examples_per_second), every numeric metric of each evaluation under
`eval/` (x = the global step it was taken at: an epoch's end, or every `--eval-every-steps`),
the training data's token-length histogram and bucket edges (with `--long-documents chunk`:
the documents' token lengths, windows per document and the share of text dropped), the run
config as text, and why early stopping ended the run (`run/stopped_early`), when it did.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf
import yaml
from tensorboard.plugins.histogram import metadata as histogram_metadata

from bertfit.data.profile import LengthProfile
from bertfit.data.windowed import WindowProfile

STEP_SCALARS = ("loss", "learning_rate", "grad_norm", "examples_per_second")


def length_histogram(profile: LengthProfile) -> np.ndarray:
    """TensorBoard's histogram tensor of the training lengths, [lengths, 3]: (left edge, right
    edge, rows) for each token length, from the profile's counts. `tf.summary.histogram` needs
    one value per row, and on 5M rows took 2.5 GB (a row-by-bucket matrix): a streamed run's
    peak memory grew with the data through it."""
    lengths = np.asarray(sorted(profile.counts), np.float64)
    rows = np.asarray([profile.counts[length] for length in sorted(profile.counts)], np.float64)
    return np.stack([lengths - 0.5, lengths + 0.5, rows], axis=1)


class RunSummaries:
    """Writes a run's TensorBoard events; does nothing when `directory` is None."""

    def __init__(self, directory: Path | None):
        self.writer = None if directory is None else tf.summary.create_file_writer(str(directory))

    def config(self, config_dict: dict) -> None:
        text = yaml.safe_dump(config_dict, sort_keys=False)
        self._write(lambda: tf.summary.text("config", f"```\n{text}\n```", step=0))

    def lengths(self, profile: LengthProfile) -> None:
        def write():
            tf.summary.write(
                "data/token_length",
                length_histogram(profile),
                step=0,
                metadata=histogram_metadata.create_summary_metadata(None, None),
            )
            edges = ", ".join(str(b) for b in profile.buckets)
            waste = ", ".join(
                f"{b}: {w:.1%}"
                for b, w in zip(profile.buckets, profile.padding_waste(), strict=True)
            )
            tf.summary.text(
                "data/buckets", f"bucket edges: {edges}; padding waste: {waste}", step=0
            )

        self._write(write)

    def windows(self, profile: WindowProfile) -> None:
        """`--long-documents chunk`: documents' token lengths and windows, the text dropped."""

        def write():
            for name, counts in (
                ("data/document_tokens", profile.token_counts),
                ("data/windows_per_document", profile.windows),
            ):
                values = np.repeat(list(counts), list(counts.values())).astype(np.float32)
                tf.summary.histogram(name, values, buckets=min(64, max(1, len(counts))), step=0)
            tf.summary.text("data/windows", profile.line(), step=0)

        self._write(write)

    def steps(self, rows: list[dict]) -> None:
        def write():
            for row in rows:
                for name in STEP_SCALARS:
                    if row.get(name) is not None:
                        tf.summary.scalar(f"train/{name}", row[name], step=row["global_step"])

        self._write(write)

    def evaluation(self, metrics: dict, global_step: int) -> None:
        def write():
            for name, value in metrics.items():
                if isinstance(value, (int, float)) and np.isfinite(value):
                    tf.summary.scalar(f"eval/{name}", value, step=global_step)

        self._write(write)

    def stopped_early(self, reason: str, global_step: int) -> None:
        self._write(lambda: tf.summary.text("run/stopped_early", reason, step=global_step))

    def _write(self, write) -> None:
        if self.writer is None:
            return
        with self.writer.as_default():
            write()
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
