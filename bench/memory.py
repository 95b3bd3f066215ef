"""Peak training memory and step time of a random encoder, each setting in its own process:
full fine-tuning vs `--remat` (and LoRA, LoRA + remat, LoRA on a bf16 and on an int8 frozen base
where this bertfit has `--lora-rank`), against `bertfit check`'s memory plan
(`bertfit.checks.memory`).

    python -m bench.memory [--layers 24 --hidden 1024 --heads 16 --seq 256 --batch 1]

Default: BERT-large's shape (24 layers, hidden 1024, 16 heads, feed-forward 4096) with random
weights and a 1024-word vocabulary (the vocabulary only sizes the embedding table; BERT's
30522 words would add 0.5 GB of weights, gradients and slots that no setting here changes),
seq 256, batch 1 per replica: full fine-tuning with AdamW needs ~5 GB for its weights,
gradients and slots alone, and the machine is shared.

Measured: the process's peak resident memory (Linux VmHWM, reset after the warm-up step, which
compiles) over 2 steps of the real compiled step (`Trainer`: XLA replica step, clipping, AdamW),
minus its resident memory before the model was built (TensorFlow and XLA started). On a CPU
`tf.config.experimental.get_memory_info` keeps no statistics (it returns zeros). Writes
bench/results/memory.json.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

RESULT_KEY = "MEMORY-RESULT "


@dataclasses.dataclass(frozen=True)
class Setting:
    """One measured configuration."""

    name: str
    layers: int
    hidden: int
    heads: int
    intermediate: int
    vocab: int
    batch: int
    seq: int
    remat: bool = False
    lora_rank: int = 0
    base_precision: str = "fp32"  # with lora_rank: the frozen base's (--base-precision)
    steps: int = 2


def _status(field: str) -> int:
    """A field of /proc/self/status in bytes (VmRSS: resident now, VmHWM: its peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    """Hands freed heap pages back (glibc's malloc_trim: what the XLA compiler used and freed
    would otherwise stay resident), then resets VmHWM to the resident memory now (Linux:
    clear_refs 5)."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")


def _batch(setting: Setting) -> dict:
    import numpy as np
    import tensorflow as tf

    from bertfit.data.pipeline import GLOBAL_EXAMPLES
    from bertfit.model.inputs import LABEL, WEIGHT

    rng = np.random.default_rng(0)
    shape = (setting.batch, setting.seq)
    return {
        "input_word_ids": tf.constant(rng.integers(5, setting.vocab, shape).astype("int32")),
        "input_mask": tf.ones(shape, tf.int32),
        "input_type_ids": tf.zeros(shape, tf.int32),
        LABEL: tf.constant(rng.integers(0, 2, setting.batch).astype("int32")),
        WEIGHT: tf.ones([setting.batch], tf.float32),
        GLOBAL_EXAMPLES: tf.constant(float(setting.batch)),
    }


def _trainer(setting: Setting):
    import tensorflow as tf

    from bertfit.config import TrainConfig
    from bertfit.model.classifier import BertClassifier
    from bertfit.model.config import BertConfig
    from bertfit.model.encoder import BertEncoder
    from bertfit.training.loop import Trainer
    from bertfit.training.xla import XlaChoice

    config = BertConfig(
        vocab_size=setting.vocab,
        hidden_size=setting.hidden,
        num_hidden_layers=setting.layers,
        num_attention_heads=setting.heads,
        intermediate_size=setting.intermediate,
        max_position_embeddings=max(512, setting.seq),
    )

    train = TrainConfig(jit_compile=True, remat=setting.remat, seed=0)

    def build():
        if not setting.lora_rank:
            encoder = BertEncoder(config)
            encoder.remat = setting.remat
            return BertClassifier(encoder, 2, "cls", dropout=0.1)
        # only where has_lora(): the run's own encoder policy and adapters (int8: quantized)
        from bertfit.config import ModelConfig, RunConfig, encoder_policy
        from bertfit.training.setup import with_lora

        model_config = ModelConfig(
            lora_rank=setting.lora_rank, base_precision=setting.base_precision
        )
        encoder = BertEncoder(config, dtype=encoder_policy(model_config))
        encoder.remat = setting.remat
        model = BertClassifier(encoder, 2, "cls", dropout=0.1)
        return with_lora(model, RunConfig(model=model_config, train=train))

    strategy = tf.distribute.get_strategy()
    xla = XlaChoice.for_run(True, strategy)  # the whole step compiled, as on an accelerator
    return Trainer(build, strategy, train, total_steps=100, xla=xla), config


def measure(setting: Setting) -> dict:
    """In this process: the plan's prediction, the measured peak and the step time."""
    import tensorflow as tf

    from bertfit.checks.memory import plan_for_model
    from bertfit.tf_startup import start_tensorflow

    start_tensorflow()
    tf.function(lambda x: x * 2, jit_compile=True)(tf.ones([2])).numpy()  # XLA started
    _reset_peak()
    baseline = _status("VmRSS")
    trainer, config = _trainer(setting)
    batch = _batch(setting)
    start = time.perf_counter()
    trainer._apply(batch)[0].numpy()  # traces and compiles
    compile_seconds = time.perf_counter() - start
    _reset_peak()
    times = []
    for _ in range(setting.steps):
        start = time.perf_counter()
        trainer._apply(batch)[0].numpy()
        times.append(time.perf_counter() - start)
    peak = _status("VmHWM") - baseline
    compute_bytes = tf.as_dtype(trainer.model.encoder.dtype_policy.compute_dtype).size
    predicted = plan_for_model(
        trainer.model, config, (setting.batch, setting.seq), compute_bytes, setting.remat
    ).to_dict()
    return {
        **dataclasses.asdict(setting),
        "trainable_parameters": int(sum(v.numpy().size for v in trainer.variables)),
        "measured_peak_bytes": peak,
        "predicted": predicted,
        "error": predicted["peak_bytes"] / peak - 1,
        "step_seconds": min(times),
        "first_call_seconds": compile_seconds,
    }


def measure_in_subprocess(setting: Setting, timeout: float = 1800) -> dict:
    """`measure` in a fresh Python process: each setting's peak alone."""
    command = [
        sys.executable,
        "-m",
        "bench.memory",
        "--measure",
        json.dumps(dataclasses.asdict(setting)),
    ]
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, cwd=root, env=env
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith(RESULT_KEY)]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{setting.name} failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(lines[-1].removeprefix(RESULT_KEY))


def has_lora() -> bool:
    """Whether this bertfit has `--lora-rank` (issue 48, items 1-2)."""
    from bertfit.config import ModelConfig, TrainConfig

    fields = {f.name for c in (ModelConfig, TrainConfig) for f in dataclasses.fields(c)}
    return "lora_rank" in fields


def settings(args) -> list[Setting]:
    shape = dict(
        layers=args.layers,
        hidden=args.hidden,
        heads=args.heads,
        intermediate=4 * args.hidden,
        vocab=args.vocab,
        batch=args.batch,
        seq=args.seq,
    )
    chosen = [Setting("full", **shape), Setting("remat", **shape, remat=True)]
    if has_lora():
        chosen += [
            Setting("lora", **shape, lora_rank=8),
            Setting("lora+remat", **shape, lora_rank=8, remat=True),
            Setting("lora+bf16 base", **shape, lora_rank=8, base_precision="bf16"),
            Setting("lora+int8 base", **shape, lora_rank=8, base_precision="int8"),
        ]
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--out", default="memory", help="bench/results/OUT.json")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(RESULT_KEY + json.dumps(measure(Setting(**json.loads(args.measure)))))
        return
    from bench.common import write_result

    load = os.getloadavg()
    rows = [measure_in_subprocess(setting) for setting in settings(args)]
    full = rows[0]
    for row in rows:
        row["peak_vs_full"] = row["measured_peak_bytes"] / full["measured_peak_bytes"]
        row["step_time_vs_full"] = row["step_seconds"] / full["step_seconds"]
    write_result(
        args.out,
        {
            "load_average_before": load,
            "load_average_after": os.getloadavg(),
            "lora_available": has_lora(),
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
