"""Data checks: the training and evaluation files, read as `bertfit train` reads them.

A file the reader refuses becomes one finding (the reader stops at the first bad row and names
it). Files that read become label, leakage and length statistics: every row is counted; only
tokenization is sampled above `max_rows` rows, and the report says so.
"""

from __future__ import annotations

import collections
import json

import numpy as np

from bertfit.check.findings import ERROR, INFO, WARNING, Report
from bertfit.config import RunConfig
from bertfit.data.labels import INTEGER_LABEL, sorted_labels
from bertfit.data.sources import Example, read_examples, resolve_format
from bertfit.errors import DataError
from bertfit.train.run import encode_labelled, source_spec

IMBALANCE_RATIO = 20
TRUNCATION_WARNING = 0.05

# reader message fragment → code
_DATA_ERRORS = [
    ("is the number", "dtype-float-labels"),
    ("file not found", "data-file-not-found"),
    ("no rows", "data-empty-file"),
    ("not valid UTF-8", "data-undecodable"),
    ("UTF-16", "data-undecodable"),
    ("for the text", "data-missing-column"),
    ("for the label", "data-missing-column"),
    ("for the text pair", "data-missing-column"),
    ("the label (column", "data-empty-label"),
    ("is empty", "data-empty-text"),
    ("only whitespace", "data-empty-text"),
    ("missing (null)", "data-empty-text"),
    ("must be a string", "data-mixed-types"),
]


def data_error_finding(report: Report, error: DataError, role: str) -> None:
    text = str(error)
    code = next((c for fragment, c in _DATA_ERRORS if fragment in text), "data-unreadable")
    where = error.path or role
    if error.line is not None:
        where = f"{error.path}:{error.line}"
    report.add(code, ERROR, text, where=where,
               why=f"the {role} file cannot be read as `bertfit train` reads it",
               fix="see the message: it names the line and what to write instead")


def read_checked(report: Report, path: str, config: RunConfig, role: str) -> list[Example] | None:
    try:
        return read_examples(path, source_spec(config))
    except DataError as e:
        data_error_finding(report, e, role)
        return None


def check_labels(report: Report, examples: list[Example], path: str) -> list[str]:
    """Label findings on the training rows; returns the label names in class-id order."""
    counts = collections.Counter(e.label for e in examples)
    first_line = {}
    for e in examples:
        first_line.setdefault(e.label, e.line)
    integer = [label for label in counts if INTEGER_LABEL.fullmatch(label)]
    other = [label for label in counts if not INTEGER_LABEL.fullmatch(label)]
    if integer and other:
        n_other = sum(counts[label] for label in other)
        lines = ", ".join(f"{path}:{first_line[label]}" for label in other[:3])
        if n_other <= 0.1 * len(examples):
            report.add("data-label-not-integer", ERROR,
                       f"{n_other} row(s) have non-integer labels {other[:5]} among integer "
                       "labels", where=lines,
                       why="they become classes of their own instead of what was meant",
                       fix="fix these labels (integer class ids) or delete the rows")
        else:
            report.add("data-mixed-types", WARNING,
                       f"the label column mixes integers {integer[:5]} and names {other[:5]}",
                       where=lines, why="usually two files or two conventions were merged",
                       fix="use one kind of label throughout")
    if integer and not other:
        values = sorted(int(label) for label in integer)
        if values[0] < 0 or values[-1] >= len(values):
            report.add("data-label-out-of-range", WARNING,
                       f"integer labels {values[:10]} are not the class ids 0..{len(values) - 1}",
                       where=f"{path}:{first_line[str(values[-1])]}",
                       why="bertfit maps them to ids by order, but a label outside the intended "
                       "range is often a typo (or a missing class)",
                       fix="check that every label is meant to be a class; renumber 0..K-1")
    if len(counts) == 1:
        (label,) = counts
        report.add("data-single-class", ERROR, f"every training row has the label {label!r}",
                   where=path, why="a classifier needs at least two classes",
                   fix="check --label-column, or add rows of the other classes")
    elif counts:
        most, least = counts.most_common()[0], counts.most_common()[-1]
        if most[1] >= IMBALANCE_RATIO * least[1]:
            report.add("data-imbalance", WARNING,
                       f"class {most[0]!r} has {most[1]} rows, class {least[0]!r} only "
                       f"{least[1]} ({most[1] / least[1]:.0f}:1)", where=path,
                       why="the model can score well by ignoring the small class; accuracy "
                       "hides it",
                       fix="use --best-metric macro_f1, collect or oversample the small class")
    return sorted_labels(counts)


def check_eval(report: Report, train: list[Example], evaluation: list[Example], path: str,
               train_path: str) -> None:
    known = {e.label for e in train}
    unseen = [e for e in evaluation if e.label not in known]
    if unseen:
        names = sorted({e.label for e in unseen})[:5]
        report.add("data-label-unseen", ERROR,
                   f"{len(unseen)} evaluation row(s) have labels never seen in training: {names}",
                   where=f"{path}:{unseen[0].line}",
                   why="the model has no class for them; evaluation would fail",
                   fix="fix the labels, or add training rows of those classes")
    seen = {}
    for e in train:
        seen.setdefault(_normal(e), e.line)
    leaked = [(e, seen[_normal(e)]) for e in evaluation if _normal(e) in seen]
    if leaked:
        e, line = leaked[0]
        report.add("data-leakage", WARNING,
                   f"{len(leaked)} of {len(evaluation)} evaluation row(s) also appear in the "
                   "training data", where=f"{path}:{e.line} = {train_path}:{line}",
                   why="evaluation on training rows overstates accuracy",
                   fix="remove the duplicates from one of the files (split by a hash of the "
                   "normalised text)")


def _normal(example: Example) -> str:
    text = " ".join(example.text.lower().split())
    return text if example.text_pair is None else text + "\t" + " ".join(
        example.text_pair.lower().split())


def check_jsonl_types(report: Report, path: str, config: RunConfig) -> None:
    """JSON keeps types that CSV loses: a column holding numbers in some rows and strings in
    others is reported."""
    if path == "-" or resolve_format(path, config.data.format) != "jsonl":
        return
    columns = [config.data.text_column, config.data.label_column]
    if config.data.text_pair_column:
        columns.append(config.data.text_pair_column)
    kinds = {c: collections.OrderedDict() for c in columns}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line_number, line in enumerate(f, 1):
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if not isinstance(row, dict):
                continue
            for c in columns:
                if c in row and row[c] is not None:
                    kinds[c].setdefault(type(row[c]).__name__, line_number)
    for column, seen in kinds.items():
        if len(seen) > 1:
            report.add("data-mixed-types", WARNING,
                       f"column {column!r} mixes types {list(seen)}",
                       where=", ".join(f"{path}:{line} ({kind})" for kind, line in seen.items()),
                       why="bertfit reads 1 and \"1\" as the same label; a mixture usually "
                       "means rows from different sources",
                       fix="write the column with one type")


def sample_indices(n: int, max_rows: int | None, seed: int = 0) -> np.ndarray:
    if max_rows is None or n <= max_rows:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, max_rows, replace=False))


def check_lengths(report: Report, examples: list[Example], tokenizer, config: RunConfig,
                  path: str, max_rows: int | None):
    """Tokenizes (a sample of) the rows; reports how many are cut to max_seq_length.

    Returns (the encoded texts, the indices of the rows they come from)."""
    chosen = sample_indices(len(examples), max_rows)
    rows = [examples[i] for i in chosen]
    encoded = encode_labelled(path, rows, config, tokenizer, None).encoded
    limit = config.model.max_seq_length
    over = encoded.packed_lengths > limit
    report.stats[f"{path} tokenized"] = f"{len(rows)} of {len(examples)} rows"
    if over.any():
        cut = encoded.packed_lengths[over] - limit
        share = over.mean()
        first = rows[int(np.flatnonzero(over)[0])]
        report.add("data-truncated", WARNING if share > TRUNCATION_WARNING else INFO,
                   f"{int(over.sum())} of {len(rows)} row(s) ({share:.1%}) are longer than "
                   f"max_seq_length {limit} after tokenization; they lose {cut.mean():.0f} "
                   f"tokens on average, up to {int(cut.max())}", where=f"{path}:{first.line}",
                   why="the cut-off words never reach the model",
                   fix=f"raise --max-seq-length (95% of rows fit in "
                   f"{int(np.percentile(encoded.packed_lengths, 95))}), if memory allows")
    return encoded, chosen
