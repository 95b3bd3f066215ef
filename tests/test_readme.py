"""The README's and the manual's Python examples run: each is executed as written, on a tiny
model and data, and their example error lines are what bertfit prints (tests/test_docs.py checks
every other block)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.markdown_blocks import ROOT, all_blocks, code_blocks, doc_block
from tests.tiny import sentiment_rows, tagged_rows, write_csv, write_jsonl


def run_python(code: str, tmp_path: Path, timeout: int = 600, **extra_env: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2", **extra_env}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_multi_label_training_loop_runs_over_two_replicas(tmp_path, one_layer_hf_dir):
    write_jsonl(tmp_path / "tags.jsonl", tagged_rows(96, seed=4))
    code = doc_block("bertfit.make_dataset(")
    code = re.sub(
        r"MODEL, DATA, EPOCHS = .*",
        f'MODEL, DATA, EPOCHS = "{one_layer_hf_dir}", "tags.jsonl", 3',
        code,
    )
    code = code.replace("learning_rate=5e-5", "learning_rate=5e-3")
    two_cpus = (
        "from bertfit.training.strategy import configure_cpu_replicas\nconfigure_cpu_replicas(2)\n"
    )
    out = run_python(
        two_cpus + code + "\nprint('replicas', strategy.num_replicas_in_sync)\n", tmp_path
    )
    losses = [float(x) for x in re.findall(r"mean loss ([0-9.]+)", out)]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert "replicas 2" in out


def test_the_keras_fit_example_runs_under_two_replicas_and_saves_a_keras_file(
    tmp_path, one_layer_hf_dir
):
    code = doc_block("bertfit.BertPreprocessor.from_checkpoint(")
    assert len(code.strip().splitlines()) <= 20
    code = code.replace('"minilm-l6"', f'"{one_layer_hf_dir}"').replace("5e-5", "3e-3")
    two_cpus = (
        "from bertfit.training.strategy import configure_cpu_replicas\nconfigure_cpu_replicas(2)\n"
    )
    check = (
        "\nloaded = keras.models.load_model('classifier.keras')\n"
        "batch = next(iter(data))[0]\n"
        "import numpy as np\n"
        "assert np.allclose(loaded(batch), model(batch), atol=1e-5)\n"
        "print('replicas', strategy.num_replicas_in_sync)\n"
    )
    out = run_python(two_cpus + code + check, tmp_path)
    assert "replicas 2" in out


def test_the_tf_hub_example_runs_on_bertfits_tf_hub_export(tmp_path, one_layer_hf_dir):
    from bertfit.cli import main

    assert main(["convert", str(one_layer_hf_dir), str(tmp_path / "hub"), "--to", "tf-hub"]) == 0
    code = doc_block("hub.KerasLayer(")
    encoder, preprocessing = (tmp_path / "hub" / "encoder", tmp_path / "hub" / "preprocess")
    code = re.sub(r'"https://tfhub.dev/[^"]*preprocess[^"]*"', f'"{preprocessing}"', code)
    code = re.sub(r'"https://tfhub.dev/[^"]*"', f'"{encoder}"', code)
    check = (
        "\nout = model(tf.constant(['a good film', 'bad']))\n"
        "assert out.shape == (2, 2)\n"
        "print('trainable', len(model.trainable_variables))\n"
    )
    out = run_python(code + check, tmp_path, TF_USE_LEGACY_KERAS="1")
    assert int(re.search(r"trainable (\d+)", out).group(1)) > 2  # the encoder's weights train


def test_the_readmes_python_example_checks_trains_evaluates_and_predicts(
    tmp_path, one_layer_hf_dir
):
    (code,) = [b.text for b in code_blocks(ROOT / "README.md") if b.lang == "python"]
    for name, seed in (("train", 0), ("dev", 1), ("test", 2)):
        write_csv(tmp_path / f"{name}.csv", sentiment_rows(32, seed=seed))
    code = code.replace('"minilm-l6"', f'"{one_layer_hf_dir}"').replace(
        "max_seq_length=64", "max_seq_length=16"
    )
    code = code.replace("batch_size=32, epochs=3", "batch_size=8, epochs=1")
    check = (
        "\nassert report.exit_code() == 0, report.render(color=False)\nprint(report.codes)\n"
        "rows = classifier.predict(['a gripping film', 'dull'])\n"
        "print('metrics', sorted(metrics)[:3], 'rows', len(rows), rows[0]['label'])\n"
    )
    out = run_python(code + check, tmp_path)
    assert "rows 2" in out and (tmp_path / "runs" / "sst" / "metrics.json").is_file()


# The mistake each example error line of the README and the manual shows (by a word of the
# line), made in a folder that has data/train.csv (its row 4 without text) and data/ok.csv.
EXAMPLE_MISTAKES = {
    "data/train.csv:4:": ["--train", "data/train.csv"],
    "--learning-rate": ["--train", "data/ok.csv", "--learning-rate", "-0.005"],
    "--epcohs": ["--train", "data/ok.csv", "--epcohs", "3"],
    "minilm-l6's position table": ["--train", "data/ok.csv", "--max-seq-length", "1024"],
}


def _example_error_lines() -> list:
    return [
        pytest.param(line, id=f"{block.where}:{line[:40]}")
        for block in all_blocks("text")
        for line in block.text.splitlines()
        if line.startswith("bertfit train: error: ")
    ]


@pytest.mark.parametrize("line", _example_error_lines())
def test_the_example_error_lines_are_what_bertfit_prints(line, tmp_path, monkeypatch, capsys):
    from bertfit.cli import main

    (mistake,) = [argv for word, argv in EXAMPLE_MISTAKES.items() if word in line]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.csv").write_text("text,label\ngood,pos\nbad,neg\n,pos\n")
    write_csv(tmp_path / "data" / "ok.csv", sentiment_rows(8))
    try:
        code = main(["train", "--model", "minilm-l6", *mistake])
    except SystemExit as e:  # a usage error
        code = e.code
    assert code == 2
    assert capsys.readouterr().err.strip() == line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]  # nothing written
