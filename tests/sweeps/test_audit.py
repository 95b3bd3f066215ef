"""`bertfit audit`: confident learning checked against a hand-computed example, the audit
files written and read back, and the CLI's refusals (exit 2, one line)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest

from bertfit.cli import build_parser, loads_tensorflow, main
from bertfit.errors import DataError
from bertfit.sweeps.audit import CLEAN_FILE, ISSUES_FILE, audit_sweep, read_issues
from bertfit.sweeps.confident import (
    calibrate,
    confident_classes,
    confident_joint,
    find_label_issues,
    label_quality,
    per_class_thresholds,
)
from tests.tiny import sentiment_rows, train_args, write_csv

# Eight rows, three classes; labels and out-of-fold probabilities chosen so each step of
# confident learning can be followed by hand (below).
LABELS = np.array([0, 0, 0, 1, 1, 1, 2, 2])
P = np.array(
    [
        [0.8, 0.1, 0.1],  # 0: a sure 0
        [0.6, 0.3, 0.1],  # 1: a 0, less sure
        [0.1, 0.8, 0.1],  # 2: labelled 0, confidently a 1: wrong
        [0.1, 0.8, 0.1],  # 3: a sure 1
        [0.2, 0.7, 0.1],  # 4: a 1
        [0.1, 0.1, 0.8],  # 5: labelled 1, confidently a 2: wrong
        [0.1, 0.1, 0.8],  # 6: a sure 2
        [0.3, 0.1, 0.6],  # 7: a 2
    ]
)


def test_confident_learning_matches_the_hand_computed_example():
    # t_j = mean p_j over the rows labelled j
    t = per_class_thresholds(LABELS, P)
    np.testing.assert_allclose(t, [0.5, 0.5333333, 0.7])
    # row 1: p0 0.6 ≥ 0.5 → 0; row 4: p1 0.7 ≥ 0.533 → 1; row 7: p2 0.6 < 0.7 and p0 0.3 < 0.5
    assert confident_classes(P, t).tolist() == [0, 0, 1, 1, 1, 2, 2, -1]
    joint = confident_joint(LABELS, confident_classes(P, t), 3)
    assert joint.tolist() == [[2, 1, 0], [0, 2, 1], [0, 0, 1]]
    # each row scaled to its label's count: [3, 3, 2] rows; class 2's one counted row → 2
    calibrated = calibrate(joint, np.array([3.0, 3.0, 2.0]))
    np.testing.assert_allclose(calibrated, [[2, 1, 0], [0, 2, 1], [0, 0, 2]])

    issues = find_label_issues(LABELS, P)
    assert issues.estimated_wrong == pytest.approx(2.0)
    # prune by noise rate: round(C̃[0][1]) = 1 row labelled 0 with the largest p1 - p0: row 2;
    # round(C̃[1][2]) = 1 row labelled 1 with the largest p2 - p1: row 5. Ranked by p(given):
    # row 5 (0.1) ties row 2 (0.1): the earlier row first.
    assert issues.ranked.tolist() == [2, 5]
    assert issues.suggested[[2, 5]].tolist() == [1, 2]
    assert find_label_issues(LABELS, P, method="confident-joint").ranked.tolist() == [2, 5]


def test_the_estimate_of_wrong_labels_is_the_calibrated_joints_and_says_so(tmp_path, capsys):
    """n - trace(C̃) counts the rows of a class that reach no threshold in proportion to its
    counted ones; cleanlab's default count (the raw joint's off-diagonal) leaves them out: the
    two differ, and the audit says which is which."""
    labels = np.array([0, 0, 0, 0, 1, 1, 1])
    p = np.array([[0.95, 0.05], [0.5, 0.5], [0.5, 0.5], *[[0.2, 0.8]] * 4])
    issues = find_label_issues(labels, p)
    # t = [0.5375, 0.8]: rows 1 and 2 reach neither, row 3 is confidently a 1; C[0] = [1, 1]
    # scaled to class 0's four rows: C̃[0] = [2, 2]
    assert issues.confident_joint.tolist() == [[1, 1], [0, 3]]
    assert (issues.estimated_wrong, issues.off_diagonal) == (2.0, 1)

    assert main(["audit", "--from", str(_sweep_dir(tmp_path, LABELS_12, P_12))]) == 0
    out = capsys.readouterr().out
    assert (
        "about 2 wrong labels estimated: rows minus the trace of the calibrated confident joint, "
        "the folds' own mistakes counted too; its raw off-diagonal, cleanlab's default count, "
        "holds 2)" in out
    )
    saved = json.loads((tmp_path / "sweep/audit/audit.json").read_text())
    assert "off_diagonal_calibrated" in saved["estimated_wrong_by"] and saved["off_diagonal"] == 2


def test_the_rankings_and_the_refusal_to_flag_what_the_model_predicts_as_labelled():
    np.testing.assert_allclose(label_quality(LABELS, P, "self-confidence")[[2, 4]], [0.1, 0.7])
    # (0.7 - 0.2 + 1) / 2 and (0.1 - 0.8 + 1) / 2
    np.testing.assert_allclose(label_quality(LABELS, P, "normalized-margin")[[4, 2]], [0.75, 0.15])
    # row 2 is labelled 1 and confidently a 0 (t = [0.4, 0.725]: p0 0.45 ≥ 0.4, p1 0.55 <
    # 0.725), but the model predicts 1 (0.55 > 0.45): not flagged
    labels = np.array([0, 0, 1, 1])
    p = np.array([[0.3, 0.7], [0.5, 0.5], [0.45, 0.55], [0.1, 0.9]])
    assert confident_classes(p, per_class_thresholds(labels, p)).tolist() == [-1, 0, 0, 1]
    assert find_label_issues(labels, p, method="confident-joint").ranked.tolist() == []


def test_every_class_keeps_a_row():
    labels = np.array([0, 0, 0, 1])
    p = np.array([[0.9, 0.1], [0.9, 0.1], [0.9, 0.1], [0.9, 0.1]])  # the only 1 looks like a 0
    issues = find_label_issues(labels, p, method="confident-joint")
    assert not issues.flagged[3]


def test_the_folds_own_mistakes_are_not_flagged_as_wrong_labels(tmp_path, capsys):
    """A synthetic audit with the flipped rows known: folds sure of 80% of the rows and
    unsure (and wrong on three fifths of them) of the rest. The calibrated joint counts their
    mistakes as wrong labels (197 for 86 the folds see); the default flags as many rows as the
    folds see wrong (80), the flipped rows they see at a higher precision."""
    rng = np.random.default_rng(0)
    n, flipped = 2000, rng.choice(2000, 100, replace=False)
    true = rng.integers(0, 2, n)
    sure = rng.random(n) < 0.8
    p_true = np.where(sure, rng.uniform(0.8, 0.99, n), rng.uniform(0.05, 0.7, n))
    given = true.copy()
    given[flipped] = 1 - true[flipped]
    p = np.stack([np.where(true == 0, p_true, 1 - p_true)] * 2, axis=1)
    p[:, 1] = 1 - p[:, 0]
    seen_flips = set(flipped[p_true[flipped] > 0.5].tolist())  # the folds right about them
    names = np.array(["neg", "pos"])

    def audit(*flags: str) -> tuple[dict, set[int]]:
        out = tmp_path / f"audit{len(flags)}"
        assert main(["audit", "--from", str(sweep), "--output", str(out), "--json", *flags]) == 0
        rows = {r["row"] for r in read_issues(out / ISSUES_FILE)}
        return json.loads(capsys.readouterr().out), rows

    sweep = _sweep_dir(tmp_path, names[given].tolist(), p.tolist())
    summary, default = audit()
    by_method, every = audit("--flag", "all")

    assert summary["estimated_wrong"] > 2 * len(seen_flips)  # the joint counts the mistakes
    assert summary["wrong_labels_seen"] == pytest.approx(len(seen_flips), rel=0.2)
    assert len(default) == round(summary["wrong_labels_seen"]) < len(every)
    assert summary["flagged_by_method"] == by_method["flagged"] == len(every)
    precision, precision_all = (len(r & seen_flips) / len(r) for r in (default, every))
    assert precision > 1.3 * precision_all  # 0.56 against 0.40


def _sweep_dir(
    root: Path, labels: list[str], probabilities: list[list[float]], kind=None, pairs=False
):
    """A k-fold sweep directory as `bertfit tune --folds 2` leaves it, its predictions given."""
    from bertfit.config import DataConfig, RunConfig

    sweep = root / "sweep"
    (sweep / "runs" / "t1").mkdir(parents=True)
    data = DataConfig(train="train.csv", text_column="review", label_column="y")
    data.text_pair_column = "answer" if pairs else None
    config = RunConfig(data=data)
    (sweep / "sweep.json").write_text(json.dumps({"spec": {}, "config": config.to_dict()}))
    results = {"folds": 2, "chosen_trial": "t1", "trials": [{"name": "t1"}]}
    (sweep / "results.json").write_text(json.dumps(results))
    names = ["neg", "pos"]
    rows = []
    for i, (label, p) in enumerate(zip(labels, probabilities, strict=True)):
        row = {"row": i, "line": i + 2, "fold": 1 + i % 2, "text": f'text, "{i}"\n'}
        if pairs:
            row["text_pair"] = f"pair {i}"
        row["target"] = label
        if kind == "regression":
            row["value"] = 0.5
        else:
            row["label"] = names[int(np.argmax(p))]
            row["probabilities"] = dict(zip(names, p, strict=True))
        rows.append(row)
    (sweep / "runs/t1/oof-seed0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return sweep


# Six rows, two of them wrong (2 and 5), then three of each class at its threshold (the mean
# probability of the class over its rows: the thresholds stay 0.633 and 0.6): 10 of 12 rows right
# is above chance (`against_chance`: 79% is needed), so the folds' word counts.
SIX = ["neg", "neg", "neg", "pos", "pos", "pos"]
SIX_P = [[0.9, 0.1], [0.8, 0.2], [0.2, 0.8], [0.1, 0.9], [0.2, 0.8], [0.9, 0.1]]
LABELS_12 = SIX + ["neg"] * 3 + ["pos"] * 3
P_12 = SIX_P + [[1.9 / 3, 1.1 / 3]] * 3 + [[0.4, 0.6]] * 3


def test_the_issues_file_and_the_clean_training_file_read_back(tmp_path):
    labels, p = LABELS_12, P_12
    sweep = _sweep_dir(tmp_path, labels, p)

    summary = audit_sweep(sweep)

    issues = read_issues(sweep / "audit" / ISSUES_FILE)
    assert [(r["row"], r["given_label"], r["suggested_label"]) for r in issues] == [
        (5, "pos", "neg"),
        (2, "neg", "pos"),
    ]  # p(given) 0.1 before 0.2
    assert issues[0] == {
        "rank": 1,
        "row": 5,
        "line": 7,
        "text": 'text, "5"\n',  # quoted, newline and all
        "given_label": "pos",
        "suggested_label": "neg",
        "score": 0.1,
        "given_probability": 0.1,
        "suggested_probability": 0.9,
        "decision": "",  # for the review: `bertfit relabel` applies it
        "new_label": "",
    }
    clean = [json.loads(line) for line in (sweep / "audit" / CLEAN_FILE).read_text().splitlines()]
    assert clean == [
        {"review": f'text, "{i}"\n', "y": labels[i]} for i in (0, 1, 3, 4, *range(6, 12))
    ]  # the training file's columns, flagged rows left out
    saved = json.loads((sweep / "audit/audit.json").read_text())
    assert saved["flagged"] == summary["flagged"] == 2 and saved["rows"] == 12
    assert saved["confident_joint"]["counts"] == [[5, 1], [1, 5]]
    assert (saved["out_of_fold_accuracy"], saved["majority_rate"]) == (0.833333, 0.5)
    assert saved["warning"] is None
    assert "<img" in (sweep / "audit/report.html").read_text()


def test_a_review_budget_keeps_the_most_likely_wrong_rows(tmp_path, capsys):
    sweep = _sweep_dir(tmp_path, LABELS_12, P_12)  # rows 5 and 2 flagged, in that order
    top = tmp_path / "top"

    assert main(["audit", "--from", str(sweep), "--top", "1", "--output", str(top)]) == 0
    out = capsys.readouterr().out
    assert "(the review budget kept the first 1 of 2 found)" in out
    assert "the folds are right on 83.3% of the rows (the most common label alone: 50.0%)" in out
    assert [r["row"] for r in read_issues(top / ISSUES_FILE)] == [5]
    kept = [json.loads(line)["review"] for line in (top / CLEAN_FILE).open()]
    assert 'text, "2"\n' in kept and len(kept) == 11  # row 2 is trained on, not lost
    saved = json.loads((top / "audit.json").read_text())
    assert (saved["flagged"], saved["found"]) == (1, 2)
    assert saved["budget"] == {"top": 1, "max_fraction": None}
    # 10% of 12 rows rounds down to 1; 20% to 2: the budget then flags what was found
    assert audit_sweep(sweep, tmp_path / "f1", max_fraction=0.1, report=False)["flagged"] == 1
    assert audit_sweep(sweep, tmp_path / "f2", max_fraction=0.2, report=False)["flagged"] == 2

    for flag, value in (("--max-fraction", "1.5"), ("--top", "0")):
        with pytest.raises(SystemExit) as exited:
            main(["audit", "--from", str(sweep), flag, value])
        err = capsys.readouterr().err
        assert exited.value.code == 2 and len(err.splitlines()) == 1
        assert f"argument {flag}: expected" in err and repr(value) in err


def test_when_the_audit_finds_15_percent_or_more_it_says_to_read_the_list_first(tmp_path, capsys):
    """At a fifth of the labels flipped the audit found 16-23% of the rows and neither dropping
    nor relabelling them unread helped (docs/audit.md): from 15% found, the advice says so,
    whatever the review budget keeps."""
    sure = [[0.95, 0.05], [0.05, 0.95]] * 2  # four more rows, right and sure
    cases = {
        "many": (LABELS_12, P_12, ["--top", "1"]),  # 2 of 12 found: 16.7%
        "few": (LABELS_12 + ["neg", "pos"] * 2, P_12 + sure, []),  # 2 of 16: 12.5%
    }
    said = {}
    for name, (labels, p, flags) in cases.items():
        sweep = _sweep_dir(tmp_path / name, labels, p)
        assert main(["audit", "--from", str(sweep), *flags]) == 0
        said[name] = capsys.readouterr().out
        assert json.loads((sweep / "audit/audit.json").read_text())["found"] == 2

    read_first = "the audit found 16.7% of the rows: at 15% or more, dropping or relabelling"
    assert read_first in said["many"] and "read it and decide row by row" in said["many"]
    assert "dropping unread rows cost accuracy unless the folds were strong" in said["few"]
    assert "decide row by row" not in said["few"]


def test_a_pair_task_keeps_its_second_text_and_a_trial_must_exist(tmp_path, capsys):
    sweep = _sweep_dir(tmp_path, LABELS_12, P_12, pairs=True)
    audit_sweep(sweep, tmp_path / "elsewhere", report=False)
    issues = read_issues(tmp_path / "elsewhere" / ISSUES_FILE)
    assert [(r["row"], r["text_pair"]) for r in issues] == [(5, "pair 5"), (2, "pair 2")]
    first = json.loads((tmp_path / "elsewhere" / CLEAN_FILE).read_text().splitlines()[0])
    assert first == {"review": 'text, "0"\n', "answer": "pair 0", "y": "neg"}
    assert not (tmp_path / "elsewhere" / "report.html").exists()
    assert main(["audit", "--from", str(sweep), "--trial", "t9"]) == 2
    assert "--trial t9: the sweep" in capsys.readouterr().err


def test_seeds_are_averaged_and_a_changed_predictions_file_is_refused(tmp_path, capsys):
    sweep = _sweep_dir(tmp_path, LABELS_12, P_12)
    seed0 = sweep / "runs/t1/oof-seed0.jsonl"
    rows = [json.loads(line) for line in seed0.read_text().splitlines()]
    rows[5]["probabilities"] = {"neg": 0.1, "pos": 0.9}  # the second seed finds row 5 right
    (sweep / "runs/t1/oof-seed1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = audit_sweep(sweep, report=False)
    assert summary["seeds"] == [0, 1]
    issues = read_issues(sweep / "audit" / ISSUES_FILE)
    # row 5's p(pos) averages to 0.5: below t_pos (0.667) and t_neg (0.633), counted nowhere;
    # the joint then holds one wrong label, row 2
    assert [(r["row"], r["given_probability"]) for r in issues] == [(2, 0.2)]

    (sweep / "runs/t1/oof-seed1.jsonl").write_text(seed0.read_text()[:40] + "\n")
    assert main(["audit", "--from", str(sweep)]) == 2
    assert "oof-seed1.jsonl:1: not an out-of-fold prediction" in capsys.readouterr().err


def _fold_run(sweep: Path, trial: str, fold: int, validation_loss: float | None) -> None:
    """A finished fold run at seed 0 with this loss on its validation slice (None: unfinished)."""
    run = sweep / "runs" / trial / f"seed0-fold{fold}"
    run.mkdir(parents=True)
    status = "running" if validation_loss is None else "finished"
    accuracy = None if validation_loss is None else 1 - validation_loss
    metrics = {"status": status, "final": {"loss": validation_loss, "accuracy": accuracy}}
    (run / "metrics.json").write_text(json.dumps(metrics))


def test_with_several_trials_each_fold_is_predicted_by_the_trial_its_validation_chose(
    tmp_path, capsys
):
    """A learning-rate grid, --best-metric loss: fold 1's validation slice chose t2 (whose run
    finds row 2 right), fold 2's t2 run did not finish, so t1 predicts it (row 5 stays wrong).
    tune's choice, made on the held-out rows (t1 here), does not choose the audit's rows."""
    sweep = _sweep_dir(tmp_path, LABELS_12, P_12)
    t1_rows = (sweep / "runs/t1/oof-seed0.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in t1_rows]
    for row in rows:  # t2 finds rows 2 and 5 right
        if row["row"] in (2, 5):
            row["probabilities"] = dict(zip(["neg", "pos"], P_12[row["row"]][::-1], strict=True))
    (sweep / "runs/t2").mkdir()
    (sweep / "runs/t2/oof-seed0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = {"folds": 2, "metric": "loss", "chosen_trial": "t1"}
    results["trials"] = [{"name": "t1"}, {"name": "t2"}]
    (sweep / "results.json").write_text(json.dumps(results))
    for trial, fold, loss in [("t1", 1, 0.6), ("t2", 1, 0.4), ("t1", 2, 0.5), ("t2", 2, None)]:
        _fold_run(sweep, trial, fold, loss)

    assert main(["audit", "--from", str(sweep)]) == 0

    by = "each fold's trial, chosen on its validation slice: t2 in 1 of 2, t1 in 1 of 2 folds"
    assert f"(predicted by {by})" in capsys.readouterr().out
    summary = json.loads((sweep / "audit" / "audit.json").read_text())
    choices = summary["per_fold_choice"]["choices"]
    assert summary["trial"] == "per-fold"
    assert [(c["fold"], c["trial"], c["validation_score"]) for c in choices] == [
        (1, "t2", 0.4),
        (2, "t1", 0.5),
    ]
    assert {c["metric"] for c in choices} == {"loss"}  # the sweep's (--best-metric)
    assert [r["row"] for r in read_issues(sweep / "audit" / ISSUES_FILE)] == [5]
    t1_alone = audit_sweep(sweep, tmp_path / "t1", trial="t1", report=False)
    assert [r["row"] for r in read_issues(Path(t1_alone["output"]) / ISSUES_FILE)] == [5, 2]


def test_audit_writes_its_own_folder_and_no_run_or_other_sweep(tmp_path, capsys):
    sweep = _sweep_dir(tmp_path, SIX, SIX_P)
    other = _sweep_dir(tmp_path / "other", SIX, SIX_P)
    run = sweep / "runs" / "t1" / "seed0-fold1"  # a finished run, as `bertfit train` leaves it
    (run / "encoder").mkdir(parents=True)
    for name in ("config.yaml", "labels.json", "metrics.json"):
        (run / name).write_text("{}")
    (run / "report.html").write_text("the run's report")
    for output, words in [
        (run, "is the run directory"),
        (sweep, "is the sweep directory"),
        (other / "audit", "is inside the sweep directory"),  # another sweep's audit
    ]:
        assert main(["audit", "--from", str(sweep), "--output", str(output)]) == 2
        err = capsys.readouterr().err.strip()
        assert words in err and len(err.splitlines()) == 1, err
    assert (run / "report.html").read_text() == "the run's report"
    assert sorted(p.name for p in run.iterdir()) == [
        "config.yaml", "encoder", "labels.json", "metrics.json", "report.html"
    ]  # fmt: skip
    assert not (sweep / ISSUES_FILE).exists() and not (other / "audit").exists()
    for own in (None, sweep / "audit"):  # the sweep's own audit folder, named or not
        assert audit_sweep(sweep, own, report=False)["output"] == str(sweep / "audit")


def test_folds_at_chance_flag_nothing_and_say_why(tmp_path, capsys):
    # every fold at chance: the rows' probabilities hover at 0.5, half the argmaxes right
    p = [[0.51, 0.49], [0.49, 0.51], [0.5, 0.5], [0.51, 0.49], [0.49, 0.51], [0.5, 0.5]]
    sweep = _sweep_dir(tmp_path, SIX, p)
    assert find_label_issues(np.array([0, 0, 0, 1, 1, 1]), np.array(p)).flagged.any()

    assert main(["audit", "--from", str(sweep)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("flagged 0 of 6 training rows")
    warning = "right on 50% of the 6 rows, no better than always answering 'neg' (50%)"
    assert err.startswith("bertfit audit: warning: the out-of-fold predictions are " + warning)
    assert "cannot judge a label" in err and len(err.splitlines()) == 1
    saved = json.loads((sweep / "audit/audit.json").read_text())
    assert saved["flagged"] == 0 and warning in saved["warning"]
    assert (saved["out_of_fold_accuracy"], saved["majority_rate"]) == (0.5, 0.5)
    assert read_issues(sweep / "audit" / ISSUES_FILE) == []
    assert len((sweep / "audit" / CLEAN_FILE).read_text().splitlines()) == 6  # every row kept
    assert "Warning: the out-of-fold predictions" in (sweep / "audit/report.html").read_text()
    # four of six right (67%) is no better on six rows: 91% is needed
    summary = audit_sweep(_sweep_dir(tmp_path / "four", SIX, SIX_P), report=False)
    assert summary["flagged"] == 0 and "(on 6 rows, above 91% is needed)" in summary["warning"]


def test_audit_refuses_regression_and_a_sweep_without_folds(tmp_path, capsys):
    sweep = _sweep_dir(tmp_path, ["1.0", "2.0"], [[0.5, 0.5]] * 2, kind="regression")
    with pytest.raises(DataError, match="single-label classification.*regression"):
        audit_sweep(sweep)
    assert main(["audit", "--from", str(sweep)]) == 2
    assert "this task is regression" in capsys.readouterr().err
    (sweep / "results.json").write_text(json.dumps({"folds": None, "trials": []}))
    assert main(["audit", "--from", str(sweep)]) == 2
    assert "was not cross-validated" in capsys.readouterr().err
    assert main(["audit", "--from", str(tmp_path / "nothing")]) == 2
    assert "is not a bertfit sweep" in capsys.readouterr().err


def test_audit_refuses_train_flags_beside_from_and_no_folds(tmp_path, capsys):
    assert main(["audit", "--from", str(tmp_path), "--train", "x.csv"]) == 2
    assert "--train would not be used" in capsys.readouterr().err
    train = write_csv(tmp_path / "train.csv", sentiment_rows(8))
    assert main(["audit", "--train", str(train), "--output-dir", str(tmp_path / "s")]) == 2
    assert "pass --folds K" in capsys.readouterr().err
    assert main(["audit", "--train", str(train), "--folds", "2"]) == 2
    assert "--output-dir" in capsys.readouterr().err


def test_audit_refuses_multi_label_before_training(tmp_path, capsys):
    train = write_csv(tmp_path / "train.csv", [("a b", "x|y"), ("c", "x"), ("d", "y")] * 2)
    code = main(
        ["audit", "--train", str(train), "--folds", "2", "--output-dir", str(tmp_path / "s")]
        + ["--task", "multi-label"]
    )
    assert code == 2
    assert "this task is multi-label" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()  # nothing trained, nothing written


@pytest.mark.slow  # two tiny fold runs trained and predicted: ~30 s on 2 cores
def test_audit_runs_the_folds_and_finds_flipped_labels(tmp_path, trainable_hf_dir, capsys):
    # 32 rows a fold (29 trained on, 3 its validation slice): the tiny model needs about 60
    # steps to beat chance (3 epochs of batch 8 left its folds at 48% right, and the audit's
    # flags were noise), and more than 21 rows not to learn them by heart (56% right)
    rows = sentiment_rows(64, seed=0)
    flipped = [3, 10, 17]
    noisy = [(t, ("neg" if y == "pos" else "pos") if i in flipped else y) for i, (t, y) in
             enumerate(rows)]  # fmt: skip
    train = write_csv(tmp_path / "train.csv", noisy)
    sweep = tmp_path / "audit-sweep"
    args = train_args(
        trainable_hf_dir, train, sweep, command="audit", folds=2, buckets="16",
        strategy="default", learning_rate="5e-3", epochs=8, batch_size=4, dropout=0,
        json=True, trial="t1",
    )  # fmt: skip

    assert main(args) == 0

    summary = json.loads(capsys.readouterr().out)
    assert summary["warning"] is None and summary["out_of_fold_accuracy"] > 0.7
    issues = read_issues(Path(summary["output"]) / ISSUES_FILE)
    assert summary["rows"] == 64 and summary["flagged"] == len(issues)
    assert {r["row"] for r in issues} & set(flipped)  # at least one flipped label found
    assert [r["rank"] for r in issues] == list(range(1, len(issues) + 1))
    assert [r["score"] for r in issues] == sorted(r["score"] for r in issues)
    clean = (Path(summary["output"]) / CLEAN_FILE).read_text().splitlines()
    assert len(clean) == 64 - len(issues)
    # the audit output is the sweep's own: rerunning the command resumes nothing, audits again
    assert main(args) == 0


def _reviewed(tmp_path: Path, decisions: dict[int, tuple[str, str]]) -> tuple[Path, Path]:
    """The training file of `_sweep_dir`'s rows, and its audit's issues.csv with `decisions`
    (training row: (decision, new_label)) filled in as a reviewer would."""
    import csv

    train = tmp_path / "train.csv"
    texts = [f'text, "{i}"\n' for i in range(12)]
    write_csv(train, zip(texts, LABELS_12, strict=True), header=("review", "y"))
    sweep = _sweep_dir(tmp_path, LABELS_12, P_12)
    audit_sweep(sweep, report=False)
    issues = sweep / "audit" / ISSUES_FILE
    with issues.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row["decision"], row["new_label"] = decisions.get(int(row["row"]), ("", ""))
    with issues.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return train, issues


def test_a_reviewed_issues_file_becomes_a_training_file_train_reads(tmp_path, capsys):
    from bertfit.config import DataConfig, RunConfig
    from bertfit.data.run_files import check_run_files, read_training_examples

    # flagged: row 5 (pos, suggested neg) and row 2 (neg, suggested pos)
    train, issues = _reviewed(tmp_path, {5: ("relabel", "neg"), 2: ("drop", "")})
    out = tmp_path / "corrected.jsonl"

    argv = ["relabel", str(issues), "--train", str(train), "--output", str(out)]
    assert main(argv) == 0

    assert not loads_tensorflow(build_parser().parse_args(argv))  # it runs no model
    assert "wrote 11 training rows" in capsys.readouterr().out
    config = RunConfig(data=DataConfig(train=str(out), text_column="review", label_column="y"))
    check_run_files(config)  # what `bertfit train` reads through before it starts
    examples = read_training_examples(str(out), config)
    expected = [(f'text, "{i}"\n', "neg" if i == 5 else y) for i, y in enumerate(LABELS_12)]
    del expected[2]
    assert [(e.text, e.label) for e in examples] == expected  # in order, the rest unchanged


@pytest.mark.parametrize(
    "decisions, says",
    [
        ({5: ("fix", "")}, "issue 1 (training row 5, line 12): decision 'fix'; write one of keep"),
        ({2: ("relabel", "meh")}, "new_label 'meh' is not a class of the training rows; write"),
        ({2: ("relabel", "")}, "new_label '' is not a class"),
        ({2: ("drop", "pos")}, "new_label 'pos' with decision drop; write relabel"),
    ],
)
def test_a_bad_decision_names_its_row_and_the_fix_and_writes_nothing(
    tmp_path, capsys, decisions, says
):
    train, issues = _reviewed(tmp_path, decisions)
    out = tmp_path / "corrected.jsonl"
    assert main(["relabel", str(issues), "--train", str(train), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_an_edited_text_or_a_row_of_other_data_is_refused(tmp_path, capsys):
    train, issues = _reviewed(tmp_path, {})
    out = tmp_path / "corrected.jsonl"
    text = issues.read_text()
    issues.write_text(text.replace('text, ""5""', 'text, ""five""'))
    assert main(["relabel", str(issues), "--train", str(train), "--output", str(out)]) == 2
    assert "the text was edited or the training file changed" in capsys.readouterr().err
    issues.write_text(text)
    with issues.open("a", encoding="utf-8", newline="") as f:  # the first issue again
        csv.writer(f).writerow(next(csv.reader(io.StringIO(text.split("\n", 1)[1]))))
    assert main(["relabel", str(issues), "--train", str(train), "--output", str(out)]) == 2
    assert "are both training row 5; keep one line per row" in capsys.readouterr().err
    issues.write_text(text.replace("1,5,7,", "1,55,7,"))
    assert main(["relabel", str(issues), "--train", str(train), "--output", str(out)]) == 2
    assert "row '55' is not a row of the 12 training rows" in capsys.readouterr().err
    assert main(["relabel", str(issues), "--train", str(train), "--output", "x.csv"]) == 2
    assert "name it .jsonl" in capsys.readouterr().err
    assert not out.exists()
