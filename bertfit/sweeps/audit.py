"""`bertfit audit`: the training rows whose given label is likely wrong, from a k-fold sweep's
out-of-fold predictions (`bertfit.sweeps.confident`), written for people to review and for a
retraining without them.

    SWEEP/audit/
      issues.csv                  the flagged rows, most likely wrong first: rank, row (0-based,
                                  in the training rows' order), line (in the training file),
                                  text[, text_pair], given_label, suggested_label, score (the
                                  given label's quality, 0 to 1: lowest first),
                                  given_probability, suggested_probability; and
                                  decision and new_label, empty, for the reviewer to fill in
                                  (keep, drop, or relabel with new_label) and `bertfit relabel`
                                  to apply (`bertfit.sweeps.review`)
      audit.json                  the summary: the sweep, trial and seeds it read, the method,
                                  per-class thresholds, the confident joint (raw and calibrated),
                                  the estimated number of wrong labels (`estimated_wrong`: n -
                                  trace of the calibrated joint; `off_diagonal`: the raw joint's
                                  off-diagonal rows, cleanlab's default count), flagged counts,
                                  the out-of-fold accuracy against the most common label's rate,
                                  a warning when the folds cannot judge (nothing flagged), and
                                  `wrong_labels_seen` (how many wrong labels the folds see,
                                  `confident.wrong_labels_seen`: with --flag seen, the default,
                                  the first that many of the method's `flagged_by_method` rows
                                  are flagged), and the review budget (--top, --max-fraction)
                                  with `found`, the rows flagged before it
      train-without-issues.jsonl  the training rows less the flagged ones, in the training
                                  file's columns: `bertfit train --train` takes it as it is
      report.html                 the summary, the joint and the top flagged rows, for people

With several seeds the probabilities of each row are averaged over them (an ensemble's are
better calibrated, and confident learning trusts them more). Every file is written whole.
"""

from __future__ import annotations

import csv
import dataclasses
import html
import io
import json
from pathlib import Path

import numpy as np

from bertfit.atomic import write_text_atomic
from bertfit.config import RunConfig
from bertfit.data.tasks import MULTI_LABEL, SINGLE_LABEL
from bertfit.errors import ConfigError, DataError
from bertfit.paths import check_output_dir
from bertfit.report import figure, page, section, table
from bertfit.sweeps.confident import (
    LabelIssues,
    find_label_issues,
    within_budget,
    wrong_labels_seen,
)
from bertfit.sweeps.fold_choice import CHOSEN_BY, FoldChoice, choose_trials, combine
from bertfit.sweeps.spec import SweepSpec

AUDIT_DIR = "audit"  # in the sweep directory, the default --output
ISSUES_FILE = "issues.csv"
SUMMARY_FILE = "audit.json"
CLEAN_FILE = "train-without-issues.jsonl"
REPORT_FILE = "report.html"
ISSUE_COLUMNS = (
    "rank",
    "row",
    "line",
    "text",
    "text_pair",
    "given_label",
    "suggested_label",
    "score",
    "given_probability",
    "suggested_probability",
    "decision",  # the reviewer's, empty until then: `bertfit relabel` applies them
    "new_label",
)
# What `estimated_wrong` is (cleanlab's name for it), and its neighbour `off_diagonal`.
ESTIMATE = (
    "rows minus the trace of the calibrated confident joint (cleanlab: num_label_issues with "
    "estimation_method='off_diagonal_calibrated'); off_diagonal is cleanlab's default count"
)
REPORTED_ROWS = 50  # flagged rows shown in report.html (all are in issues.csv)
# The folds judge labels only when their out-of-fold accuracy beats always answering the most
# common label by more than this many standard errors of that rate over the rows (binomial).
CHANCE_STANDARD_ERRORS = 2.0


@dataclasses.dataclass
class OutOfFold:
    """A trial's out-of-fold predictions: one entry per training row, in its order, the
    probabilities averaged over the seeds. With several trials and none named, each fold's
    rows come from the trial its own validation slice chose (`choices`, `fold_choice`)."""

    trial: str
    seeds: list[int]
    rows: list[dict]  # row, line, text, text_pair (when a pair task), target
    labels: list[str]
    given: np.ndarray  # [n] class ids
    probabilities: np.ndarray  # [n, m]
    choices: list[FoldChoice] = dataclasses.field(default_factory=list)


PER_FOLD = "per-fold"  # OutOfFold.trial when each fold's trial was chosen on its validation slice


def read_out_of_fold(sweep: Path, trial: str | None = None) -> OutOfFold:
    """The out-of-fold predictions of `trial` in the sweep directory `sweep`; by default its
    only trial, or with several, each seed's folds from the trials their validation slices
    chose (`fold_choice`: the held-out rows' labels never choose).

    Raises:
        ConfigError: no k-fold sweep there, no such trial, or no seed's folds all finished.
        DataError: a task other than single-label classification.
    """
    results = _results(sweep)
    names = [t["name"] for t in results["trials"]]
    if trial is not None and trial not in names:
        raise ConfigError(
            f"--trial {trial}: the sweep {sweep} has the trials {', '.join(names)}; pick one."
        )
    trials = [trial] if trial else names
    files = {t: _out_of_fold_files(sweep / "runs" / t) for t in trials}
    seeds = sorted({seed for by_seed in files.values() for seed in by_seed})
    if not seeds:
        raise ConfigError(
            f"{sweep / 'runs'} holds no out-of-fold predictions (runs/TRIAL/oof-seedS.jsonl) "
            f"of {', '.join(trials)}: a fold run did not finish. Rerun the sweep's command to "
            "finish it, then audit."
        )
    read = {
        (name, seed): (path, _read_jsonl(path))
        for name, by_seed in files.items()
        for seed, path in by_seed.items()
    }
    first, rows = next(iter(read.values()))
    for path, other in read.values():
        _check_same_rows(first, rows, path, other)
    _check_single_label(rows, first)
    per_seed, choices = [], []
    for seed in seeds:
        per_trial = {name: read[name, seed][1] for name in trials if (name, seed) in read}
        if len(trials) == 1:
            per_seed.append(per_trial[trials[0]])
            continue
        folds = sorted({r["fold"] for r in rows})
        chosen = choose_trials(sweep, list(per_trial), seed, folds, results["metric"])
        per_seed.append(combine(per_trial, chosen))
        choices += chosen
    labels = list(rows[0]["probabilities"])
    probabilities = np.mean(
        [[[r["probabilities"][label] for label in labels] for r in seed] for seed in per_seed],
        axis=0,
    )
    ids = {label: i for i, label in enumerate(labels)}
    given = np.array([ids[r["target"]] for r in rows], np.int64)
    kept = ("row", "line", "text", "text_pair", "target")
    return OutOfFold(
        trials[0] if len(trials) == 1 else PER_FOLD,
        seeds,
        [{k: r[k] for k in kept if k in r} for r in rows],
        labels,
        given,
        probabilities,
        choices,
    )


def _out_of_fold_files(trial: Path) -> dict[int, Path]:
    """A trial's out-of-fold files by seed (written once all of a seed's folds finished)."""
    return {_seed_of(f): f for f in sorted(trial.glob("oof-seed*.jsonl"), key=_seed_of)}


def _check_same_rows(first: Path, rows: list[dict], path: Path, other: list[dict]) -> None:
    if [(r["row"], r["target"]) for r in other] != [(r["row"], r["target"]) for r in rows]:
        raise DataError(
            f"{path} is not of the same training rows as {first}; the sweep directory "
            "was changed by hand. Rerun the sweep in a new --output-dir.",
            path=str(path),
            code="audit-out-of-fold-mismatch",
        )


def audit_sweep(
    sweep: str | Path,
    output: str | Path | None = None,
    *,
    trial: str | None = None,
    method: str = "prune-by-noise-rate",
    rank_by: str = "self-confidence",
    flag: str = "seen",
    top: int | None = None,
    max_fraction: float | None = None,
    report: bool = True,
) -> dict:
    """Audits the training labels of the k-fold sweep in `sweep`; writes `output` (default
    SWEEP/audit, see the module docstring) and returns the summary (audit.json's). `flag`
    (`confident.FLAG_RULES`): the first of the method's ranking, as many as the folds see
    wrong, or all of it. `top` and `max_fraction` bound the flagged rows to a review budget
    (the most likely wrong kept)."""
    sweep = Path(sweep)
    own = sweep / AUDIT_DIR
    folder = Path(output) if output is not None else own
    check_output_dir(folder, "--output", own=[own])  # not a run's or another sweep's folder
    out_of_fold = read_out_of_fold(sweep, trial)
    by_method = find_label_issues(out_of_fold.given, out_of_fold.probabilities, method, rank_by)
    seen = wrong_labels_seen(out_of_fold.given, out_of_fold.probabilities)
    found = by_method
    if flag == "seen" and seen is not None:
        found = within_budget(by_method, top=round(seen))
    chance = against_chance(out_of_fold)
    # no row is presented as wrong on the word of a coin toss
    issues = within_budget(found, 0 if chance["warning"] else top, max_fraction)
    folder.mkdir(parents=True, exist_ok=True)
    config = sweep_config(sweep)
    summary = {
        **_summary(sweep, out_of_fold, issues, method, rank_by),
        "flag": flag,
        "wrong_labels_seen": None if seen is None else round(seen, 1),
        "flagged_by_method": len(by_method.ranked),
        "found": len(found.ranked),
        "budget": {"top": top, "max_fraction": max_fraction},
        **chance,
    }
    records = issue_records(out_of_fold, issues)
    write_text_atomic(folder / ISSUES_FILE, issues_csv(out_of_fold, records))
    write_text_atomic(folder / CLEAN_FILE, _clean_jsonl(out_of_fold, issues, config))
    write_text_atomic(folder / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    if report:
        write_text_atomic(folder / REPORT_FILE, _page(summary, issues, records))
    return {**summary, "output": str(folder)}


def against_chance(out_of_fold: OutOfFold) -> dict:
    """How often the out-of-fold predictions are right, against always answering the most
    common given label; with a warning when they do not beat it by `CHANCE_STANDARD_ERRORS`
    (its binomial standard error over these rows): the folds' models cannot tell the classes
    apart, so a label they disagree with is not evidence (`audit_sweep` then flags none).

    Examples:
    >>> p = np.array([[0.6, 0.4], [0.4, 0.6], [0.6, 0.4], [0.4, 0.6]])
    >>> found = against_chance(OutOfFold("t1", [0], [], ["neg", "pos"], np.array([0, 0, 1, 1]), p))
    >>> found["out_of_fold_accuracy"], found["majority_rate"], found["warning"][:49]
    (0.5, 0.5, 'the out-of-fold predictions are right on 50% of t')
    """
    given, n = out_of_fold.given, len(out_of_fold.given)
    counts = np.bincount(given, minlength=len(out_of_fold.labels))
    majority = float(counts.max() / n)
    accuracy = float(np.mean(out_of_fold.probabilities.argmax(axis=1) == given))
    needed = majority + CHANCE_STANDARD_ERRORS * np.sqrt(majority * (1 - majority) / n)
    warning = None
    if accuracy <= needed and majority < 1:
        common = out_of_fold.labels[int(counts.argmax())]
        warning = (
            f"the out-of-fold predictions are right on {accuracy:.0%} of the {n} rows, no "
            f"better than always answering {common!r} ({majority:.0%}) could be by chance (on "
            f"{n} rows, above {min(needed, 1):.0%} is needed): the folds' models cannot tell "
            "the classes apart, so they cannot judge a label, and no row is flagged. Audit "
            "more rows, or train the folds longer (--epochs, --learning-rate) until they beat it."
        )
    return {
        "out_of_fold_accuracy": round(accuracy, 6),
        "majority_rate": round(majority, 6),
        "warning": warning,
    }


def audit_training(
    base: RunConfig,
    spec: SweepSpec,
    output_dir: str | Path,
    *,
    quiet: bool = False,
    reports: bool = True,
    **options,
) -> dict:
    """Runs (or resumes) the k-fold sweep `spec` over `base` in `output_dir` (`bertfit tune`),
    then audits it (`audit_sweep`'s `options`; with several trials, each fold's chosen on its
    validation slice, not tune's choice) into OUTPUT_DIR/audit."""
    from bertfit.sweeps.tune import tune

    if not spec.folds:
        raise ConfigError(
            "bertfit audit needs out-of-fold predictions: pass --folds K (5 is usual) to "
            "cross-validate the training rows, or --from SWEEP to audit a k-fold sweep's."
        )
    _check_task_before_training(base)
    tune(base, spec, output_dir, quiet=quiet, reports=reports)
    return audit_sweep(output_dir, report=reports, **options)


def _check_task_before_training(base: RunConfig) -> None:
    """A task the audit would refuse is refused before K runs train."""
    from bertfit.data.labelled import infer_run_task
    from bertfit.data.run_files import read_training_examples

    examples = read_training_examples(base.data.train, base)[: base.data.max_train_examples]
    task, _ = infer_run_task(examples, base)
    if task.kind != SINGLE_LABEL:
        _refuse_task(task.kind, base.data.train)


def issue_records(out_of_fold: OutOfFold, issues: LabelIssues) -> list[dict]:
    """The flagged rows in rank order, as issues.csv's columns (see the module docstring)."""
    p = out_of_fold.probabilities
    records = []
    for rank, i in enumerate(issues.ranked, 1):
        row, given, suggested = out_of_fold.rows[i], out_of_fold.given[i], issues.suggested[i]
        records.append(
            {
                "rank": rank,
                "row": row["row"],
                "line": row["line"],
                "text": row["text"],
                "text_pair": row.get("text_pair"),
                "given_label": out_of_fold.labels[given],
                "suggested_label": out_of_fold.labels[suggested],
                "score": round(float(issues.quality[i]), 6),
                "given_probability": round(float(p[i, given]), 6),
                "suggested_probability": round(float(p[i, suggested]), 6),
            }
        )
    return records


def issues_csv(out_of_fold: OutOfFold, records: list[dict]) -> str:
    """issues.csv's text (a text_pair column only for a pair task)."""
    pairs = any("text_pair" in r for r in out_of_fold.rows)
    columns = [c for c in ISSUE_COLUMNS if pairs or c != "text_pair"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, columns, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(records)
    return buffer.getvalue()


def read_issues(path: str | Path) -> list[dict]:
    """issues.csv read back, its numbers as numbers (a review tool's or a test's reader).

    Raises:
        DataError: not an issues file of `bertfit audit`.
    """
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        optional = {"text_pair", "decision", "new_label"}
        missing = set(ISSUE_COLUMNS) - optional - set(reader.fieldnames or [])
        if missing:
            raise DataError(
                f"not an issues file of bertfit audit: no column(s) {', '.join(sorted(missing))}.",
                path=str(path),
                code="audit-not-an-issues-file",
            )
        rows = list(reader)
    for row in rows:
        for key in ("rank", "row", "line"):
            row[key] = int(row[key])
        for key in ("score", "given_probability", "suggested_probability"):
            row[key] = float(row[key])
    return rows


def wrong_labels(summary: dict) -> str:
    """The estimates of wrong labels in words, saying which is which (see `ESTIMATE`)."""
    joint = (
        f"about {summary['estimated_wrong']:.0f} wrong labels estimated: rows minus the trace of "
        f"the calibrated confident joint, the folds' own mistakes counted too; its raw "
        f"off-diagonal, cleanlab's default count, holds {summary['off_diagonal']}"
    )
    seen = summary.get("wrong_labels_seen")
    return joint if seen is None else f"the folds see about {seen:.0f} wrong labels; {joint}"


# On Rotten Tomatoes with a fifth of the labels flipped the audit found 16.3% and 22.9% of the
# rows (10,205 and 3,000 rows), and dropping or relabelling them unread did not help the
# retrained model; with a tenth flipped (9.9% found) dropping won back most of the noise's cost.
READ_FIRST_FRACTION = 0.15


def acting_advice(summary: dict) -> str:
    """What to do with the list before reading it, from how much of the set the audit found
    (before a review budget): the measured rule in docs/audit.md."""
    found = summary["found"] / summary["rows"]
    if summary["warning"] or found < READ_FIRST_FRACTION:
        return "dropping unread rows cost accuracy unless the folds were strong: docs/audit.md"
    return (
        f"the audit found {found:.1%} of the rows: at {READ_FIRST_FRACTION:.0%} or more, "
        "dropping or relabelling the list unread did not help the retrained model where "
        "measured; read it and decide row by row: docs/audit.md"
    )


def predicted_by(summary: dict) -> str:
    """Which trial's runs made the audited predictions, in words.

    Examples:
    >>> choices = [{"trial": "t2"}, {"trial": "t1"}, {"trial": "t2"}]
    >>> predicted_by({"trial": PER_FOLD, "per_fold_choice": {"choices": choices}})
    "each fold's trial, chosen on its validation slice: t2 in 2 of 3, t1 in 1 of 3 folds"
    """
    if summary["trial"] != PER_FOLD:
        return f"trial {summary['trial']}"
    counts: dict[str, int] = {}
    for choice in summary["per_fold_choice"]["choices"]:
        counts[choice["trial"]] = counts.get(choice["trial"], 0) + 1
    total = sum(counts.values())
    tally = ", ".join(f"{trial} in {n} of {total}" for trial, n in counts.items())
    return f"each fold's trial, chosen on its validation slice: {tally} folds"


def _summary(
    sweep: Path, out_of_fold: OutOfFold, issues: LabelIssues, method: str, rank_by: str
) -> dict:
    labels, n = out_of_fold.labels, len(out_of_fold.rows)
    flagged_given = np.bincount(out_of_fold.given[issues.flagged], minlength=len(labels))
    return {
        "sweep": str(sweep),
        "trial": out_of_fold.trial,
        **_per_fold_choice(out_of_fold),
        "seeds": out_of_fold.seeds,
        "rows": n,
        "labels": labels,
        "method": method,
        "rank_by": rank_by,
        "flagged": int(issues.flagged.sum()),
        "flagged_fraction": float(issues.flagged.mean()),
        "estimated_wrong": round(issues.estimated_wrong, 3),
        "estimated_wrong_by": ESTIMATE,
        "off_diagonal": issues.off_diagonal,
        "flagged_per_given_label": dict(zip(labels, flagged_given.tolist(), strict=True)),
        "thresholds": dict(zip(labels, np.round(issues.thresholds, 6).tolist(), strict=True)),
        "confident_joint": {
            "rows": "given label",
            "columns": "confident label",
            "counts": issues.confident_joint.tolist(),
            "calibrated": np.round(issues.calibrated_joint, 3).tolist(),
        },
        "files": {"issues": ISSUES_FILE, "clean_train": CLEAN_FILE},
    }


def _per_fold_choice(out_of_fold: OutOfFold) -> dict:
    """audit.json's record of which trial predicted each seed's folds (several trials)."""
    if not out_of_fold.choices:
        return {}
    return {
        "per_fold_choice": {
            "chosen_by": CHOSEN_BY,
            "choices": [dataclasses.asdict(c) for c in out_of_fold.choices],
        }
    }


def _clean_jsonl(out_of_fold: OutOfFold, issues: LabelIssues, config: RunConfig) -> str:
    """The unflagged training rows in the training file's columns (as the fold files are)."""
    d = config.data
    lines = []
    for row, flagged in zip(out_of_fold.rows, issues.flagged, strict=True):
        if flagged:
            continue
        record = {d.text_column: row["text"]}
        if d.text_pair_column:
            record[d.text_pair_column] = row.get("text_pair")
        record[d.label_column] = row["target"]
        lines.append(json.dumps(record, ensure_ascii=False) + "\n")
    return "".join(lines)


def _check_single_label(rows: list[dict], path: Path) -> None:
    first = rows[0] if rows else {}
    if "probabilities" not in first or "label" not in first:
        _refuse_task("regression" if "value" in first else "multi-label", str(path))


def _refuse_task(kind: str, path: str) -> None:
    fix = (
        ": for multi-label, audit each label as its own two-class task (a yes/no column, "
        "--task single-label)."
        if kind == MULTI_LABEL
        else "; a number has no other class to be confused with."
    )
    raise DataError(
        "bertfit audit finds wrong labels of single-label classification (one class per row); "
        f"this task is {kind}. Confident learning's per-class thresholds need one true class "
        f"per row{fix}",
        path=path,
        code="audit-task",
    )


def _results(sweep: Path) -> dict:
    path = sweep / "results.json"
    if not (sweep / "sweep.json").is_file() or not path.is_file():
        raise ConfigError(
            f"{sweep} is not a bertfit sweep with results (no sweep.json and results.json); "
            "run `bertfit tune --folds K ... --output-dir DIR` (or `bertfit audit --folds K` "
            "with the train flags) first."
        )
    results = json.loads(path.read_text(encoding="utf-8"))
    if not results.get("folds"):
        raise ConfigError(
            f"the sweep {sweep} was not cross-validated (no --folds), so it has no out-of-fold "
            "predictions to audit; run bertfit audit with --folds K and the train flags."
        )
    return results


def sweep_config(sweep: Path) -> RunConfig:
    """The sweep's base run config, from its sweep.json."""
    spec = sweep / "sweep.json"
    return RunConfig.from_dict(json.loads(spec.read_text(encoding="utf-8"))["config"], str(spec))


def _seed_of(path: Path) -> int:
    return int(path.stem.removeprefix("oof-seed"))


def _read_jsonl(path: Path) -> list[dict]:
    """The rows of an out-of-fold file; a line that is not a JSON object is a `DataError`."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            try:
                row = json.loads(line)
            except ValueError:
                row = None
            if not isinstance(row, dict) or not {"row", "target"} <= row.keys():
                raise DataError(
                    "not an out-of-fold prediction of bertfit tune; the sweep directory was "
                    "changed by hand. Rerun the sweep in a new --output-dir.",
                    path=str(path),
                    line=number,
                    code="audit-out-of-fold-mismatch",
                )
            rows.append(row)
    return rows


def _page(summary: dict, issues: LabelIssues, records: list[dict]) -> str:
    labels = summary["labels"]
    warning = summary["warning"]
    caution = f"<strong>Warning: {html.escape(warning)}</strong></p><p>" if warning else ""
    intro = caution + (
        f"{summary['flagged']} of {summary['rows']} training rows flagged "
        f"({summary['flagged_fraction']:.1%}; {wrong_labels(summary)}) by "
        f"{summary['method']}, ranked by "
        f"{summary['rank_by']}; out-of-fold predictions of {predicted_by(summary)}, seed(s) "
        f"{', '.join(map(str, summary['seeds']))}, right on "
        f"{summary['out_of_fold_accuracy']:.1%} of the rows (the most common label alone: "
        f"{summary['majority_rate']:.1%}). All flagged rows: {ISSUES_FILE}."
    )
    joint_rows = [
        [f"given {label}", *counts, f"{summary['thresholds'][label]:.4f}"]
        for label, counts in zip(labels, issues.confident_joint.tolist(), strict=True)
    ]
    columns = ("rank", "row", "text", "given_label", "suggested_label", "score")
    top = [[r[c] for c in columns] for r in records[:REPORTED_ROWS]]
    sections = [
        section(
            "The confident joint (rows: given label; columns: confident label)",
            [table(["", *labels, "threshold"], joint_rows)],
        ),
        section("Label quality, flagged and kept rows", [_quality_plot(issues)]),
        section(
            f"The {len(top)} most likely wrong labels",
            [table(["rank", "row", "text", "given", "suggested", "score"], top)],
        ),
    ]
    return page("bertfit audit", intro, sections)


def _quality_plot(issues: LabelIssues) -> str:
    def draw(canvas) -> str:
        axes = canvas.subplots()
        bins = np.linspace(0, 1, 41)
        axes.hist(issues.quality[~issues.flagged], bins=bins, alpha=0.6, label="kept")
        axes.hist(issues.quality[issues.flagged], bins=bins, alpha=0.8, label="flagged")
        axes.set_xlabel("label quality (score)")
        axes.set_ylabel("rows")
        axes.set_yscale("log")
        axes.legend()
        return "the given labels' quality: flagged rows and kept rows"

    return figure(draw)
