"""bench/backends.py (issue 46): its table puts each side's training loop against the Trainer's
(the JAX run twice: compiling, then on cached compilations) and shows bertfit's train-step
compilations (one per bucket)."""

from __future__ import annotations

from bench.backends import table, table_rows


def side(seconds: float, accuracy: float, traces: int | None = None) -> dict:
    row = {
        "train_seconds": seconds,
        "train_process_seconds": seconds + 10,
        "first_step_seconds": 5.0,
        "train_peak_rss_mib": 1500.0,
        "test_accuracy": accuracy,
        "time_split": {"train": seconds - 5},
    }
    if traces is not None:
        row["trace_counts"] = {"train_step": traces, "predict_step": 1}
    return row


def test_each_side_is_a_ratio_of_the_trainers_loop_with_its_compilations():
    result = {
        "bertfit": {
            "tensorflow": side(80, 0.81, 3),
            "jax": side(100, 0.80, 3),
            "jax_cached": side(90, 0.80, 3),
        },
        "transformers": side(50, 0.82),
    }
    rows = table(result)
    assert rows[2].startswith("| bertfit --backend tensorflow | 80 s | 1.60x | 75 s |")
    assert rows[3].startswith("| bertfit --backend jax | 100 s | 2.00x | 95 s |")
    assert rows[4].startswith("| bertfit --backend jax, compilations cached | 90 s | 1.80x |")
    assert rows[5].startswith("| transformers Trainer | 50 s | 1.00x | 45 s |")
    assert rows[2].endswith("| 0.8100 | 3 |") and rows[5].endswith("| 0.8200 | - |")


def test_the_results_table_rows_have_its_four_columns_and_the_jax_over_tensorflow_ratio():
    result = {
        "settings": {"max_train_examples": 2000, "epochs": 1},
        "bertfit": {
            "tensorflow": side(80, 0.81, 3),
            "jax": side(100, 0.80, 3),
            "jax_cached": side(90, 0.80, 3),
        },
        "transformers": side(50, 0.82),
    }
    rows = table_rows(result)
    assert all(row.count("|") == 5 for row in rows)
    assert rows[0].endswith("| 80 s | 50 s (Trainer) | 1.60x the time |")
    assert rows[2].endswith("| 100 s (JAX) | 80 s (TensorFlow) | 1.25x the time |")
    assert "compilations cached" in rows[3]
    assert rows[3].endswith("| 90 s (JAX) | 80 s (TensorFlow) | 1.12x the time |")
    assert rows[4].endswith("| 95 s (JAX) | 75 s (TensorFlow) | 1.27x the time |")
