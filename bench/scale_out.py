"""Training throughput of the scale-out levers, as ratios measured in the same run:
`--cpu-replicas 2` vs 1, and `--steps-per-execution 16` vs 1 at a small batch.

    python -m bench.scale_out                 # MiniLM-L6 on 1024 Rotten Tomatoes rows
    python -m bench.scale_out --quick         # a tiny random BERT, for a smoke run

Each configuration is one `bertfit train` subprocess (logical CPU devices must be configured
before TensorFlow starts). The throughput is that of the last epoch, so tracing and XLA
compilation (first epoch) are left out. Writes bench/results/scale_out.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import write_result

ROOT = Path(__file__).resolve().parent.parent


def _data(folder: Path, quick: bool) -> tuple[str, str]:
    """(model, train file): the tiny model on toy rows, or MiniLM-L6 on Rotten Tomatoes."""
    if quick:
        import keras

        from tests.tiny import sentiment_rows, write_csv, write_tiny_hf

        keras.utils.set_random_seed(0)
        (folder / "model").mkdir()
        write_tiny_hf(folder / "model", trainable=True)
        return str(folder / "model"), str(write_csv(folder / "train.csv", sentiment_rows(512)))
    from bertfit.data.rotten_tomatoes import rotten_tomatoes_dir

    return "minilm-l6", str(Path(rotten_tomatoes_dir()) / "train.csv")


def _throughput(
    model: str, train: str, output: Path, args: argparse.Namespace, *extra: str
) -> float:
    command = [
        sys.executable,
        "-m",
        "bertfit.cli",
        "train",
        "--model",
        model,
        "--train",
        train,
        "--output-dir",
        str(output),
        "--max-train-examples",
        str(args.examples),
        "--max-seq-length",
        str(args.max_seq_length),
        "--batch-size",
        str(args.batch_size),
        "--epochs",
        str(args.epochs),
        "--seed",
        "0",
        "--quiet",
        "--json",
        *extra,
    ]
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    metrics = json.loads((output / "metrics.json").read_text())
    return metrics["epochs"][-1]["train_examples_per_second"]


def _row(title: str, lever: float, base: float, ratio: float) -> str:
    return f"| training, {title} | {lever:.0f} ex/s | {base:.0f} ex/s | {ratio:.2f}x |"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny random BERT, toy rows")
    parser.add_argument("--examples", type=int, default=1024)
    parser.add_argument("--max-seq-length", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8, help="small, where host calls show")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args(argv)
    if args.quick:
        args.examples = min(args.examples, 512)
        args.max_seq_length = min(args.max_seq_length, 16)

    configs = {
        "one_device": ["--strategy", "default"],
        "cpu_replicas_2": ["--strategy", "mirrored", "--cpu-replicas", "2"],
        "steps_per_execution_1": ["--strategy", "default", "--steps-per-execution", "1"],
        "steps_per_execution_16": ["--strategy", "default", "--steps-per-execution", "16"],
    }
    with tempfile.TemporaryDirectory() as tmp:
        model, train = _data(Path(tmp), args.quick)
        rates = {
            name: _throughput(model, train, Path(tmp) / name, args, *flags)
            for name, flags in configs.items()
        }
    replicas = rates["cpu_replicas_2"] / rates["one_device"]
    spe = rates["steps_per_execution_16"] / rates["steps_per_execution_1"]
    setup = (
        f"{'tiny BERT' if args.quick else 'MiniLM-L6'}, {args.examples} rows, "
        f"seq {args.max_seq_length}, batch {args.batch_size}"
    )
    write_result(
        "scale_out",
        {
            "settings": {**vars(args), "model": model},
            "train_examples_per_second": rates,
            "ratio_cpu_replicas_2_over_1": replicas,
            "ratio_steps_per_execution_16_over_1": spe,
            "table_rows": [
                _row(
                    f"--cpu-replicas 2 vs 1 ({setup})",
                    rates["cpu_replicas_2"],
                    rates["one_device"],
                    replicas,
                ),
                _row(
                    f"--steps-per-execution 16 vs 1 ({setup})",
                    rates["steps_per_execution_16"],
                    rates["steps_per_execution_1"],
                    spe,
                ),
            ],
        },
    )


if __name__ == "__main__":
    main()
