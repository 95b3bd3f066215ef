"""Run by scripts/tpu_install_check.sh in the venv it installed: the TPU build of TensorFlow is
the only TensorFlow there, and bertfit trains a tiny model with it on this CPU (no TPU)."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def main() -> None:
    assert installed("tensorflow") is None, "a second TensorFlow was installed over the TPU build"
    assert installed("tensorflow-tpu") == "2.20.0", installed("tensorflow-tpu")
    assert installed("libtpu") == "0.0.21", f"libtpu {installed('libtpu')}, not bertfit's pin"
    from bertfit.tf_startup import start_tensorflow

    start_tensorflow()  # as the CLI starts it: the TPU library off, on a host with no TPU
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (installed --no-deps beside the TPU build)

    assert tf.__version__ == "2.20.0", tf.__version__
    from tests.tiny import sentiment_rows, write_csv, write_tiny_hf

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "model").mkdir()
        write_tiny_hf(folder / "model", trainable=True)
        train = write_csv(folder / "train.csv", sentiment_rows(64, seed=0))
        command = [sys.executable, "-m", "bertfit.cli", "train", "--model", str(folder / "model")]
        command += ["--train", str(train), "--output-dir", str(folder / "run"), "--epochs", "1"]
        command += ["--batch-size", "8", "--max-seq-length", "16", "--quiet", "--no-report"]
        subprocess.run(command, check=True, cwd=ROOT, timeout=600)
        metrics = json.loads((folder / "run" / "metrics.json").read_text())
    assert metrics["status"] == "finished", metrics["status"]
    print(
        f"TPU install: tensorflow-tpu {tf.__version__}, libtpu {installed('libtpu')}, "
        f"trained {metrics['train_num_examples']} rows on the CPU: ok"
    )


if __name__ == "__main__":
    main()
