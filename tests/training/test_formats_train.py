"""Fine-tuning starts from every checkpoint format bertfit loads natively (issue 4, item 3)."""

import json

import pytest

from bertfit.cli import main
from tests.tiny import (
    sentiment_rows,
    train_args,
    write_csv,
    write_tiny_hub_module,
    write_tiny_savedmodel,
    write_tiny_tf1,
)

WRITERS = {
    "tf1-checkpoint": write_tiny_tf1,
    "tf1-hub-module": write_tiny_hub_module,
    "reusable-savedmodel": write_tiny_savedmodel,
}


@pytest.fixture(scope="module")
def train_file(tmp_path_factory):
    return write_csv(tmp_path_factory.mktemp("data") / "train.csv", sentiment_rows(24))


def _train(model, train_file, output, capsys):
    code = main(train_args(model, train_file, output, buckets="none", json=True))
    return code, capsys.readouterr()


@pytest.mark.parametrize("kind", WRITERS)
def test_fine_tuning_runs_from_each_format(kind, tmp_path, train_file, capsys):
    model = tmp_path / kind
    model.mkdir()
    WRITERS[kind](model)
    code, out = _train(model, train_file, tmp_path / "run", capsys)
    assert code == 0, out.err
    summary = json.loads(out.out)
    steps = [json.loads(line) for line in (tmp_path / "run" / "steps.jsonl").open()]
    assert len(steps) == 3  # 24 examples / batch 8
    assert summary["run_dir"] == str(tmp_path / "run")


def test_signature_only_savedmodel_is_refused_for_training_with_the_reason(
    tmp_path, train_file, capsys
):
    model = tmp_path / "signature-only"
    model.mkdir()
    write_tiny_savedmodel(model, signature_only=True)
    code, out = _train(model, train_file, tmp_path / "run", capsys)
    assert code == 2
    assert "Traceback" not in out.err
    assert "trainable" in out.err.lower()
