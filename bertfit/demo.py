"""`bertfit demo`: MiniLM-L6 fine-tuned on Rotten Tomatoes, evaluated on the held-out test split.

The settings are picked to finish within 15 minutes on a 2-core CPU and are printed before
training starts.
"""

from __future__ import annotations

import time

from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from bertfit.data.rotten_tomatoes import rotten_tomatoes_dir

DEMO_EPOCHS = 1
DEMO_MAX_SEQ_LENGTH = 64


def _has_accelerator() -> bool:
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU") or tf.config.list_physical_devices("TPU"))


def demo_config(output_dir: str | None, epochs: int | None = None,
                max_train_examples: int | None = None) -> RunConfig:
    data = rotten_tomatoes_dir()
    # XLA's CPU backend runs this model's seq-64 step about 1.6x slower than TensorFlow's
    # oneDNN kernels (measured on the 2-core machine), so a CPU-only demo turns it off.
    jit = _has_accelerator()
    return RunConfig(
        output_dir=output_dir,
        # all-MiniLM-L6-v2 is a sentence-transformers model: its pooler was never trained for
        # it, so the head reads the mean of the token vectors.
        model=ModelConfig(name="minilm-l6", max_seq_length=DEMO_MAX_SEQ_LENGTH, pooling="mean"),
        data=DataConfig(train=str(data / "train.csv"), eval=str(data / "dev.csv"),
                        max_train_examples=max_train_examples),
        train=TrainConfig(batch_size=32, epochs=epochs or DEMO_EPOCHS, learning_rate=5e-5,
                          seed=42, jit_compile=jit),
    )


def run_demo(output_dir: str | None = None, epochs: int | None = None,
             max_train_examples: int | None = None, quiet: bool = False) -> dict:
    from bertfit.train.run import evaluate, train

    started = time.perf_counter()
    config = demo_config(output_dir, epochs, max_train_examples)
    subset = config.data.max_train_examples or "all"
    xla = "on" if config.train.jit_compile else "off (CPU only)"
    print(f"bertfit demo: fine-tuning MiniLM-L6 (minilm-l6) on Rotten Tomatoes\n"
          f"  train {config.data.train} ({subset} rows), dev for model selection\n"
          f"  epochs {config.train.epochs}, max_seq_length {config.model.max_seq_length}, "
          f"global batch {config.train.batch_size}, learning rate {config.train.learning_rate}, "
          f"mean pooling, seed {config.train.seed}, XLA {xla}",
          flush=True)
    run_dir = train(config, quiet=quiet)["run_dir"]
    test_file = str(rotten_tomatoes_dir() / "test.csv")
    metrics = evaluate(run_dir, test_file, quiet=quiet)
    minutes = (time.perf_counter() - started) / 60
    print(f"\ntest accuracy {metrics['accuracy']:.4f} (macro-F1 {metrics['macro_f1']:.4f}) "
          f"on {metrics['num_examples']} test examples\n"
          f"time {minutes:.1f} min; run directory: {run_dir}", flush=True)
    return metrics
