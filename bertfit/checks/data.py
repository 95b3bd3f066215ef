"""Data checks: the training and evaluation files, read as `bertfit train` reads them.

A file the reader refuses becomes one finding (the reader stops at the first bad row and names
it). Files that read become label, leakage and length statistics: every row is counted; only
tokenization is sampled above `max_rows` rows, and the report says so.
"""

from __future__ import annotations

import collections
import glob
import json

import numpy as np

from bertfit.checks.findings import ERROR, INFO, WARNING, Report
from bertfit.config import RunConfig
from bertfit.data.labelled import encode_labelled, infer_run_task
from bertfit.data.labels import INTEGER_LABEL
from bertfit.data.run_files import read_training_examples, source_spec
from bertfit.data.sources import Example, read_examples, resolve_format
from bertfit.data.tasks import MULTI_LABEL, SINGLE_LABEL, WARNING_NOTE, Task, label_counts
from bertfit.data.training_data import LabelledData, LabelledDocuments
from bertfit.data.windowed import WindowProfile
from bertfit.errors import DataError

IMBALANCE_RATIO = 20
TRUNCATION_WARNING = 0.05
CHUNK_FIX = "; or --long-documents chunk: whole texts classified from windows of max_seq_length"


def data_error_finding(report: Report, error: DataError, path: str, why: str, fix: str) -> None:
    """A `DataError` as the finding of its code, where it says (file:line) or at `path`."""
    where = error.path or path
    if error.path and error.line is not None:
        where = f"{error.path}:{error.line}"
    report.add(error.code, ERROR, str(error), where=where, why=why, fix=fix)


def read_checked(report: Report, path: str, config: RunConfig, role: str) -> list[Example] | None:
    try:
        if role == "training":  # one file or a glob, exactly as `bertfit train` reads it
            return read_training_examples(path, config)
        return read_examples(path, source_spec(config))
    except DataError as e:
        why = f"the {role} file cannot be read as `bertfit train` reads it"
        data_error_finding(
            report, e, role, why, "see the message: it names the line and what to write instead"
        )
        return None


def check_labels(
    report: Report, examples: list[Example], path: str, config: RunConfig
) -> Task | None:
    """Label findings on the training rows, decided by the same `infer_task` that
    `bertfit train` runs; returns the task (None when training would stop)."""
    try:
        task, notes = infer_run_task(examples, config)
        targets = task.targets(examples, path)
    except DataError as e:
        why = "`bertfit train` stops on the same label problem"
        data_error_finding(
            report, e, path, why, "see the message: it names the labels and the lines"
        )
        return None
    report.stats["task"] = task.kind
    for note in notes:
        if note.startswith(WARNING_NOTE):
            report.add(
                "data-multi-label-single",
                WARNING,
                note.removeprefix(WARNING_NOTE),
                where=path,
                fix="train it as --task single-label, or check --label-separator",
            )
            continue
        report.add(
            "data-task-inferred",
            INFO,
            note,
            where=path,
            fix="pass --task to choose the task yourself",
        )
    if task.kind == SINGLE_LABEL:
        _single_label_findings(report, examples, task, targets, path)
    elif task.kind == MULTI_LABEL:
        _multi_label_findings(report, task, targets, path)
    else:
        _regression_findings(report, task, targets, path)
    return task


def _single_label_findings(report, examples, task, targets, path) -> None:
    if all(INTEGER_LABEL.fullmatch(label) for label in task.labels):
        # ids past 18 digits are out of any range; Python refuses int() past 4300 digits
        values = sorted(int(label) if len(label) <= 18 else 10**18 for label in task.labels)
        shown = [_short(label) for label in sorted(task.labels, key=lambda x: (len(x), x))]
        if values[0] < 0 or values[-1] >= len(values):
            report.add(
                "data-label-out-of-range",
                WARNING,
                f"integer labels {shown[:10]} are not the class ids 0..{len(values) - 1}",
                where=path,
                why="bertfit maps them to ids by order, but a label outside the intended "
                "range is often a typo (or a missing class)",
                fix="check that every label is meant to be a class; renumber 0..K-1",
            )
    counts = label_counts(task, targets)
    _imbalance(report, counts, path, "class")


def _short(label: str) -> str:
    return label if len(label) <= 24 else f"{label[:10]}...{label[-10:]} ({len(label)} chars)"


def _imbalance(report, counts: dict[str, int], path: str, what: str) -> None:
    present = {k: v for k, v in counts.items() if v}
    if len(present) < 2:
        return
    most = max(present, key=present.get)
    least = min(present, key=present.get)
    ratio = present[most] / present[least]
    report.stats["imbalance"] = f"{ratio:.1f}:1 ({_short(most)!r} / {_short(least)!r})"
    if ratio >= IMBALANCE_RATIO:
        report.add(
            "data-imbalance",
            WARNING,
            f"{what} {_short(most)!r} has {present[most]} rows, {what} {_short(least)!r} only "
            f"{present[least]} ({ratio:.0f}:1)",
            where=path,
            why="the model can score well by ignoring the small class; accuracy hides it",
            fix="train with --class-weights balanced and --best-metric macro_f1, or "
            "collect or oversample the small class",
        )


def _multi_label_findings(report, task, targets, path) -> None:
    per_row = targets.sum(axis=1)
    report.stats["labels per row"] = (
        f"mean {per_row.mean():.2f}, min {int(per_row.min())}, max {int(per_row.max())}"
    )
    counts = label_counts(task, targets)
    always = [label for label, n in counts.items() if n == len(targets)]
    if always:
        report.add(
            "data-label-always",
            WARNING,
            f"the labels {always[:5]} are on every training row",
            where=path,
            why="a label that is always on teaches nothing and inflates micro-F1",
            fix="drop it from the labels, or check the separator (--label-separator)",
        )
    if per_row.max() <= 1 and len(task.labels) > 1:
        report.add(
            "data-multi-label-single",
            WARNING,
            "no training row has more than one label",
            where=path,
            why="a single-label (softmax) model fits such data better",
            fix="pass --task single-label, or check --label-separator",
        )
    _imbalance(report, counts, path, "label")


def _regression_findings(report, task, targets, path) -> None:
    values = task.values(targets)
    report.stats["targets"] = (
        f"mean {task.mean:.4g}, std {task.std:.4g}, range {values.min():.4g} .. {values.max():.4g}"
    )
    outliers = np.abs(targets) > 6
    if outliers.any():
        report.add(
            "data-target-outliers",
            WARNING,
            f"{int(outliers.sum())} target(s) lie more than 6 standard deviations from "
            f"the mean (e.g. {values[outliers][0]:.4g})",
            where=path,
            why="squared error lets a few extreme targets dominate training",
            fix="check them for typos, or transform the target (e.g. a logarithm)",
        )


def check_eval(
    report: Report,
    train: list[Example],
    evaluation: list[Example],
    path: str,
    train_path: str,
    task: Task | None,
) -> None:
    if task is not None:
        try:
            task.targets(evaluation, path)
        except DataError as e:
            why = "the model has no output for it; evaluation would fail"
            data_error_finding(
                report, e, path, why, "fix the label, or add training rows of that class"
            )
    seen = {}
    for e in train:
        seen.setdefault(_normal(e), e.line)
    leaked = [(e, seen[_normal(e)]) for e in evaluation if _normal(e) in seen]
    if leaked:
        e, line = leaked[0]
        report.add(
            "data-leakage",
            WARNING,
            f"{len(leaked)} of {len(evaluation)} evaluation row(s) also appear in the "
            "training data",
            where=f"{path}:{e.line} = {train_path}:{line}",
            why="evaluation on training rows overstates accuracy",
            fix="remove the duplicates from one of the files (split by a hash of the "
            "normalised text)",
        )


def _normal(example: Example) -> str:
    text = " ".join(example.text.lower().split())
    return (
        text
        if example.text_pair is None
        else text + "\t" + " ".join(example.text_pair.lower().split())
    )


def check_jsonl_types(report: Report, path: str, config: RunConfig) -> None:
    """JSON keeps types that CSV loses: a column holding numbers in some rows and strings in
    others is reported."""
    if glob.has_magic(path):
        for each in sorted(glob.glob(path)):
            check_jsonl_types(report, each, config)
        return
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
            report.add(
                "data-mixed-types",
                WARNING,
                f"column {column!r} mixes types {list(seen)}",
                where=", ".join(f"{path}:{line} ({kind})" for kind, line in seen.items()),
                why='bertfit reads 1 and "1" as the same label; a mixture usually '
                "means rows from different sources",
                fix="write the column with one type",
            )


def sample_indices(n: int, max_rows: int | None, seed: int = 0) -> np.ndarray:
    if max_rows is None or n <= max_rows:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, max_rows, replace=False))


def check_lengths(
    report: Report,
    examples: list[Example],
    tokenizer,
    config: RunConfig,
    path: str,
    max_rows: int | None,
    max_positions: int | None = None,
) -> LabelledData:
    """Tokenizes (a sample of) the rows; reports how many are cut to max_seq_length (with
    `--long-documents chunk`: how many need more than --max-chunks windows, and the ids lost).

    Returns the sampled rows, tokenized as the run tokenizes them (without targets)."""
    chosen = sample_indices(len(examples), max_rows)
    rows = [examples[i] for i in chosen]
    data = encode_labelled(path, rows, config, tokenizer, None)
    encoded = data.encoded
    limit = config.model.max_seq_length
    over = encoded.packed_lengths > limit
    report.stats[f"{path} tokenized"] = f"{len(rows)} of {len(examples)} rows"
    if isinstance(data, LabelledDocuments):
        check_windows(report, data, path)
    elif over.any():
        cut = encoded.packed_lengths[over] - limit
        share = over.mean()
        first = rows[int(np.flatnonzero(over)[0])]
        report.add(
            "data-truncated",
            WARNING if share > TRUNCATION_WARNING else INFO,
            f"{int(over.sum())} of {len(rows)} row(s) ({share:.1%}) are longer than "
            f"max_seq_length {limit} after tokenization; they lose {cut.mean():.0f} "
            f"tokens on average, up to {int(cut.max())}",
            where=f"{path}:{first.line}",
            why="the cut-off words never reach the model",
            fix=_length_fix(int(np.percentile(encoded.packed_lengths, 95)), limit, max_positions)
            + ("" if encoded.ids_b is not None else CHUNK_FIX),
        )
    return data


def check_windows(report: Report, data: LabelledDocuments, path: str) -> None:
    """`--long-documents chunk`: the documents' windows, and a finding for those that need more
    than --max-chunks windows (the ids after the last kept window are dropped)."""
    documents = data.documents
    spec, profile = documents.spec, WindowProfile.of(documents)
    report.stats[f"{path} windows"] = profile.line()
    cut = documents.windows > spec.max_chunks
    if not cut.any():
        return
    dropped = documents.dropped_tokens[cut]
    first = data.examples[int(np.flatnonzero(cut)[0])]
    needs_95 = int(np.ceil(np.percentile(documents.windows, 95)))
    report.add(
        "data-windows-cut",
        WARNING if cut.mean() > TRUNCATION_WARNING else INFO,
        f"{int(cut.sum())} of {len(documents)} document(s) ({cut.mean():.1%}) need more than "
        f"--max-chunks {spec.max_chunks} windows of {spec.max_seq_length} tokens; they lose "
        f"{dropped.mean():.0f} tokens on average, up to {int(dropped.max())} "
        f"({profile.dropped_share:.1%} of all the text)",
        where=f"{data.path}:{first.line}",
        why="the tokens after a document's last kept window never reach the model",
        fix=f"raise --max-chunks (95% of the documents fit in {needs_95} windows; memory and "
        "time grow with it), or accept the cut",
    )


def _length_fix(fits_95: int, limit: int, max_positions: int | None) -> str:
    if max_positions is not None and limit >= max_positions:
        return (
            f"the model takes at most {max_positions} tokens (max_position_embeddings): "
            "shorten the texts, or accept the truncation"
        )
    if max_positions is not None and fits_95 > max_positions:
        return (
            f"raise --max-seq-length up to the model's limit {max_positions} (95% of rows "
            f"would need {fits_95}), if memory allows"
        )
    return f"raise --max-seq-length (95% of rows fit in {fits_95}), if memory allows"
