"""bench/audit_cleanlab.py's flips and scores (issue 64): the noise is the asked fraction,
seeded, between confusable speakers on the debates, and precision at k is of the ranking."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.audit_cleanlab import (
    CONFUSABLE,
    flip,
    learning_rates,
    out_of_fold,
    prune_checkpoints,
    scores,
    train_flags,
    with_command,
)


def test_binary_flips_are_the_asked_fraction_to_the_other_label_by_seed():
    rows = [(f"text {i}", str(i % 2)) for i in range(1000)]
    clean, noisy, flipped = flip(rows, 400, 0.2, seed=3)
    changed = [i for i, (a, b) in enumerate(zip(clean, noisy, strict=True)) if a != b]
    assert len(clean) == 400 and changed == flipped.tolist() and len(flipped) == 80
    assert all(noisy[i][1] == str(1 - int(clean[i][1])) for i in changed)
    assert flip(rows, 400, 0.2, seed=3)[2].tolist() == flipped.tolist()
    assert flip(rows, 400, 0.2, seed=4)[2].tolist() != flipped.tolist()


def test_multi_class_flips_go_to_the_confusable_speaker_and_spare_the_moderators():
    speakers = ("trump", "clinton", "pence", "kaine", "moderator")
    rows = [(f"statement {i}", speakers[i % 5]) for i in range(500)]
    clean, noisy, flipped = flip(rows, None, 0.05, seed=1)
    assert clean == rows and len(flipped) == 25
    assert all(noisy[i][1] == CONFUSABLE[clean[i][1]] for i in flipped)
    assert all(clean[i][1] != "moderator" for i in flipped)


def test_precision_at_k_is_of_the_ranking_and_the_set_is_scored_whole():
    found = scores([7, 3, 9, 1, 2], np.array([1, 2, 3]), estimated=4.5)
    assert found["precision_at_k"] == pytest.approx(1 / 3)  # rows 7, 3, 9: one flipped
    assert (found["flagged"], found["precision"], found["recall"]) == (5, 0.6, 1.0)
    assert scores([], np.array([1]))["precision"] is None


def test_a_learning_rate_grid_puts_the_recipes_rate_first_for_cleanlabs_plain_k_fold():
    rates = learning_rates("1e-4,5e-5", "rotten-tomatoes")
    assert rates == [5e-5, 1e-4] and learning_rates(None, "rotten-tomatoes") is None
    flags = train_flags("rotten-tomatoes", 1, rates)
    assert flags[flags.index("--learning-rate") + 1] == "5e-05,0.0001"


def test_a_finished_sweeps_checkpoints_are_pruned_and_its_predictions_kept(tmp_path):
    run = tmp_path / "runs" / "t1" / "seed1-fold1"
    (run / "checkpoints" / "best").mkdir(parents=True)
    (run / "metrics.json").write_text("{}")
    (run.parent / "oof-seed1.jsonl").write_text("{}\n")
    prune_checkpoints(tmp_path)
    assert sorted(p.name for p in run.parent.rglob("*")) == [
        "metrics.json", "oof-seed1.jsonl", "seed1-fold1"
    ]  # fmt: skip


def test_a_settings_commands_are_kept_each_once_in_order():
    assert with_command(None, "a --seeds 1") == "a --seeds 1"
    assert with_command("a --seeds 1", "a --seeds 2") == "a --seeds 1; a --seeds 2"
    assert with_command("a; b", "a") == "a; b"


def test_out_of_fold_rows_are_read_whole_when_a_text_holds_a_unicode_line_break(tmp_path):
    trial = tmp_path / "runs" / "t1"
    trial.mkdir(parents=True)
    rows = [
        {"row": 0, "text": "a fine\x85film", "target": "1", "probabilities": {"0": 0.2, "1": 0.8}},
        {"row": 1, "text": "dull\u2028", "target": "0", "probabilities": {"0": 0.9, "1": 0.1}},
    ]
    lines = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    (trial / "oof-seed1.jsonl").write_text(lines, encoding="utf-8")
    labels, given, (probabilities,) = out_of_fold(tmp_path)
    assert labels == ["0", "1"] and given.tolist() == [1, 0]
    np.testing.assert_allclose(probabilities, [[0.2, 0.8], [0.9, 0.1]])
