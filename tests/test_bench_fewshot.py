"""bench/fewshot.py's pieces that need no training: the debates' rows, SetFit's pair count
and the pair budget, and the table's spread and time ratio (on one CPU)."""

from __future__ import annotations

import io

import pytest

from bench.fewshot import (
    debate_rows,
    method_flags,
    setfit_iterations,
    setfit_pairs,
    stamp_cpu,
    table,
    time_ratio,
)


def test_debate_statements_are_collapsed_short_ones_and_copies_dropped():
    said = "Good evening  from Hofstra University in Hempstead, New York."
    rows = debate_rows(
        io.StringIO(
            "speaker,statement,debate,party\n"
            f'HOLT,"{said}",1st,Moderator\n'
            "TRUMP,Wrong.,1st,Republican\n"
            "CLINTON,We have to make the economy work for everyone.,1st,Democratic\n"
            "KAINE,We have to make the economy work for everyone.,VP,Democratic\n"
        )
    )
    assert rows == [
        ("Good evening from Hofstra University in Hempstead, New York.", "moderator"),
        ("We have to make the economy work for everyone.", "clinton"),
    ]


def test_each_bertfit_method_trains_with_its_flags():
    assert method_flags("defaults") == []
    assert method_flags("few-shot") == ["--few-shot"]
    assert method_flags("few-shot-e5") == ["--few-shot", "--few-shot-epochs", "5"]
    assert method_flags("few-shot-e5-lr2e-5") == [
        *("--few-shot", "--few-shot-epochs", "5", "--learning-rate", "2e-5")
    ]
    assert method_flags("defaults-lr1e-4") == ["--learning-rate", "1e-4"]
    assert method_flags("few-shot-epochs2") == ["--few-shot", "--epochs", "2"]
    assert method_flags("few-shot-b16") == ["--few-shot", "--batch-size", "16"]
    with pytest.raises(ValueError, match="not a bertfit method: 'few-shot-x'"):
        method_flags("few-shot-x")


def test_setfit_pairs_grow_with_the_square_of_the_rows_until_the_budget():
    assert setfit_pairs(16, 2, None) == 144  # 8 a class: 72 like pairs, 64 unlike, oversampled
    assert setfit_pairs(320, 5, None) == 81920
    assert setfit_iterations(320, 5, None) is None  # no budget: SetFit's defaults
    assert setfit_iterations(40, 5, 20_000) is None  # 1,280 pairs: within it
    iterations = setfit_iterations(320, 5, 20_000)
    assert iterations == 32 and setfit_pairs(320, 5, iterations) >= 20_000


def trial(accuracy, seconds, cpu="AMD EPYC"):
    return {"accuracy": accuracy, "macro_f1": accuracy, "train_seconds": seconds, "cpu": cpu}


def test_the_table_gives_mean_sd_and_time_over_setfits_on_the_seeds_both_ran():
    results = {
        "trials": {
            "debates/8/few-shot": {"1": trial(0.5, 10), "2": trial(0.7, 30)},
            "debates/8/setfit-it20": {"1": trial(0.6, 100)},
        }
    }
    rows = table(results)[2:]
    assert rows[0] == "| debates | 8 | few-shot | 0.600 (0.141) | 0.600 (0.141) | 2 | 20 | 0.10 |"
    assert rows[1] == "| debates | 8 | setfit-it20 | 0.600 (-) | 0.600 (-) | 1 | 100 | 1.00 |"


def test_times_measured_on_different_cpus_are_not_compared():
    ours = {"1": trial(0.5, 10, "Intel Xeon"), "2": trial(0.7, 30, "AMD EPYC")}
    setfit = {"1": trial(0.6, 100, "AMD EPYC"), "2": trial(0.6, 60, "AMD EPYC")}
    assert time_ratio(ours, setfit) == 0.5  # seed 2 only
    assert time_ratio({"1": trial(0.5, 10, "Intel Xeon")}, setfit) is None


def test_trials_recorded_before_trials_carried_a_cpu_get_the_files_machine():
    results = {"machine": {"cpu_model": "Intel Xeon"}, "trials": {"rt/8/setfit": {"1": {}}}}
    stamp_cpu(results)
    assert results["trials"]["rt/8/setfit"]["1"] == {"cpu": "Intel Xeon"}
