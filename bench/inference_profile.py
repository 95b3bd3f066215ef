"""What bounds fp32 inference on this CPU: one forward pass of the fine-tuned MiniLM-L6 at fixed
shapes in TensorFlow (Grappler off, as `bertfit train` runs on a CPU; with Grappler, as
`bertfit predict`, `evaluate` and `serve` run; and with XLA), torch
and ONNX Runtime (the fused peer), against the same model's matrix products alone in each
runtime.

    python -m bench.inference_profile --work bench/.runs/inference/full [--repeats 20]

`--work` is `bench.inference`'s folder (its run, the transformers copy of the weights and the
peer's ONNX model). Each runtime runs in a process of its own with 2 threads. The matrix
products of one forward are, per layer, the query/key/value/output projections ([N, 384] x
[384, 384], four), the feed-forward pair ([N, 384] x [384, 1536] and back) and attention's two
batched products ([B, 12, S, 32] x [B, 12, 32, S] and [B, 12, S, S] x [B, 12, S, 32]), N = B x S;
timed as a chain of those products alone, they give each runtime's matrix-product speed at the
model's shapes, and `forward - products` what everything else costs. Writes
bench/results/inference_profile.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import bert_forward_gflop, write_result

THREADS = 2
SHAPES = ((64, 32), (64, 64))  # (batch, seq): the RT test texts run at ~30 token slots a text
LAYERS, WIDTH, INNER, HEADS = 6, 384, 1536, 12
MINILM = {"hidden_size": WIDTH, "intermediate_size": INNER, "num_hidden_layers": LAYERS}


def _median_seconds(fn, repeats: int) -> float:
    fn(), fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _ids(batch: int, seq: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 20000, (batch, seq)).astype("int32")
    ids[:, 0], ids[:, -1] = 101, 102
    return {"ids": ids, "mask": np.ones_like(ids), "types": np.zeros_like(ids)}


def _operands(batch: int, seq: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """One layer's matrix-product operands, in the model's order."""
    rng = np.random.default_rng(1)
    rows, size = batch * seq, WIDTH // HEADS

    def r(*shape):
        return rng.standard_normal(shape).astype("float32")

    x, hidden = r(rows, WIDTH), r(rows, INNER)
    q, k = r(batch, HEADS, seq, size), r(batch, HEADS, size, seq)
    scores = r(batch, HEADS, seq, seq)
    return [(x, r(WIDTH, WIDTH))] * 4 + [
        (q, k),
        (scores, r(batch, HEADS, seq, size)),
        (x, r(WIDTH, INNER)),
        (hidden, r(INNER, WIDTH)),
    ]


def part_tensorflow(work: Path, repeats: int, mode: str) -> dict:
    from bertfit.tf_startup import start_tensorflow

    start_tensorflow()  # Grappler off on a CPU, as for training; "grappler": as predict
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(THREADS)
    tf.config.threading.set_inter_op_parallelism_threads(THREADS)
    if mode == "grappler":
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": False})
    from bertfit.inference.predictor import load_classifier

    model = load_classifier(work / "run").module.model
    forward = tf.function(
        lambda x: model(x, training=False), jit_compile=mode == "xla", autograph=False
    )

    @tf.function(autograph=False, jit_compile=mode == "xla")
    def products(pairs):
        return [tf.matmul(a, b) for _ in range(LAYERS) for a, b in pairs]

    result = {}
    for batch, seq in SHAPES:
        ids = _ids(batch, seq)
        inputs = {
            "input_word_ids": tf.constant(ids["ids"]),
            "input_mask": tf.constant(ids["mask"]),
            "input_type_ids": tf.constant(ids["types"]),
        }
        pairs = [(tf.constant(a), tf.constant(b)) for a, b in _operands(batch, seq)]
        result[f"{batch}x{seq}"] = {
            "forward": _median_seconds(lambda inputs=inputs: forward(inputs).numpy(), repeats),
            "products": _median_seconds(
                lambda pairs=pairs: [p.numpy() for p in products(pairs)], repeats
            ),
        }
    return result


def part_torch(work: Path, repeats: int, mode: str) -> dict:
    import torch
    from transformers import BertForSequenceClassification

    torch.set_num_threads(THREADS)
    model = BertForSequenceClassification.from_pretrained(str(work / "hf")).eval()
    result = {}
    with torch.inference_mode():
        for batch, seq in SHAPES:
            ids = _ids(batch, seq)
            inputs = {
                "input_ids": torch.from_numpy(ids["ids"].astype("int64")),
                "attention_mask": torch.from_numpy(ids["mask"].astype("int64")),
                "token_type_ids": torch.from_numpy(ids["types"].astype("int64")),
            }
            pairs = [(torch.from_numpy(a), torch.from_numpy(b)) for a, b in _operands(batch, seq)]
            result[f"{batch}x{seq}"] = {
                "forward": _median_seconds(
                    lambda inputs=inputs: model(**inputs).logits.numpy(), repeats
                ),
                "products": _median_seconds(
                    lambda pairs=pairs: [
                        torch.matmul(a, b) for _ in range(LAYERS) for a, b in pairs
                    ],
                    repeats,
                ),
            }
    return result


def part_onnxruntime(work: Path, repeats: int, mode: str) -> dict:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    model = work / "peer-onnx" / "model-fp32.onnx"
    session = onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    result = {}
    for batch, seq in SHAPES:
        ids = _ids(batch, seq)
        feed = {
            "input_ids": ids["ids"].astype("int64"),
            "attention_mask": ids["mask"].astype("int64"),
            "token_type_ids": ids["types"].astype("int64"),
        }
        feed = {i.name: feed[i.name] for i in session.get_inputs()}
        forward = _median_seconds(lambda feed=feed: session.run(None, feed), repeats)
        result[f"{batch}x{seq}"] = {"forward": forward}
    return result


PARTS = {
    "tensorflow": (part_tensorflow, "off"),
    "tensorflow-grappler": (part_tensorflow, "grappler"),
    "tensorflow-xla": (part_tensorflow, "xla"),
    "torch": (part_torch, ""),
    "onnxruntime-fused": (part_onnxruntime, ""),
}


def summarize(parts: dict) -> dict:
    """Per shape and runtime: forward ms, products ms, their GFLOP/s, the rest's ms."""
    table = {}
    for name, shapes in parts.items():
        for shape, t in shapes.items():
            batch, seq = map(int, shape.split("x"))
            work = bert_forward_gflop(MINILM, batch, seq)
            row = {"forward_ms": t["forward"] * 1e3, "forward_gflops": work / t["forward"]}
            if "products" in t:
                row["products_ms"] = t["products"] * 1e3
                row["products_gflops"] = work / t["products"]
                row["rest_ms"] = (t["forward"] - t["products"]) * 1e3
            table.setdefault(shape, {})[name] = row
    return table


def rows(result: dict) -> list[str]:
    """BENCHMARKS.md's generated rows: each TensorFlow setting's forward against torch's."""
    out = []
    for shape, table in result["summary"].items():
        torch = table["torch"]
        for name, row in table.items():
            if not name.startswith("tensorflow"):
                continue
            out.append(
                f"| one forward, {shape} tokens, {name} (products / rest) | "
                f"{row['forward_ms']:.0f} ms ({row['products_ms']:.0f} / {row['rest_ms']:.0f}) | "
                f"{torch['forward_ms']:.0f} ms ({torch['products_ms']:.0f} / "
                f"{torch['rest_ms']:.0f}) (torch) | "
                f"{torch['forward_ms'] / row['forward_ms']:.2f}x |"
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("bench/.runs/inference/full"))
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--part", choices=sorted(PARTS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.part:
        fn, mode = PARTS[args.part]
        print(json.dumps(fn(args.work, args.repeats, mode)))
        return
    parts = {}
    for name in PARTS:
        command = [sys.executable, "-m", "bench.inference_profile", "--part", name]
        command += ["--work", str(args.work), "--repeats", str(args.repeats)]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        parts[name] = json.loads(done.stdout.strip().splitlines()[-1])
        print(name, parts[name], flush=True)
    result = {"threads": THREADS, "parts": parts, "summary": summarize(parts)}
    write_result("inference_profile", result)
    for shape, rows in result["summary"].items():
        for name, row in rows.items():
            print(shape, name, {k: round(v, 1) for k, v in row.items()})


if __name__ == "__main__":
    main()
