"""The teacher's labels of the student's rows, kept in the student's run directory
(`RUN/distill/`) so that a resumed distillation reuses them instead of predicting again:

    distill/train.jsonl         the student's training rows: the training file's rows (their
                                given labels), then the --unlabelled texts (the teacher's
                                label); .csv, .tsv or .parquet when the run's --format says so
    distill/soft_labels.npz     probabilities [rows, classes] (the teacher's, at T = 1), given
                                [rows] (the class index of the given label; -1: unlabelled),
                                labels (the teacher's classes in output order), fingerprint
    distill/student/            the student's starting checkpoint (with --student-layers)

The folder is written beside its place and renamed in whole; `fingerprint` (the teacher's
checkpoint and every row) says whether a later run may reuse it.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np

from bertfit.data.sources import Example
from bertfit.data.training_data import data_fingerprint
from bertfit.errors import BertfitError
from bertfit.runs.checkpoint_files import identifying_file

DISTILL_DIR = "distill"
ROWS_FILE = "train"  # and the format's extension (`rows_file`)
SOFT_LABELS_FILE = "soft_labels.npz"
STUDENT_DIR = "student"


@dataclasses.dataclass
class SoftLabels:
    """The teacher's probabilities of the student's rows, and the given labels.

    Args:
        probabilities: float32 [rows, classes], the teacher's (temperature 1).
        given: int32 [rows]: the class index of a row's given label, -1 for an unlabelled row.
        labels: the teacher's classes, in the order of the probabilities' columns.
        fingerprint: the teacher's checkpoint and the rows they were predicted from.
    """

    probabilities: np.ndarray
    given: np.ndarray
    labels: list[str]
    fingerprint: str

    def save(self, path: Path) -> None:
        with open(path, "wb") as file:
            np.savez(
                file,
                probabilities=self.probabilities.astype(np.float32),
                given=self.given.astype(np.int32),
                labels=np.array(self.labels, dtype=str),
                fingerprint=np.array(self.fingerprint),
            )

    @classmethod
    def load(cls, path: Path) -> SoftLabels:
        try:
            with np.load(path, allow_pickle=False) as data:
                loaded = cls(
                    probabilities=data["probabilities"],
                    given=data["given"],
                    labels=[str(label) for label in data["labels"]],
                    fingerprint=str(data["fingerprint"]),
                )
        except (OSError, ValueError, KeyError) as e:
            raise BertfitError(
                f"{path} is not a soft-labels file bertfit wrote ({e}); pass --overwrite to "
                "label the rows again."
            ) from e
        rows, classes = loaded.probabilities.shape
        if loaded.given.shape != (rows,) or classes != len(loaded.labels):
            raise BertfitError(
                f"{path}: {rows} rows of {classes} probabilities, {loaded.given.shape[0]} given "
                f"labels and {len(loaded.labels)} classes do not match; pass --overwrite."
            )
        return loaded


def distill_fingerprint(teacher_checkpoint: str, rows: list[Example]) -> str:
    """A digest of the teacher's checkpoint (its path and contents) and of the rows."""
    digest = hashlib.sha256(teacher_checkpoint.encode("utf-8"))
    with identifying_file(teacher_checkpoint).open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    digest.update(data_fingerprint(rows).encode("utf-8"))
    return digest.hexdigest()


def rows_file(folder: Path, format: str | None) -> Path:
    """Where the student's rows are: in the run's `--format` (which reads its --eval too), or
    JSON lines when the format is told by each file's name."""
    return folder / f"{ROWS_FILE}.{format or 'jsonl'}"


def write_rows(path: Path, rows: list[Example], labels: list[str], columns: dict) -> None:
    """The student's training rows under the training files' column names, in the format
    `path`'s extension names; an unlabelled row gets the teacher's label (`labels`, one per
    row), so the file reads as any training file."""
    names = [columns["text"], *filter(None, [columns.get("text_pair")]), columns["label"]]
    records = [
        [row.text, *([row.text_pair] if columns.get("text_pair") else []), label]
        for row, label in zip(rows, labels, strict=True)
    ]
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({n: [r[i] for r in records] for i, n in enumerate(names)}), path)
        return
    with open(path, "w", encoding="utf-8", newline="") as file:
        if path.suffix == ".jsonl":
            for record in records:
                file.write(json.dumps(dict(zip(names, record, strict=True))) + "\n")
            return
        writer = csv.writer(file, delimiter="\t" if path.suffix == ".tsv" else ",")
        writer.writerow(names)
        writer.writerows(records)
