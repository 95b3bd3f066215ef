"""`bertfit demo`: MiniLM-L6 fine-tuned on Rotten Tomatoes, evaluated on the held-out test split.

The settings are picked to finish within 15 minutes on a 2-core CPU and are printed before
training starts.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from bertfit.data.rotten_tomatoes import rotten_tomatoes_dir, task_dir
from bertfit.errors import ConfigError, TrainingInterrupted
from bertfit.runs.metrics import HEADLINE_METRICS

DEMO_EPOCHS = 1
DEMO_MAX_SEQ_LENGTH = 64


def demo_files(task: str) -> dict[str, Path]:
    """Rotten Tomatoes' train/dev/test files shaped for `task` (see `rotten_tomatoes.task_dir`)."""
    if task == "single-label":
        folder, suffix = rotten_tomatoes_dir(), ".csv"
    else:
        folder = task_dir(task)
        suffix = ".jsonl" if task == "multi-label" else ".csv"
    return {split: folder / f"{split}{suffix}" for split in ("train", "dev", "test")}


def demo_config(
    output_dir: str | None,
    epochs: int | None = None,
    max_train_examples: int | None = None,
    task: str = "single-label",
) -> RunConfig:
    files = demo_files(task)
    return RunConfig(
        output_dir=output_dir,
        # all-MiniLM-L6-v2 is a sentence-transformers model: its pooler was never trained for
        # it, so the head reads the mean of the token vectors.
        model=ModelConfig(
            name="minilm-l6", max_seq_length=DEMO_MAX_SEQ_LENGTH, pooling="mean", task=task
        ),
        data=DataConfig(
            train=str(files["train"]), eval=str(files["dev"]), max_train_examples=max_train_examples
        ),
        train=TrainConfig(
            batch_size=32,
            epochs=DEMO_EPOCHS if epochs is None else epochs,
            learning_rate=5e-5,
            seed=42,
        ),
    )


def _interrupted_demo(
    stopped: TrainingInterrupted, epochs: int | None, max_train_examples: int | None, task: str
) -> TrainingInterrupted:
    """`train`'s interruption with the demo's own command to resume it: train's hint names
    `--resume` and `bertfit train --config ...`, which `bertfit demo` does not take. With the
    run's directory and the same settings the demo continues from the checkpoint (`train`
    resumes a run of the same config there without asking)."""
    if stopped.run_dir is None:
        return stopped
    flags = [f"--output-dir {stopped.run_dir}"]
    flags += [f"--epochs {epochs}"] * (epochs is not None)
    flags += [f"--max-train-examples {max_train_examples}"] * (max_train_examples is not None)
    flags += [f"--task {task}"] * (task != "single-label")
    return TrainingInterrupted(
        f"stopped by {signal.Signals(stopped.signum).name}; the demo's checkpoint is saved in "
        f"{stopped.run_dir}. To resume the demo: bertfit demo {' '.join(flags)}",
        stopped.signum,
        run_dir=stopped.run_dir,
    )


def run_demo(
    output_dir: str | None = None,
    epochs: int | None = None,
    max_train_examples: int | None = None,
    quiet: bool = False,
    task: str = "single-label",
) -> dict:
    from bertfit.inference.run import evaluate
    from bertfit.report import write_report
    from bertfit.training.run import train

    started = time.perf_counter()
    if epochs is not None and epochs < 1:  # checked before the data is fetched
        raise ConfigError(f"--epochs must be at least 1; got {epochs}.")
    if max_train_examples is not None and max_train_examples < 1:
        raise ConfigError(f"--max-train-examples must be at least 1; got {max_train_examples}.")
    config = demo_config(output_dir, epochs, max_train_examples, task).validate()
    subset = config.data.max_train_examples or "all"
    print(
        f"bertfit demo: fine-tuning MiniLM-L6 (minilm-l6) on Rotten Tomatoes ({task})\n"
        f"  train {config.data.train} ({subset} rows), dev for model selection\n"
        f"  epochs {config.train.epochs}, max_seq_length {config.model.max_seq_length}, "
        f"global batch {config.train.batch_size}, learning rate {config.train.learning_rate}, "
        f"mean pooling, seed {config.train.seed}",
        flush=True,
    )
    try:
        run_dir = train(config, quiet=quiet).run_dir
    except TrainingInterrupted as e:
        raise _interrupted_demo(e, epochs, max_train_examples, task) from None
    report = write_report(run_dir)
    metrics = evaluate(run_dir, str(demo_files(task)["test"]), quiet=quiet)
    minutes = (time.perf_counter() - started) / 60
    first, second = HEADLINE_METRICS[task]
    print(
        f"\ntest {first.replace('_', '-')} {metrics[first]:.4f} ({second.replace('_', '-')} "
        f"{metrics[second]:.4f}) on {metrics['num_examples']} test examples\n"
        f"time {minutes:.1f} min; run directory: {run_dir}\n"
        f"report: {report} (TensorBoard: tensorboard --logdir {run_dir})",
        flush=True,
    )
    return metrics
