"""bench/audit.py's noise and scores (issue 49): the flips are exactly 5%, seeded, and the
precision and recall are of the flagged rows against the flipped ones."""

from __future__ import annotations

import numpy as np
import pytest

from bench.audit import MODELS, _scores, markdown, noisy_subset, summarize


def test_the_noisy_subset_flips_five_percent_of_the_drawn_rows_by_seed():
    rows = [(f"text {i}", i % 2) for i in range(1000)]
    clean, noisy, flipped = noisy_subset(rows, 400, seed=3)
    assert len(clean) == len(noisy) == 400 and len(flipped) == 20
    changed = [i for i, (a, b) in enumerate(zip(clean, noisy, strict=True)) if a != b]
    assert changed == flipped.tolist()
    assert all(noisy[i] == (clean[i][0], 1 - clean[i][1]) for i in changed)
    assert noisy_subset(rows, 400, seed=3)[2].tolist() == flipped.tolist()
    assert noisy_subset(rows, 400, seed=4)[2].tolist() != flipped.tolist()


def test_scores_compare_the_flagged_rows_with_the_flipped_ones(tmp_path):
    (tmp_path / "issues.csv").write_text("rank,row,text\n1,7,a\n2,3,b\n3,9,c\n4,1,d\n")
    scores = _scores(tmp_path, np.array([1, 2, 3]), {"estimated_wrong": 4.2})
    assert scores["precision"] == pytest.approx(2 / 4) and scores["recall"] == pytest.approx(2 / 3)
    assert scores["precision_at_flipped_count"] == pytest.approx(1 / 3)  # rows 7, 3, 9
    seeds = [{**scores, "test_accuracy": {"noisy": 0.7, "without_flagged": 0.8, "clean": 0.9}}]
    seeds.append({**seeds[0], "precision": 0.7})
    summary = summarize(seeds)
    assert summary["precision"]["mean"] == pytest.approx(0.6)
    assert summary["precision"]["sd"] == pytest.approx(np.std([0.5, 0.7], ddof=1))
    assert summary["test_accuracy_clean"]["values"] == [0.9, 0.9]


def test_the_markdown_tables_give_mean_and_sd_per_experiment():
    seeds = [
        {"seed": 1, "precision": 0.5, "test_accuracy": {m: 0.8 for m in MODELS}},
        {"seed": 2, "precision": 0.7},  # its retrained models did not finish
    ]
    document = {"experiments": {"3000 rows": {"summary": summarize(seeds), "seeds": seeds}}}
    audit, accuracy = markdown(document).split("\n\n")
    assert "| 3000 rows | 1,2 | - | 0.600 ± 0.141 | - |" in audit
    assert accuracy.splitlines()[-1] == (
        "| 3000 rows | 1 | 0.800 (1 seed) | 0.800 (1 seed) | 0.800 (1 seed) |"
    )
