"""`bertfit relabel`: a reviewed issues.csv of `bertfit audit` applied to the training rows.

The reviewer fills in each flagged row's `decision`: `keep` (or nothing: not reviewed, kept),
`drop` (left out), or `relabel` with the class in `new_label`. The corrected file holds every
training row in its order, the dropped ones left out and the relabelled ones with their new
label, in the training file's columns as JSON lines (`bertfit train --train` takes it). Every
decision is checked before anything is written, and the file is written whole.
"""

from __future__ import annotations

import csv
import dataclasses
import json
from collections import Counter
from pathlib import Path

from bertfit.atomic import write_text_atomic
from bertfit.config import RunConfig
from bertfit.data.labelled import infer_run_task
from bertfit.data.run_files import read_training_examples
from bertfit.data.sources import Example
from bertfit.data.tasks import normalize_label
from bertfit.errors import ConfigError, DataError
from bertfit.sweeps.audit import sweep_config
from bertfit.sweeps.fold_data import jsonl_line

KEEP, DROP, RELABEL = "keep", "drop", "relabel"
DECISIONS = (KEEP, DROP, RELABEL)


def apply_review(issues: str | Path, output: str | Path, train: str | None = None) -> dict:
    """Writes `output`: the training rows of the audit that wrote `issues` (its sweep's
    --train, or `train`) with `issues`' decisions applied; returns the counts of each.

    Raises:
        ConfigError: `output` is not a .jsonl file, or `issues` has no audit beside it.
        DataError: a decision that cannot be applied (the message names its row and the fix).
    """
    issues, output = Path(issues), Path(output)
    if output.suffix != ".jsonl":
        raise ConfigError(
            f"--output {output}: the corrected training file is JSON lines in the training "
            "file's columns; name it .jsonl."
        )
    config = _sweep_config(issues)
    if train is not None:
        config.data.train = train
    examples = read_training_examples(config.data.train, config)[: config.data.max_train_examples]
    labels = infer_run_task(examples, config)[0].labels
    decisions = {}  # training row: (decision, new label)
    issue_of = {}  # training row: the issue number that decides it
    for number, record in enumerate(_read_decisions(issues), 1):
        row, decision, label = _decision(record, examples, labels, f"{issues}: issue {number}")
        if row in issue_of:
            raise DataError(
                f"{issues}: issues {issue_of[row]} and {number} are both training row {row}; "
                "keep one line per row, with the decision you mean.",
                code="audit-review-row",
            )
        issue_of[row] = number
        decisions[row] = decision, label
    lines = []
    for row, example in enumerate(examples):
        decision, label = decisions.get(row, (KEEP, None))
        if decision == RELABEL:
            example = dataclasses.replace(example, label=label)
        if decision != DROP:
            lines.append(jsonl_line(example, config))
    write_text_atomic(output, "".join(lines))
    counts = Counter(decision for decision, _ in decisions.values())
    return {"rows": len(lines), "dropped": counts[DROP], "relabelled": counts[RELABEL]}


def _sweep_config(issues: Path) -> RunConfig:
    """The sweep's base config, from the audit.json beside `issues`."""
    summary = issues.parent / "audit.json"
    if not issues.is_file() or not summary.is_file():
        raise ConfigError(
            f"{issues}: pass the issues.csv of a `bertfit audit` folder (its audit.json beside "
            "it names the sweep and the training file)."
        )
    sweep = Path(json.loads(summary.read_text(encoding="utf-8"))["sweep"])
    if not (sweep / "sweep.json").is_file():
        raise ConfigError(
            f"{summary} audited the sweep {sweep}, which is no longer there; relabel where the "
            "sweep is."
        )
    return sweep_config(sweep)


def _read_decisions(issues: Path) -> list[dict]:
    with open(issues, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        missing = {"row", "text", "decision", "new_label"} - set(reader.fieldnames or [])
        if missing:
            raise DataError(
                f"no column(s) {', '.join(sorted(missing))}: relabel reads the issues.csv of "
                "`bertfit audit` with its decision (and new_label) filled in.",
                path=str(issues),
                code="audit-not-an-issues-file",
            )
        return list(reader)


def _decision(
    record: dict, examples: list[Example], labels: tuple[str, ...], where: str
) -> tuple[int, str, str | None]:
    """(the training row, its decision, its new label: None unless relabelled)."""
    row = record["row"]
    if not row.isdigit() or int(row) >= len(examples):
        raise DataError(
            f"{where}: row {row!r} is not a row of the {len(examples)} training rows; the "
            "issues file is of other data. Audit this training file again.",
            code="audit-review-row",
        )
    row, example = int(row), examples[int(row)]
    where = f"{where} (training row {row}, line {example.line})"
    pair_edited = example.text_pair is not None and record.get("text_pair") != example.text_pair
    if record["text"] != example.text or pair_edited:
        raise DataError(
            f"{where}: its text is not the training row's {example.text!r}; the text was edited "
            "or the training file changed. Restore the text (edit the training file for a new "
            "text), or audit again.",
            code="audit-review-text",
        )
    decision = (record["decision"] or KEEP).strip().lower()
    new_label = (record["new_label"] or "").strip()
    if decision not in DECISIONS:
        raise DataError(
            f"{where}: decision {record['decision']!r}; write one of {', '.join(DECISIONS)} "
            "(empty: keep).",
            code="audit-review-decision",
        )
    if decision != RELABEL:
        if new_label:
            raise DataError(
                f"{where}: new_label {new_label!r} with decision {decision}; write relabel to "
                "change the label, or clear new_label.",
                code="audit-review-decision",
            )
        return row, decision, None
    if normalize_label(new_label) not in labels:
        raise DataError(
            f"{where}: new_label {new_label!r} is not a class of the training rows; write one "
            f"of {', '.join(labels)}.",
            code="audit-review-label",
        )
    return row, RELABEL, normalize_label(new_label)
