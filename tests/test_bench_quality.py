"""bench/rare_labels.py's labelling rules and bench/quality.py's summaries (issue 36)."""

from __future__ import annotations

from bench.quality import markdown, spread, table_rows
from bench.rare_labels import tags, three_class


def test_tags_read_keywords_as_whole_words_and_keep_both():
    assert tags("The cast is fine but the screenplay is a mess.") == "acting|script"
    assert tags("A broadcast of rewritten scripture.") == ""  # not cast, written, script
    assert tags("Her PERFORMANCE carries it.") == "acting"


def test_three_class_puts_acting_first_then_sentiment():
    assert three_class("The actors are wooden.", 1) == "acting"
    assert three_class("A joy from start to finish.", 1) == "fresh"


def _trial(micro: float) -> dict:
    return {"test": {"micro_f1": micro, "macro_f1": micro / 2}}


def test_spread_and_the_tables_give_mean_and_worst_and_best_seed():
    mine = {"flags": [], "trials": {"1": _trial(0.8), "2": _trial(0.6)}}
    theirs = {"flags": [], "trials": {"1": _trial(0.5)}}
    results = {"variants": {"rare/bertfit": mine, "rare/trainer": theirs}}
    for variant in results["variants"].values():
        variant["summary"] = spread(variant["trials"])
    assert mine["summary"]["micro_f1"] == {"mean": 0.7, "min": 0.6, "max": 0.8, "seeds": 2}
    row = table_rows(results)[0]
    assert (
        "0.700 [0.600-0.800] (2 seeds)" in row and "0.500 [0.500-0.500] (1 seed) (Trainer)" in row
    )
    assert "+0.200 mean" in row
    assert "1: 0.800 / 0.400; 2: 0.600 / 0.300" in markdown(results)
