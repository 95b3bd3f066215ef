"""Every config field is type- and range-checked, from flags and YAML alike, naming the field."""

from __future__ import annotations

import pytest

from bertfit.cli import main
from bertfit.config import DataConfig, RunConfig, per_replica_batch
from bertfit.errors import ConfigError


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--learning-rate=-5e-3"], "train.learning_rate (--learning-rate) must be a positive"),
        (["--learning-rate", "nan"], "train.learning_rate (--learning-rate) must be a positive"),
        (["--cpu-replicas", "0"], "train.cpu_replicas (--cpu-replicas) must be at least 1"),
        (["--cpu-replicas", "-2"], "train.cpu_replicas (--cpu-replicas) must be at least 1"),
        (["--warmup-ratio", "1"], "train.warmup_ratio (--warmup-ratio) must be in [0, 1)"),
        (["--dropout", "1.5"], "model.dropout (--dropout) must be in [0, 1)"),
        (["--weight-decay", "-1"], "train.weight_decay (--weight-decay) must be zero or positive"),
        (["--clip-norm", "0"], "train.clip_norm (--clip-norm) must be a positive number"),
        (["--max-train-examples", "0"], "data.max_train_examples (--max-train-examples)"),
        (
            ["--buckets", "16,999"],
            "data.buckets (--buckets) must be 'auto', 'none' or lengths between 1 and",
        ),
        (["--epochs", "0"], "train.epochs (--epochs) must be at least 1"),
        # a setting that means something only beside another one, given alone
        (
            ["--lora-targets", "query", "--lora-alpha", "16"],
            "model.lora_alpha (--lora-alpha) must be given only with --lora-rank R (without it "
            "every weight is fine-tuned, none adapted): add --lora-rank 8, or leave "
            "--lora-alpha out; got 16.0.",
        ),
        (["--lora-targets", "query"], "model.lora_targets (--lora-targets) must be given only"),
        (
            ["--chunk-pooling", "attention"],
            "model.chunk_pooling (--chunk-pooling) must be given only with --long-documents "
            "chunk (without it texts are truncated, never cut into windows)",
        ),
        (["--max-chunks", "4"], "model.max_chunks (--max-chunks) must be given only with --l"),
        (["--chunk-stride", "3"], "model.chunk_stride (--chunk-stride) must be given only wit"),
    ],
)
def test_nonsense_flags_are_refused_before_anything_runs(flags, message, tmp_path, capsys):
    assert (
        main(["train", "--train", "train.csv", "--output-dir", str(tmp_path / "run"), *flags]) == 2
    )
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "yaml_text, message",
    [
        ("model:\n  max_seq_length: '64'\n", "model: max_seq_length must be an integer; got '64'"),
        ("train:\n  epochs: 2.5\n", "train: epochs must be an integer or null; got 2.5"),
        (
            "train:\n  jit_compile: 'yes'\n",
            "train: jit_compile must be true or false or null; got 'yes'",
        ),
        ("data:\n  buckets: [32, '64']\n", "data: buckets must be a string or a list of integers"),
        (
            "train:\n  learning_rate: -1\n",
            "train.learning_rate (--learning-rate) must be a positive",
        ),
        ("model: 3\n", "model: expected a mapping"),
        ("output_dir: [1]\n", "output_dir must be a string"),
    ],
)
def test_yaml_values_of_the_wrong_type_name_the_file_and_field(tmp_path, yaml_text, message):
    path = tmp_path / "run.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as caught:
        RunConfig.load(path).validate()
    assert message in str(caught.value)
    if "--" not in message:
        assert str(path) in str(caught.value)


def test_a_valid_config_passes_and_ints_are_numbers():
    config = RunConfig.from_dict({"train": {"learning_rate": 1, "warmup_ratio": 0}})
    assert config.validate() is config


def test_buckets_are_auto_none_or_lengths_from_flags_yaml_and_earlier_configs(tmp_path):
    from bertfit.cli import build_parser, run_config_from_args
    from bertfit.data.buckets import fixed_buckets, saved_buckets

    flags = ["train", "--train", "t.csv", "--max-seq-length", "64", "--buckets", "none"]
    config = run_config_from_args(build_parser().parse_args(flags))
    assert config.data.buckets == "none" and fixed_buckets(config.data.buckets, 64) == (64,)
    config.save(tmp_path / "run.yaml")
    assert "buckets: none" in (tmp_path / "run.yaml").read_text()
    assert RunConfig.load(tmp_path / "run.yaml").data.buckets == "none"
    assert RunConfig().data.buckets == "auto"
    assert saved_buckets("auto", 128) == (32, 64, 128)  # a config that never trained
    # how runs saved them before "auto" and "none": [] and null
    for old, now in (("[]", "auto"), ("null", "none"), ("[16, 32]", [16, 32])):
        (tmp_path / "old.yaml").write_text(f"data:\n  buckets: {old}\n")
        assert RunConfig.load(tmp_path / "old.yaml").data.buckets == now
    with pytest.raises(ConfigError, match="data.buckets"):
        RunConfig(data=DataConfig(buckets="some")).validate()


def test_the_flags_take_their_choices_from_the_config():
    from bertfit import config
    from bertfit.data.sources import FORMATS
    from bertfit.run_flags import RUN_FLAGS

    expected = {
        "--pooling": config.POOLINGS,
        "--head-bias": config.HEAD_BIASES,
        "--precision": config.PRECISIONS,
        "--task": config.TASKS,
        "--long-documents": config.LONG_DOCUMENTS,
        "--chunk-pooling": config.CHUNK_POOLINGS,
        "--format": FORMATS,
        "--strategy": config.STRATEGIES,
        "--backend": config.BACKENDS,
        "--best-metric": config.METRICS,
        "--base-precision": config.BASE_PRECISIONS,
        "--calibrate": config.CALIBRATIONS,
        "--attention": config.ATTENTIONS,
    }
    choices = {name: f.choices for name, f in RUN_FLAGS.items() if f.choices is not None}
    assert choices.keys() == expected.keys()
    assert all(choices[flag] is expected[flag] for flag in expected)


def test_batch_that_does_not_divide_over_replicas_states_the_arithmetic_and_the_fix():
    with pytest.raises(ConfigError, match=r"7 / 2 = 3\.50 examples per replica") as error:
        per_replica_batch(7, 2)
    assert "--batch-size 6 or 8" in str(error.value)


def test_per_replica_batch_divides():
    assert per_replica_batch(32, 4) == 8


def test_convert_takes_its_targets_from_the_config():
    from bertfit import config
    from bertfit.cli import build_parser

    convert = build_parser()._subparsers._group_actions[0].choices["convert"]
    to = next(a for a in convert._actions if a.dest == "to")
    assert to.choices is config.CONVERT_TARGETS


@pytest.mark.parametrize(
    "flags, field",
    [
        (["--long-documents", "chunk", "--chunk-stride", "126"], "model.chunk_stride"),
        (["--max-chunks", "0"], "model.max_chunks"),
    ],
)
def test_chunk_settings_out_of_range_name_their_flag(flags, field):
    import argparse

    from bertfit.run_flags import add_train_arguments, run_config_from_args

    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    args = parser.parse_args(["--train", "t.csv", "--max-seq-length", "128", *flags])
    with pytest.raises(ConfigError, match=field):
        run_config_from_args(args)


@pytest.mark.parametrize(
    "values, says",
    [
        ({"model": {"pooling": "max"}}, "model.pooling (--pooling) must be one of cls, mean;"),
        ({"data": {"format": "xml"}}, "data.format (--format) must be one of csv, tsv, jsonl,"),
        ({"train": {"best_metric": "auc"}}, "train.best_metric (--best-metric) must be one of"),
    ],
)
def test_a_config_value_outside_its_flags_choices_is_refused_naming_both(values, says):
    """The choices a flag offers are the ones a run.yaml is checked against (one owner)."""
    with pytest.raises(ConfigError) as refused:
        RunConfig.from_dict(values).validate()
    assert says in str(refused.value)
