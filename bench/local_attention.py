"""One ModernBERT sliding-window layer, its window computed densely (a [seq, seq] bias on full
attention) against only the band (`bertfit.model.local_attention`), at 512, 2k and 8k tokens:
time and peak memory, each setting in a process of its own.

    python -m bench.local_attention [--lengths 512 2048 8192 --train-lengths 512 1024 2048]
    python -m bench.local_attention --one 8192 banded [--step train]  # one setting, for A/B runs

The layer is ModernBERT-base's (hidden 768, 12 heads, GeGLU of 1152, window 128: |i - j| <=
64), random weights, batch 1, float32, in a TensorFlow graph traced for the length (what a
training step on a CPU runs: static shapes per length bucket, no XLA). "forward" is one call;
"train" the call and the gradients of its output's sum with respect to the layer's weights
and its input. Time: the fastest of `--repeats` calls after a warm-up call. Peak: the
process's peak resident memory (Linux VmHWM, reset after the warm-up) over those calls, minus
its resident memory before the layer was built. Writes bench/results/local_attention.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.memory import _reset_peak, _status

RESULT_KEY = "LOCAL-ATTENTION-RESULT "
MODES = ("dense", "banded")


@dataclasses.dataclass(frozen=True)
class Setting:
    length: int
    mode: str  # "dense" or "banded"
    step: str = "forward"  # or "train"
    hidden: int = 768
    heads: int = 12
    intermediate: int = 1152
    local_attention: int = 128
    batch: int = 1
    repeats: int = 3


def _layer_and_inputs(setting: Setting):
    import numpy as np
    import tensorflow as tf

    from bertfit.model.config import BertConfig
    from bertfit.model.local_attention import window_bias
    from bertfit.model.modernbert import EncoderParts, ModernBertLayer, ModernBertSettings

    settings = ModernBertSettings(local_attention=setting.local_attention)
    config = BertConfig(
        vocab_size=64, hidden_size=setting.hidden, num_hidden_layers=2,
        num_attention_heads=setting.heads, intermediate_size=setting.intermediate,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, absolute_positions=False,
        type_vocab_size=0, has_pooler=False, layer_norm_eps=1e-5, model_type="modernbert",
        max_position_embeddings=max(8192, setting.length),
        variant=dataclasses.asdict(settings),
    )  # fmt: skip
    layer = ModernBertLayer(config, index=1)  # not a multiple of 3: a local layer
    layer.build()
    parts = EncoderParts(config)
    shape = (setting.batch, setting.length)
    context = parts.context({"input_word_ids": tf.zeros(shape, tf.int32)})
    window = window_bias(setting.length, settings.window) if setting.mode == "dense" else None
    context = dataclasses.replace(context, window=window)
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(setting.batch * setting.length, setting.hidden))
    rows = tf.constant(rows, tf.float32)
    mask = np.ones(shape, np.float32)
    mask[:, -setting.length // 8 :] = 0  # some padding, as a bucket has
    bias = tf.constant(((1 - mask) * -1e9)[:, None, None, :])
    return layer, context, rows, bias


def measure(setting: Setting) -> dict:
    import tensorflow as tf

    from bertfit.tf_startup import start_tensorflow

    start_tensorflow()
    _reset_peak()
    baseline = _status("VmRSS")
    layer, context, rows, bias = _layer_and_inputs(setting)

    def forward(rows):
        return layer(rows, bias, context=context)

    def train(rows):
        with tf.GradientTape() as tape:
            tape.watch(rows)
            total = tf.reduce_sum(forward(rows))
        return tape.gradient(total, [rows, *layer.trainable_variables])

    step = tf.function(forward if setting.step == "forward" else train, autograph=False)
    start = time.perf_counter()
    tf.nest.map_structure(lambda t: t.numpy(), step(rows))
    first = time.perf_counter() - start
    _reset_peak()
    times = []
    for _ in range(setting.repeats):
        start = time.perf_counter()
        tf.nest.map_structure(lambda t: t.numpy(), step(rows))
        times.append(time.perf_counter() - start)
    return {
        **dataclasses.asdict(setting),
        "seconds": min(times),
        "first_call_seconds": first,
        "peak_bytes": _status("VmHWM") - baseline,
    }


def measure_in_subprocess(setting: Setting, timeout: float = 1800) -> dict:
    root = Path(__file__).resolve().parent.parent
    command = [sys.executable, "-m", "bench.local_attention", "--measure",
               json.dumps(dataclasses.asdict(setting))]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, cwd=root, env=env
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith(RESULT_KEY)]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{setting} failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(lines[-1].removeprefix(RESULT_KEY))


def table_rows(rows: list[dict]) -> list[str]:
    """BENCHMARKS.md's results table: the band against the dense window, per length and step."""
    return [
        f"| ModernBERT-base local layer, {row['length']} tokens, {row['step']}: the band vs the "
        f"dense window | {row['seconds']:.2f} s, {row['peak_bytes'] / 2**20:.0f} MiB | - | "
        f"{row['time_vs_dense']:.2f}x the time, {row['peak_vs_dense']:.2f}x the memory |"
        for row in rows
        if row["mode"] == "banded"
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 8192])
    parser.add_argument("--train-lengths", type=int, nargs="*", default=[512, 1024, 2048])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="local_attention", help="bench/results/OUT.json")
    parser.add_argument("--one", nargs=2, metavar=("LENGTH", "MODE"),
                        help="measure one setting in this process and print it")  # fmt: skip
    parser.add_argument("--step", choices=["forward", "train"], default="forward",
                        help="with --one: the step measured")  # fmt: skip
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure or args.one:
        setting = (
            Setting(**json.loads(args.measure))
            if args.measure
            else Setting(int(args.one[0]), args.one[1], args.step, repeats=args.repeats)
        )
        print(RESULT_KEY + json.dumps(measure(setting)))
        return
    from bench.common import write_result

    load = os.getloadavg()
    settings = [Setting(n, mode, "forward", repeats=args.repeats)
                for n in args.lengths for mode in MODES]  # fmt: skip
    settings += [Setting(n, mode, "train", repeats=args.repeats)
                 for n in args.train_lengths for mode in MODES]  # fmt: skip
    rows = [measure_in_subprocess(setting) for setting in settings]
    for row in rows:
        dense = next(r for r in rows if (r["length"], r["step"], r["mode"]) ==
                     (row["length"], row["step"], "dense"))  # fmt: skip
        row["time_vs_dense"] = row["seconds"] / dense["seconds"]
        row["peak_vs_dense"] = row["peak_bytes"] / dense["peak_bytes"]
    write_result(
        args.out,
        {
            "load_average_before": load,
            "load_average_after": os.getloadavg(),
            "rows": rows,
            "table_rows": table_rows(rows),
        },
    )


if __name__ == "__main__":
    main()
