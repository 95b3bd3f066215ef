"""bench/backends.py (issue 46): its table puts each side's training loop against TensorFlow's
and the Trainer's (the JAX run twice: compiling, then on cached compilations) and shows
bertfit's train-step compilations (one per bucket); `--sides` leaves sides out."""

from __future__ import annotations

import pytest

from bench.backends import parse_args, ratios, table, table_rows


def side(seconds: float, accuracy: float, traces: int | None = None) -> dict:
    row = {
        "train_seconds": seconds,
        "train_process_seconds": seconds + 10,
        "first_step_seconds": 5.0,
        "train_peak_rss_mib": 1500.0,
        "test_accuracy": accuracy,
        "time_split": {"train": seconds - 5},
        "token_slots_per_example": seconds / 2,
    }
    if traces is not None:
        row["trace_counts"] = {"train_step": traces, "predict_step": 1}
        row["buckets"] = [24, 40, 64][:traces]
    return row


def every_side() -> dict:
    return {
        "settings": {"max_train_examples": 2000, "epochs": 1, "max_seq_length": 64},
        "bertfit": {
            "tensorflow": side(80, 0.81, 3),
            "jax": side(100, 0.80, 3),
            "jax_cached": side(90, 0.80, 3),
        },
        "transformers": side(50, 0.82),
    }


def test_each_side_is_a_ratio_of_tensorflows_and_the_trainers_loop_with_its_compilations():
    rows = table(every_side())
    assert rows[2].startswith("| bertfit --backend tensorflow | 80 s | 1.00x | 1.60x | 75 s |")
    assert rows[3].startswith("| bertfit --backend jax | 100 s | 1.25x | 2.00x | 95 s |")
    assert rows[4].startswith("| bertfit --backend jax, compilations cached | 90 s | 1.12x |")
    assert rows[5].startswith("| transformers Trainer | 50 s | 0.62x | 1.00x | 45 s |")
    assert rows[2].endswith("| 0.8100 | 3 | 24, 40, 64 |")
    assert rows[5].endswith("| 0.8200 | - | - |")


def test_the_results_table_rows_have_its_four_columns_and_the_jax_over_tensorflow_ratio():
    rows = table_rows(every_side())
    assert all(row.count("|") == 5 for row in rows)
    assert "2000 RT rows, 1 epoch(s), seq 64" in rows[0]
    assert rows[0].endswith("| 80 s | 50 s (Trainer) | 1.60x the time |")
    assert rows[2].endswith("| 100 s (JAX) | 80 s (TensorFlow) | 1.25x the time |")
    assert "compilations cached" in rows[3]
    assert rows[3].endswith("| 90 s (JAX) | 80 s (TensorFlow) | 1.12x the time |")
    assert rows[4].endswith("| 95 s (JAX) | 75 s (TensorFlow) | 1.27x the time |")


def test_cli_defaults_with_two_sides_compare_jax_with_tensorflow_only():
    args = parse_args(["--cli-defaults", "--sides", "tensorflow,jax"])
    assert (args.epochs, args.max_train_examples, args.max_seq_length) == (3, 0, 128)
    result = every_side()
    del result["transformers"], result["bertfit"]["jax_cached"]
    result["settings"] |= {"max_train_examples": 0, "epochs": 3, "max_seq_length": 128}
    assert [row.split(" | ")[0] for row in table(result)[2:]] == [
        "| bertfit --backend tensorflow",
        "| bertfit --backend jax",
    ]
    assert table(result)[3].split(" | ")[3] == "-"  # no Trainer to compare with
    rows = table_rows(result)
    assert len(rows) == 2 and "all RT rows, 3 epoch(s), seq 128" in rows[0]
    assert ratios(result) == {
        "jax_over_tensorflow_train_loop": 1.25,
        "jax_over_tensorflow_steps_after_compiling": 95 / 75,
        "jax_over_tensorflow_token_slots": 1.25,
    }


@pytest.mark.parametrize("sides", ["jax,transformers", "tensorflow,jax_cached", "tensorflow,torch"])
def test_sides_that_cannot_be_compared_are_refused(sides, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--sides", sides])
    assert "--sides" in capsys.readouterr().err


def test_the_packing_sides_are_runs_with_packing_against_tensorflows_loop():
    args = parse_args(["--sides", "tensorflow,jax,tensorflow_packing,jax_packing"])
    assert args.sides == ["tensorflow", "jax", "tensorflow_packing", "jax_packing"]
    result = every_side()
    del result["transformers"], result["bertfit"]["jax_cached"]
    result["bertfit"] |= {"tensorflow_packing": side(88, 0.81, 1), "jax_packing": side(84, 0.8, 1)}
    rows = table(result)
    assert rows[4].startswith("| bertfit --backend tensorflow --packing | 88 s | 1.10x | - |")
    assert rows[5].startswith("| bertfit --backend jax --packing | 84 s | 1.05x |")
    assert rows[5].endswith("| 1 | rows of 24 |")
    assert ratios(result)["jax_packing_over_tensorflow_train_loop"] == 84 / 80
    assert any(
        r.endswith("| 84 s (JAX) | 80 s (TensorFlow) | 1.05x the time |")
        for r in table_rows(result)
    )
