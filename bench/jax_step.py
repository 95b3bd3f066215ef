"""bertfit's JAX training step on a GPU or TPU, against transformers' PyTorch step on the same
device, at MiniLM-L6's and BERT-base's shapes, in float32 and bfloat16.

    python -m bench.jax_step                       # the default: ~2-4 minutes on an H100/H200
    python -m bench.jax_step --remat               # each layer recomputed in the backward pass
    python -m bench.jax_step --steps 2 --layers 1 --hidden 32 --heads 2 --intermediate 64 \
        --vocab 100 --batch 4 --seq 16             # a smoke run on a CPU

Needs only JAX, Keras, numpy, PyTorch, transformers, safetensors and PyYAML: no TensorFlow, no
TF Text (a GPU machine without TensorFlow's wheel runs it; `tests/test_bench_jax_step.py` runs
it in a process where TensorFlow cannot be imported). Every row is the classifier at random
weights on one random batch (token ids, padding in the last quarter of half the rows), batch 32
and sequence 128 by default:

- bertfit: `BertClassifier` (dropout 0.1 as BERT's) through `training/jax_step.py`'s `JaxStep`,
  the step `--backend jax` trains with (forward, loss, gradients, global-norm clipping at 1,
  the run's AdamW with its schedule), `jax.jit`-ted with the state donated, as `JaxTrainer`
  does. "compile_s" is lowering and XLA compilation, once; then warm-up steps, then timed ones.
  bf16 is bertfit's `--precision bf16`: the "mixed_bfloat16" Keras policy (float32 weights,
  bfloat16 matrix work, float32 norms, softmax and loss).
  "peak_memory_gb" is XLA's memory plan for the step (`compiled.memory_analysis()`).
- torch: `BertForSequenceClassification` (its default attention), AdamW, gradient clipping at
  1, eager; bf16 is `torch.autocast(dtype=bfloat16)` over the forward and the loss.
  "torch.compile" (`--frameworks bertfit,torch,torch.compile`): the same model `torch.compile`d
  (default mode) with the fused AdamW, the fastest plain PyTorch recipe: eager PyTorch launches
  each small kernel from Python, which a small encoder on a large GPU waits on.
  "compile_s" is its first step (CUDA kernels loaded, autotuning); "peak_memory_gb" the CUDA
  allocator's peak over the row.

FLOPs: 3 x the encoder's forward matrix products per step (`bert_forward_gflop`, PaLM's MFU
convention: embeddings, norms and the head left out); MFU divides the achieved rate by the
device's dense peak for the row's precision (bf16's; float32 rows by the TF32 tensor-core peak,
or with `--fp32-matmul highest` the plain float32 one: both frameworks are set to compute
float32 products the same way, TF32 by default, and their settings are recorded).
The result goes to bench/results/jax_step_<device>.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import platform
import re
import resource
import sys
import time

import numpy as np

from bench.common import bert_forward_gflop, write_result

PRECISIONS = ("fp32", "bf16")


@dataclasses.dataclass(frozen=True)
class Shape:
    """An encoder's size (a Hugging Face BertConfig's numbers)."""

    name: str
    layers: int
    hidden: int
    heads: int
    intermediate: int
    vocab: int = 30522

    def hf_config(self) -> dict:
        return {
            "num_hidden_layers": self.layers,
            "hidden_size": self.hidden,
            "num_attention_heads": self.heads,
            "intermediate_size": self.intermediate,
            "vocab_size": self.vocab,
            "max_position_embeddings": 512,
            "type_vocab_size": 2,
        }


SHAPES = {
    "minilm-l6": Shape("minilm-l6", 6, 384, 12, 1536),
    "bert-base": Shape("bert-base", 12, 768, 12, 3072),
}

# Dense peak TFLOP/s per chip, from the vendors' data sheets: bf16, float32 products as TF32
# on tensor cores, float32 without them.
PEAK_TFLOPS = {
    "H200": {"bf16": 989.4, "tf32": 494.7, "highest": 66.9},
    "H100": {"bf16": 989.4, "tf32": 494.7, "highest": 66.9},  # SXM; PCIe: 756, 378, 51
    "A100": {"bf16": 312.0, "tf32": 156.0, "highest": 19.5},
    "L4": {"bf16": 121.0, "tf32": 60.0, "highest": 30.3},
    "TPU v5 lite": {"bf16": 197.0},
    "TPU v6 lite": {"bf16": 918.0},
}
# --fp32-matmul: how both frameworks compute float32 products (the same way, so that the fp32
# rows compare the same arithmetic): JAX's `jax_default_matmul_precision`, torch's
# `set_float32_matmul_precision`.
FP32_MATMUL = {"tf32": ("tensorfloat32", "high"), "highest": ("highest", "highest")}


def peak_tflops(device_kind: str, precision: str, fp32_matmul: str) -> float | None:
    """The device's dense peak for the row, or None where it is not known (a CPU)."""
    for kind, peaks in PEAK_TFLOPS.items():
        if kind.lower() in device_kind.lower():
            return peaks.get("bf16" if precision == "bf16" else fp32_matmul)
    return None


def random_batch(shape: Shape, batch: int, seq: int) -> dict[str, np.ndarray]:
    """Token ids, a mask with the last quarter padded on every other row, labels 0/1."""
    rng = np.random.default_rng(0)
    mask = np.ones((batch, seq), "int32")
    mask[::2, seq - seq // 4 :] = 0
    ids = rng.integers(1, shape.vocab, (batch, seq)).astype("int32") * mask
    types = np.zeros((batch, seq), "int32")
    types[:, seq // 2 :] = 1
    labels = rng.integers(0, 2, batch).astype("int32")
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types, "label": labels}


def timed_row(step, warmup: int, steps: int, sync) -> dict:
    """Runs `step()` `warmup` times, then `steps` times timed; `sync()` waits for the device
    and returns the last loss."""
    for _ in range(warmup):
        step()
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    loss = sync()
    seconds = (time.perf_counter() - start) / steps
    return {"step_s": seconds, "steps_per_s": 1 / seconds, "loss": loss}


def classifier_step(
    shape: Shape, precision: str, *, batch: int, seq: int, total_steps: int, remat: bool = False
):
    """bertfit's classifier at `shape` (random weights, seed 0, dropout 0.1 as BERT's) with its
    `JaxStep` (the run's AdamW), and one `random_batch` of `batch` x `seq` with its weights:
    (step, batch)."""
    import keras

    from bertfit.config import PRECISION_POLICIES, TrainConfig
    from bertfit.model.classifier import BertClassifier
    from bertfit.model.config import BertConfig
    from bertfit.model.encoder import BertEncoder
    from bertfit.model.inputs import GLOBAL_EXAMPLES, WEIGHT
    from bertfit.training.jax_step import JaxStep
    from bertfit.training.optimizer import make_optimizer

    config = BertConfig(**shape.hf_config())
    keras.utils.set_random_seed(0)  # the same initial weights in every run
    encoder = BertEncoder(config, dtype=PRECISION_POLICIES[precision])
    encoder.remat = remat  # --remat: jax.checkpoint around each layer
    model = BertClassifier(encoder, num_classes=2, dropout=0.1, seed=0)
    model.built = True
    train = TrainConfig()
    optimizer = make_optimizer(train, total_steps=total_steps)
    optimizer.build(model.trainable_variables)
    step = JaxStep(model, optimizer, model.trainable_variables, train)
    rows = random_batch(shape, batch, seq)
    rows[WEIGHT] = np.ones(batch, "float32")
    rows[GLOBAL_EXAMPLES] = np.float32(batch)
    return step, rows


def bertfit_row(shape: Shape, precision: str, args) -> dict:
    """bertfit's classifier through `JaxStep`, jitted as `JaxTrainer` jits it."""
    import jax

    from bertfit.jax_devices import compiler_options
    from bertfit.training.jax_step import xla_memory

    step, batch = classifier_step(
        shape,
        precision,
        batch=args.batch,
        seq=args.seq,
        total_steps=args.warmup + args.steps + 1,
        remat=args.remat,
    )
    batch = jax.device_put(batch)

    # the float32 rows' products as --fp32-matmul says; bfloat16 products left as they are
    matmul = FP32_MATMUL[args.fp32_matmul][0] if precision == "fp32" else None
    start = time.perf_counter()
    with jax.default_matmul_precision(matmul):
        options = compiler_options(jax.devices())  # as JaxTrainer's
        jitted = jax.jit(step._step, donate_argnums=0, compiler_options=options)
        fixed = step._read_fixed()
        compiled = jitted.lower(step._read_state(), fixed, batch).compile()
    compile_s = time.perf_counter() - start
    state = [step._read_state()]
    results = []

    def one_step():
        state[0], result = compiled(state[0], fixed, batch)
        results.append(result)

    def sync():
        return float(np.asarray(results[-1])[0])

    row = timed_row(one_step, args.warmup, args.steps, sync)
    # XLA's plan for this step alone (a process-wide peak would count earlier rows)
    peak = xla_memory(compiled)
    return {"compile_s": compile_s, **row, "peak_memory_gb": peak and peak / 2**30}


def torch_row(shape: Shape, precision: str, args, compiled: bool = False) -> dict:
    """transformers' BertForSequenceClassification, AdamW, on the same device: eager, or
    (`compiled`) `torch.compile`d with the fused AdamW, the fastest plain PyTorch recipe."""
    import contextlib

    import torch
    import transformers

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    config = transformers.BertConfig(**shape.hf_config(), num_labels=2)
    model = transformers.BertForSequenceClassification(config).to(device).train()
    if args.remat:  # each layer recomputed in the backward pass, as bertfit's --remat
        model.gradient_checkpointing_enable()
    fused = compiled and device.type == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01, fused=fused)
    forward = torch.compile(model) if compiled else model
    arrays = random_batch(shape, args.batch, args.seq)
    names = {
        "input_ids": "input_word_ids",
        "attention_mask": "input_mask",
        "token_type_ids": "input_type_ids",
        "labels": "label",
    }
    inputs = {
        name: torch.as_tensor(arrays[ours], dtype=torch.long, device=device)
        for name, ours in names.items()
    }
    autocast = (
        torch.autocast(device.type, dtype=torch.bfloat16)
        if precision == "bf16"
        else contextlib.nullcontext()
    )
    losses = []

    def one_step():
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            loss = forward(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.detach())

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()
        return float(losses[-1])

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    one_step()
    sync()
    compile_s = time.perf_counter() - start
    row = timed_row(one_step, max(0, args.warmup - 1), args.steps, sync)
    memory = torch.cuda.max_memory_allocated() if device.type == "cuda" else None
    return {
        "compile_s": compile_s,
        **row,
        "peak_memory_gb": memory and memory / 2**30,
        "attention": getattr(model.config, "_attn_implementation", None),
    }


RUN = {
    "bertfit": bertfit_row,
    "torch": torch_row,
    "torch.compile": functools.partial(torch_row, compiled=True),
}


def with_rates(row: dict, shape: Shape, args, device_kind: str) -> dict:
    """Adds examples/s, TFLOP/s and MFU to a timed row."""
    tflop = 3 * bert_forward_gflop(shape.hf_config(), args.batch, args.seq) / 1e3
    peak = peak_tflops(device_kind, row["precision"], args.fp32_matmul)
    achieved = tflop * row["steps_per_s"]
    return {
        **row,
        "examples_per_s": args.batch * row["steps_per_s"],
        "tflop_per_step": tflop,
        "tflops": achieved,
        "peak_tflops": peak,
        "mfu": peak and achieved / peak,
    }


def versions() -> dict:
    import jax
    import keras
    import torch
    import transformers

    return {
        "python": platform.python_version(),
        "jax": jax.__version__,
        "keras": keras.__version__,
        "numpy": np.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tensorflow_loaded": sys.modules.get("tensorflow") is not None,
    }


def device_description(args) -> dict:
    import jax
    import torch

    device = jax.devices()[0]
    return {
        "jax_device": f"{device.platform}:{device.device_kind}",
        "jax_devices": jax.device_count(),
        "torch_device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "fp32_matmul": {
            "jax": FP32_MATMUL[args.fp32_matmul][0],
            "torch": torch.get_float32_matmul_precision(),
        },
    }


def device_slug(device_kind: str) -> str:
    """ "NVIDIA H200" -> "nvidia-h200": the result file's name."""
    return re.sub(r"[^a-z0-9]+", "-", device_kind.lower()).strip("-") or "device"


def table(rows: list[dict]) -> list[str]:
    """One line per row, for the terminal and BENCHMARKS.md."""
    lines = [
        "| framework | shape | precision | compile s | steps/s | examples/s | TFLOP/s | MFU "
        "| peak GiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mfu = "-" if r["mfu"] is None else f"{r['mfu']:.1%}"
        memory = "-" if r["peak_memory_gb"] is None else f"{r['peak_memory_gb']:.1f}"
        lines.append(
            f"| {r['framework']} | {r['shape']} | {r['precision']} | {r['compile_s']:.1f} "
            f"| {r['steps_per_s']:.2f} | {r['examples_per_s']:.0f} | {r['tflops']:.3g} "
            f"| {mfu} | {memory} |"
        )
    return lines


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join(SHAPES), help="of " + ", ".join(SHAPES))
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--frameworks", default="bertfit,torch", help="of " + ", ".join(RUN))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps after compiling")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per row")
    # smaller sizes (every shape): a smoke run on a CPU
    for name in ("layers", "hidden", "heads", "intermediate", "vocab"):
        parser.add_argument(f"--{name}", type=int, help=f"every shape's {name} instead")
    parser.add_argument(
        "--remat", action="store_true", help="recompute each layer in the backward pass"
    )
    parser.add_argument(
        "--fp32-matmul",
        choices=list(FP32_MATMUL),
        default="tf32",
        help="float32 products on tensor cores (TF32) or in full float32, in both frameworks",
    )
    parser.add_argument("--name", help="the result file's name (default jax_step_<device>)")
    args = parser.parse_args(argv)
    for flag, given, known in (
        ("--shapes", args.shapes, SHAPES),
        ("--precisions", args.precisions, PRECISIONS),
        ("--frameworks", args.frameworks, tuple(RUN)),
    ):
        unknown = set(given.split(",")) - set(known)
        if unknown:
            parser.error(f"{flag}: {sorted(unknown)} not among {list(known)}")
    return args


def shapes_of(args) -> list[Shape]:
    overrides = {
        k: getattr(args, k)
        for k in ("layers", "hidden", "heads", "intermediate", "vocab")
        if getattr(args, k) is not None
    }
    return [dataclasses.replace(SHAPES[name], **overrides) for name in args.shapes.split(",")]


def main(argv=None) -> None:
    args = parse_args(argv)
    # Set before JAX and Keras load (importing this module sets nothing: a test imports it).
    if "keras" not in sys.modules:  # Keras picks its backend when it is first imported
        os.environ["KERAS_BACKEND"] = "jax"
    # JAX and PyTorch share the device: JAX takes memory as it needs it, not 75% up front.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax
    import keras
    import torch

    if keras.backend.backend() != "jax":
        raise SystemExit("bench.jax_step needs Keras on JAX: run it in a fresh process")
    torch.set_float32_matmul_precision(FP32_MATMUL[args.fp32_matmul][1])  # float32 only

    device_kind = jax.devices()[0].device_kind
    rows = []
    for shape in shapes_of(args):
        for precision in args.precisions.split(","):
            for framework in args.frameworks.split(","):
                timed = RUN[framework](shape, precision, args)
                row = {"framework": framework, "shape": shape.name, "precision": precision}
                row = with_rates({**row, **timed, "layers": shape.layers}, shape, args, device_kind)
                rows.append(row)
                print(table([row])[-1], flush=True)
    result = {
        "device": device_description(args),
        "versions": versions(),
        "load_average": os.getloadavg(),
        # the process's peak resident memory (every row's): the host side of a device run
        "max_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "settings": {k: v for k, v in vars(args).items() if k != "name"},
        "rows": rows,
        "table": table(rows),
    }
    write_result(args.name or f"jax_step_{device_slug(device_kind)}", result)
    print("\n".join(table(rows)))


if __name__ == "__main__":
    main()
