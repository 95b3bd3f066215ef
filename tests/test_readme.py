"""The README's code runs: each example is executed as written, on a tiny model and data."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.tiny import tagged_rows, write_jsonl

ROOT = Path(__file__).resolve().parents[1]


def readme_block(marker: str) -> str:
    """The README's ```python block that contains `marker`."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    (block,) = [b for b in blocks if marker in b]
    return block


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


def test_the_multi_label_training_loop_runs_over_two_replicas(tmp_path, trainable_hf_dir):
    write_jsonl(tmp_path / "tags.jsonl", tagged_rows(96, seed=4))
    code = readme_block("bertfit.make_dataset(")
    code = re.sub(
        r"MODEL, DATA, EPOCHS = .*",
        f'MODEL, DATA, EPOCHS = "{trainable_hf_dir}", "tags.jsonl", 3',
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
    tmp_path, trainable_hf_dir
):
    code = readme_block("bertfit.BertPreprocessor.from_checkpoint(")
    assert len(code.strip().splitlines()) <= 20
    code = code.replace('"minilm-l6"', f'"{trainable_hf_dir}"').replace("5e-5", "3e-3")
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


def test_the_tf_hub_example_runs_on_bertfits_tf_hub_export(tmp_path, trainable_hf_dir):
    from bertfit.cli import main

    assert main(["convert", str(trainable_hf_dir), str(tmp_path / "hub"), "--to", "tf-hub"]) == 0
    code = readme_block("hub.KerasLayer(")
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
