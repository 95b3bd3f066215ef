"""The ways `bench.inference` turns raw texts into probabilities, each run in a process of its own
that imports only its runtime:

    python -m bench.inference_paths PATH --work DIR --launched UNIX_TIME --passes 3

PATH is one of `PATHS`. The process loads its model from DIR (written by `bench.inference`), runs
`--passes` passes over DIR/texts.json (the first one cold: tracing, first touch of memory), saves
the last pass's probabilities to DIR/probabilities/PATH.npy and writes DIR/timings/PATH.json:
the load time, each pass's seconds, the time from launch to the first pass's end, the token
slots per text the model ran over and, where the path tokenizes outside its model, the seconds
of one tokenizing pass alone.

Every path batches 64 texts of similar length (the peers and the ONNX clients sort by token
count, as transformers' `group_by_length` does; the SavedModel signature, which takes strings, by
character count; bertfit's predictor counts tokens in its graph) and runs on `THREADS` threads.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

THREADS = 2  # the machine's cores; every runtime gets the same
BATCH = 64
SEQ = 64  # the run's max_seq_length (bench.inference trains with it)
os.environ.setdefault("RAYON_NUM_THREADS", str(THREADS))  # the `tokenizers` package's pool


class Runner:
    """One way from texts to probabilities: `predict(texts)`, what its last call measured
    (`stats`) and `profile(texts)`, measurements taken after the timed passes."""

    def __init__(
        self,
        predict: Callable[[list[str]], np.ndarray],
        stats: dict | None = None,
        profile: Callable[[list[str]], dict] | None = None,
    ):
        self.predict = predict
        self.stats = stats if stats is not None else {}
        self.profile = profile or (lambda texts: {})


def _batches(order: np.ndarray) -> list[np.ndarray]:
    return [order[i : i + BATCH] for i in range(0, len(order), BATCH)]


def _in_order(parts: list[np.ndarray], order: np.ndarray) -> np.ndarray:
    """Rows computed in `order` (concatenated `parts`) back in input order."""
    result = np.empty_like(np.concatenate(parts))
    result[order] = np.concatenate(parts)
    return result


def _pad(rows: list[list[int]], value: int) -> np.ndarray:
    width = max(len(row) for row in rows)
    return np.array([row + [value] * (width - len(row)) for row in rows], np.int64)


# --- bertfit: TensorFlow ---------------------------------------------------------------------


def _start_tensorflow():
    from bertfit.tf_startup import start_tensorflow

    start_tensorflow(for_inference=True)  # the settings of `bertfit predict` and `serve`
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(THREADS)
    tf.config.threading.set_inter_op_parallelism_threads(THREADS)
    return tf


def bertfit_predictor(work: Path) -> Runner:
    """`bertfit.load_classifier(run).predict_proba(texts)`: what `bertfit predict` runs."""
    _start_tensorflow()
    from bertfit.inference.predictor import load_classifier

    classifier = load_classifier(work / "run")

    def profile(texts: list[str]) -> dict:
        """The predictor's first step alone (tokenizing every text to count its tokens; its
        batches tokenize again inside the graph) and the token slots its batches pad to."""
        start = time.perf_counter()
        lengths = classifier._lengths(texts, None)
        seconds = time.perf_counter() - start
        lengths = np.minimum(lengths + 2, classifier.module.max_seq_length)  # [CLS] .. [SEP]
        buckets = np.array(classifier.module.buckets)
        batches = _batches(np.argsort(lengths, kind="stable"))
        slots = sum(buckets[np.searchsorted(buckets, lengths[b].max())] * len(b) for b in batches)
        return {"tokenize_seconds": seconds, "token_slots_per_text": float(slots) / len(texts)}

    return Runner(classifier.predict_proba, profile=profile)


def bertfit_savedmodel(work: Path) -> Runner:
    """The SavedModel of `bertfit export`, loaded as a TF Serving user's script would:
    `tf.saved_model.load` and its `serving_default` signature (strings in)."""
    tf = _start_tensorflow()
    import tensorflow_text  # noqa: F401  (the tokenizer's ops)

    signature = tf.saved_model.load(str(work / "saved-model" / "1")).signatures["serving_default"]

    def predict(texts: list[str]) -> np.ndarray:
        order = np.argsort([len(text) for text in texts], kind="stable")
        parts = [
            signature(text=tf.constant([texts[i] for i in batch]))["probabilities"].numpy()
            for batch in _batches(order)
        ]
        return _in_order(parts, order)

    return Runner(predict)


# --- bertfit: portable exports in their own runtimes --------------------------------------------


def _litert(work: Path, precision: str) -> Runner:
    """The LiteRT export in the LiteRT interpreter, TensorFlow Text's kernels loaded from their C
    libraries (the recipe of bertfit/export/litert.py; no TensorFlow Python module)."""
    import ctypes
    import importlib.util

    from ai_edge_litert.interpreter import InterpreterWithCustomOps

    def package_dir(name: str) -> str:
        return importlib.util.find_spec(name).submodule_search_locations[0]

    for library in (
        os.path.join(package_dir("tensorflow"), "libtensorflow_framework.so.2"),
        os.path.join(
            package_dir("tensorflow_text"), "core", "pybinds", "libpybinds_library_common.so"
        ),
    ):
        ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)
    export = work / f"litert-{precision}" / "1"
    meta = json.loads((export / "bertfit.json").read_text())
    interpreter = InterpreterWithCustomOps(
        model_path=str(export / "model.tflite"),
        custom_op_registerers=meta["custom_ops"],
        num_threads=THREADS,
    )
    classify = interpreter.get_signature_runner()

    def predict(texts: list[str]) -> np.ndarray:
        order = np.argsort([len(text) for text in texts], kind="stable")
        parts = [
            classify(text=np.array([texts[i] for i in batch], dtype=object))[meta["output"]]
            for batch in _batches(order)
        ]
        return _in_order(parts, order)

    def profile(texts: list[str]) -> dict:
        """Token slots per text: each batch's row width (the export pads to the batch's length
        bucket), read from the [batch, width, hidden] tensors the interpreter sized."""
        slots = 0
        for batch in _batches(np.argsort([len(text) for text in texts], kind="stable")):
            classify(text=np.array([texts[i] for i in batch], dtype=object))
            shapes = [d["shape"] for d in interpreter.get_tensor_details() if len(d["shape"]) == 3]
            slots += len(batch) * max(int(s[1]) for s in shapes if s[0] == len(batch))
        return {"token_slots_per_text": slots / len(texts)}

    return Runner(predict, profile=profile)


def _ort_session(model: Path):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


def _onnx(work: Path, precision: str) -> Runner:
    """The ONNX export in ONNX Runtime, tokenized by its tokenizer.json with `tokenizers`
    (the recipe of bertfit/export/onnx.py), in batches of 64 texts of similar token count."""
    import tokenizers

    export = work / f"onnx-{precision}" / "1"
    meta = json.loads((export / "bertfit.json").read_text())
    tokenizer = tokenizers.Tokenizer.from_file(str(export / meta["tokenizer"]))
    pad_id = tokenizer.padding["pad_id"]
    tokenizer.no_padding()  # each batch pads to its own longest text below
    session = _ort_session(export / "model.onnx")
    stats: dict = {}

    def predict(texts: list[str]) -> np.ndarray:
        start = time.perf_counter()
        encoded = tokenizer.encode_batch(texts)
        stats["tokenize_seconds"] = time.perf_counter() - start
        order = np.argsort([len(e.ids) for e in encoded], kind="stable")
        parts, slots = [], 0
        for batch in _batches(order):
            ids = _pad([encoded[i].ids for i in batch], pad_id)
            feed = {
                "input_word_ids": ids,
                "input_mask": _pad([encoded[i].attention_mask for i in batch], 0),
                "input_type_ids": _pad([encoded[i].type_ids for i in batch], 0),
            }
            parts.append(session.run([meta["output"]], feed)[0])
            slots += ids.size
        stats["token_slots_per_text"] = slots / len(texts)
        return _in_order(parts, order)

    return Runner(predict, stats)


# --- peers: the same fine-tuned weights as a transformers model ---------------------------------


def _peer_batches(tokenizer, texts: list[str], stats: dict):
    """The fast tokenizer over all texts, then batches of 64 of similar length, each padded to its
    longest (what `bench.peer_predict` does); yields (order, padded batches)."""
    start = time.perf_counter()
    encoded = tokenizer(texts, max_length=SEQ, truncation=True)
    stats["tokenize_seconds"] = time.perf_counter() - start
    rows = [{name: encoded[name][i] for name in encoded} for i in range(len(texts))]
    order = np.argsort([len(row["input_ids"]) for row in rows], kind="stable")
    return order, rows


def torch_peer(work: Path) -> Runner:
    """transformers `BertForSequenceClassification` in torch (`bench.peer_predict`'s recipe)."""
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    torch.set_num_threads(THREADS)
    tokenizer = AutoTokenizer.from_pretrained(str(work / "hf"))
    model = BertForSequenceClassification.from_pretrained(str(work / "hf")).eval()
    stats: dict = {}

    def predict(texts: list[str]) -> np.ndarray:
        order, rows = _peer_batches(tokenizer, texts, stats)
        parts, slots = [], 0
        with torch.inference_mode():
            for batch in _batches(order):
                padded = tokenizer.pad([rows[i] for i in batch], padding=True, return_tensors="pt")
                parts.append(torch.softmax(model(**padded).logits, dim=-1).numpy())
                slots += padded["input_ids"].numel()
        stats["token_slots_per_text"] = slots / len(texts)
        return _in_order(parts, order)

    return Runner(predict, stats)


def _ort_peer(work: Path, precision: str) -> Runner:
    """The transformers model exported to ONNX (`bench.peer_onnx`), in ONNX Runtime, tokenized by
    the fast tokenizer: what a team serving on CPUs runs."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(work / "hf"))
    session = _ort_session(work / "peer-onnx" / f"model-{precision}.onnx")
    stats: dict = {}

    def predict(texts: list[str]) -> np.ndarray:
        order, rows = _peer_batches(tokenizer, texts, stats)
        parts, slots = [], 0
        for batch in _batches(order):
            padded = tokenizer.pad([rows[i] for i in batch], padding=True, return_tensors="np")
            feed = {name: padded[name].astype(np.int64) for name in padded}
            logits = session.run(["logits"], feed)[0]
            exp = np.exp(logits - logits.max(axis=1, keepdims=True))
            parts.append(exp / exp.sum(axis=1, keepdims=True))
            slots += padded["input_ids"].size
        stats["token_slots_per_text"] = slots / len(texts)
        return _in_order(parts, order)

    return Runner(predict, stats)


PATHS: dict[str, Callable[[Path], Runner]] = {
    "bertfit-predictor": bertfit_predictor,
    "bertfit-savedmodel": bertfit_savedmodel,
    "bertfit-litert-fp32": lambda work: _litert(work, "fp32"),
    "bertfit-litert-int8": lambda work: _litert(work, "int8"),
    "bertfit-onnx-fp32": lambda work: _onnx(work, "fp32"),
    "bertfit-onnx-int8": lambda work: _onnx(work, "int8"),
    "torch-peer": torch_peer,
    "ort-peer-fp32": lambda work: _ort_peer(work, "fp32"),
    "ort-peer-int8": lambda work: _ort_peer(work, "int8"),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path", choices=sorted(PATHS))
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--launched", type=float, required=True, help="time.time() at launch")
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args()
    texts = json.loads((args.work / "texts.json").read_text())
    start = time.perf_counter()
    path = PATHS[args.path](args.work)
    timings = {"load_seconds": time.perf_counter() - start, "pass_seconds": []}
    for _ in range(args.passes):
        start = time.perf_counter()
        probabilities = path.predict(texts)
        timings["pass_seconds"].append(time.perf_counter() - start)
        timings.setdefault("launch_to_first_result_seconds", time.time() - args.launched)
    timings.update(path.stats)
    timings.update(path.profile(texts))
    for folder in ("probabilities", "timings"):
        (args.work / folder).mkdir(exist_ok=True)
    np.save(args.work / "probabilities" / f"{args.path}.npy", np.asarray(probabilities, np.float32))
    (args.work / "timings" / f"{args.path}.json").write_text(json.dumps(timings))


if __name__ == "__main__":
    main()
