"""TensorBoard event files of a run, in `RUN/tensorboard/` (`tensorboard --logdir runs/`).

Written by the chief only. Scalars per optimizer step under `train/` (loss, learning_rate,
grad_norm before clipping, examples_per_second), every numeric metric of each evaluation under
`eval/` (x = the global step it was taken at: an epoch's end, or every `--eval-every-steps`),
the training data's token-length histogram and bucket edges (with `--long-documents chunk`:
the documents' token lengths, windows per document and the share of text dropped), the run
config as text, and why early stopping ended the run (`run/stopped_early`), when it did.

The events are written without TensorFlow, on every backend: `tensorboard`'s protocol buffers
in its record framing (`EventWriter`), the summaries `tf.summary` writes (a float32 scalar, a
string, a [buckets, 3] float64 histogram, each with its plugin's name).
"""

from __future__ import annotations

import itertools
import os
import socket
import time
from pathlib import Path

import numpy as np
import yaml
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter
from tensorboard.util import tensor_util

from bertfit.data.profile import LengthProfile
from bertfit.data.windowed import WindowProfile

STEP_SCALARS = ("loss", "learning_rate", "grad_norm", "examples_per_second")


def counts_histogram(counts: dict[int, int]) -> np.ndarray:
    """TensorBoard's histogram tensor of whole numbers from their counts, [values, 3]: (left
    edge, right edge, count) for each value. `tf.summary.histogram` needs one value per row,
    and on 5M rows took 2.5 GB (a row-by-bucket matrix): a streamed run's peak memory grew with
    the data through it."""
    values = np.asarray(sorted(counts), np.float64)
    rows = np.asarray([counts[value] for value in sorted(counts)], np.float64)
    return np.stack([values - 0.5, values + 0.5, rows], axis=1).reshape(-1, 3)


def length_histogram(profile: LengthProfile) -> np.ndarray:
    """The histogram of the training lengths (`counts_histogram` of the profile's counts)."""
    return counts_histogram(profile.counts)


class EventWriter:
    """One TensorBoard event file in `directory` (a new one each run, as `tf.summary`'s file
    writer makes), written record by record and flushed after each batch of summaries."""

    _numbers = itertools.count()

    def __init__(self, directory: str | os.PathLike):
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        name = (
            f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
            f"{os.getpid()}.{next(self._numbers)}.v2"
        )
        self._file = RecordWriter((folder / name).open("wb"))
        self._write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))

    def add(self, tag: str, value, plugin: str, step: int) -> None:
        """One summary: `value` (a NumPy array or scalar; a str as bytes) under `tag`, shown
        by TensorBoard's `plugin` ("scalars", "text", "histograms")."""
        metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=plugin)
        )
        summary = summary_pb2.Summary(
            value=[
                summary_pb2.Summary.Value(
                    tag=tag, metadata=metadata, tensor=tensor_util.make_tensor_proto(value)
                )
            ]
        )
        self._write(event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary))

    def _write(self, event: event_pb2.Event) -> None:
        self._file.write(event.SerializeToString())

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class RunSummaries:
    """Writes a run's TensorBoard events; does nothing when `directory` is None."""

    def __init__(self, directory: Path | None):
        self.writer = None if directory is None else EventWriter(directory)

    def config(self, config_dict: dict) -> None:
        text = yaml.safe_dump(config_dict, sort_keys=False)
        self._write(("config", _text(f"```\n{text}\n```"), "text", 0))

    def lengths(self, profile: LengthProfile) -> None:
        edges = ", ".join(str(b) for b in profile.buckets)
        waste = ", ".join(
            f"{b}: {w:.1%}" for b, w in zip(profile.buckets, profile.padding_waste(), strict=True)
        )
        self._write(
            ("data/token_length", length_histogram(profile), "histograms", 0),
            ("data/buckets", _text(f"bucket edges: {edges}; padding waste: {waste}"), "text", 0),
        )

    def windows(self, profile: WindowProfile) -> None:
        """`--long-documents chunk`: documents' token lengths and windows, the text dropped."""
        self._write(
            ("data/document_tokens", counts_histogram(profile.token_counts), "histograms", 0),
            ("data/windows_per_document", counts_histogram(profile.windows), "histograms", 0),
            ("data/windows", _text(profile.line()), "text", 0),
        )

    def steps(self, rows: list[dict]) -> None:
        self._write(
            *(
                (f"train/{name}", np.float32(row[name]), "scalars", row["global_step"])
                for row in rows
                for name in STEP_SCALARS
                if row.get(name) is not None
            )
        )

    def evaluation(self, metrics: dict, global_step: int) -> None:
        self._write(
            *(
                (f"eval/{name}", np.float32(value), "scalars", global_step)
                for name, value in metrics.items()
                if isinstance(value, (int, float)) and np.isfinite(value)
            )
        )

    def stopped_early(self, reason: str, global_step: int) -> None:
        self._write(("run/stopped_early", _text(reason), "text", global_step))

    def _write(self, *summaries: tuple) -> None:
        """(tag, value, plugin, step)s, then a flush."""
        if self.writer is None:
            return
        for summary in summaries:
            self.writer.add(*summary)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _text(text: str) -> np.ndarray:
    """A string summary's value: a 0-d string tensor, as `tf.summary.text` writes it."""
    return np.array(text.encode("utf-8"), dtype=object)
