"""`bertfit`'s public names: the jobs are functions of the package, loaded on first use."""

from __future__ import annotations

import inspect

import tensorflow as tf

import bertfit
from tests.tiny import sentiment_rows, write_csv

JOBS = ("train", "evaluate", "predict", "check")


def test_every_public_name_resolves():
    for name in bertfit.__all__:
        assert getattr(bertfit, name) is not None, name


def test_the_jobs_are_functions_even_after_their_packages_are_imported():
    import bertfit.checks.api
    import bertfit.training.run  # noqa: F401 - a submodule import must not shadow `bertfit.train`

    for name in JOBS:
        assert inspect.isfunction(getattr(bertfit, name)), name


def test_check_takes_a_run_config_as_the_readme_shows(tmp_path, trainable_hf_dir):
    config = bertfit.RunConfig(
        model=bertfit.ModelConfig(name=str(trainable_hf_dir), max_seq_length=16),
        data=bertfit.DataConfig(train=str(write_csv(tmp_path / "train.csv", sentiment_rows(16)))),
        train=bertfit.TrainConfig(batch_size=8),
    )
    report = bertfit.check(config)
    assert report.codes == [], report.render(color=False)
    if tf.config.list_logical_devices("GPU"):  # training there uses XLA: so does its check
        assert [c["ok"] for c in report.compiled] == [True]
    else:  # on a CPU it uses none, and neither does its check: it says so, and how to ask
        assert report.compiled == [] and "--compile" in report.stats["XLA compilation"]
