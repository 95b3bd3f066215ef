"""`bertfit export --format onnx`: an ONNX model that takes token ids, and the tokenizer beside it
as a Hugging Face `tokenizer.json`.

`model.onnx` (converted with tf2onnx, opset 17) takes the three int64 inputs `input_word_ids`,
`input_mask` and `input_type_ids` ([batch, seq], any seq up to the encoder's position table) and
gives `probabilities` (float32 [batch, labels]; `value` [batch] for regression). `tokenizer.json`
(for the `tokenizers` package, or any runtime that reads it: transformers.js, the Rust crate)
tokenizes as bertfit does, id for id, whatever the run's tokenizer (WordPiece, SentencePiece,
byte-level BPE, BPE with byte fallback: it is the host tokenizer of `bertfit.text.host`, which
tests/text/test_host_tokenizer.py holds to the in-graph one for every family), packs with the
checkpoint's template (`[CLS] a [SEP] b [SEP]`, `<s> a </s></s> b </s>`, ...), truncates to the
run's `max_seq_length` (pairs longest first, as bertfit) and pads a batch to its longest text.
The model itself reads ids, so every encoder family converts (tests/export runs MPNet,
NomicBERT, DeBERTa-v3, EuroBERT and mmBERT exports in ONNX Runtime). A student with a pruned
vocabulary (`bertfit distill --prune-vocab`) takes the ids of its teacher's whole vocabulary,
which its tokenizer.json (the teacher's) gives, and renumbers them as its first op (a gather:
an id not kept becomes [UNK]'s). `--quantize int8` quantizes the weights with ONNX Runtime's
`quantize_dynamic` (int8 weights per output channel, activations quantized on the fly). The
folder `OUT/<version>/` holds the two files and `bertfit.json` (labels, task, max_seq_length).

Why the tokenizer is not inside the ONNX graph: onnxruntime-extensions' `BertTokenizer` op
tokenizes one text (or one pair) per call, not a batch, so a batched graph would need a loop
around it; the ids-in model with a tokenizer file is what ONNX Runtime users run today (as
optimum exports it).

    import numpy as np, onnxruntime, tokenizers
    tokenizer = tokenizers.Tokenizer.from_file("OUT/1/tokenizer.json")
    session = onnxruntime.InferenceSession("OUT/1/model.onnx")
    encoded = tokenizer.encode_batch(["a gripping film", "dull"])
    feed = {"input_word_ids": np.array([e.ids for e in encoded]),
            "input_mask": np.array([e.attention_mask for e in encoded]),
            "input_type_ids": np.array([e.type_ids for e in encoded])}
    probabilities, = session.run(["probabilities"], feed)
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import tensorflow as tf

from bertfit.errors import MissingDependencyError
from bertfit.export import portable
from bertfit.inference.graph import ClassifierModule
from bertfit.model.inputs import INPUT_NAMES, WORD_IDS
from bertfit.text.base import InGraphTokenizer

MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
OPSET = 17
CATCH_ERRORS = "TF2ONNX_CATCH_ERRORS"  # tf2onnx.constants.ENV_TF2ONNX_CATCH_ERRORS


def export_onnx(
    classifier,
    root: str | Path,
    version: int | None = None,
    quantize: str | None = None,
    **metadata_extra,
) -> Path:
    """Writes `classifier` (from a run directory) as `root/<version>/model.onnx`,
    `tokenizer.json` and `bertfit.json` (with `metadata_extra` in it, and the run's column
    names, which `--engine onnx` reads files by); returns that folder.

    Examples:
    >>> clf = bertfit.load_classifier("runs/sst")  # doctest: +SKIP
    >>> export_onnx(clf, "exported/sst-onnx")  # doctest: +SKIP
    PosixPath('exported/sst-onnx/1')
    """
    module = portable.check_portable(classifier, "onnx")
    portable.check_quantize(quantize)
    tokenizer_json = tokenizer_file(
        portable.whole_tokenizer(module.tokenizer), module.max_seq_length
    )
    model = onnx_model(module)
    data = portable.metadata(
        module,
        "onnx",
        quantize,
        inputs={name: "int64 [batch, seq]" for name in INPUT_NAMES},
        tokenizer=TOKENIZER_FILE,
        columns=getattr(classifier, "metadata", {}).get("columns"),
        **metadata_extra,
    )

    def write(folder: Path) -> None:
        import onnx

        onnx.save(model, str(folder / MODEL_FILE))
        if quantize == "int8":
            _quantize_int8(folder / MODEL_FILE)
        (folder / TOKENIZER_FILE).write_text(tokenizer_json.to_str(pretty=True), "utf-8")
        portable.write_metadata(folder, data)

    return portable.write_export(root, version, write)


def onnx_model(module: ClassifierModule):
    """The `onnx.ModelProto` of `module`'s model: ids in, the numeric output out."""
    tf2onnx = _require("tf2onnx")
    specs = [tf.TensorSpec([None, None], tf.int64, name=name) for name in INPUT_NAMES]

    def classify(input_word_ids, input_mask, input_type_ids):
        inputs = dict(zip(INPUT_NAMES, (input_word_ids, input_mask, input_type_ids), strict=True))
        inputs = {name: tf.cast(value, tf.int32) for name, value in inputs.items()}
        inputs[WORD_IDS] = portable.renumbered(module.tokenizer, inputs[WORD_IDS])
        return portable.numeric_outputs(module, module.model(inputs, training=False))

    function = tf.function(classify, input_signature=specs, autograph=False)
    with portable.converter_notes_quiet(), _optimizer_errors_raised():
        model, _ = tf2onnx.convert.from_function(function, input_signature=specs, opset=OPSET)
    return model


@contextlib.contextmanager
def _optimizer_errors_raised():
    """tf2onnx's graph optimizers with their errors raised, not caught: to catch them it
    deep-copies the whole graph, weights included, before each of its ~12 optimizers in every
    round, and the copies (reference cycles) pile up until a garbage collection. For MiniLM-L6
    (22M parameters) that took the conversion's peak to 4.9 GB; without it, 3.7 GB. An
    optimizer that fails now fails the export, instead of being skipped with a logged warning
    (none fails on bertfit's models: tests/export)."""
    previous = os.environ.get(CATCH_ERRORS)
    os.environ[CATCH_ERRORS] = "FALSE"
    try:
        yield
    finally:
        if previous is None:
            del os.environ[CATCH_ERRORS]
        else:
            os.environ[CATCH_ERRORS] = previous


def tokenizer_file(tokenizer: InGraphTokenizer, max_seq_length: int):
    """A `tokenizers.Tokenizer` that tokenizes, truncates and packs as the in-graph `tokenizer`
    does, whatever its kind, padding a batch to its longest text: the host tokenizer of the
    same files (`bertfit.text.host`, which `tokenizer.save` writes as a run directory holds
    them), with the checkpoint's template (`HostTokenizer.packing_tokenizer`)."""
    _require("tokenizers")
    from bertfit.text.host import load_host_tokenizer

    with tempfile.TemporaryDirectory() as folder:
        tokenizer.save(folder)
        return load_host_tokenizer(folder).packing_tokenizer(max_seq_length)


def _quantize_int8(path: Path) -> None:
    quantization = _require("onnxruntime.quantization", "onnxruntime")
    quantized = path.with_name("int8-" + path.name)
    # Per channel: on MiniLM-L6/Rotten Tomatoes, 98.4% of labels agree with fp32 (95.6% with one
    # scale per tensor), the largest probability drift 0.08 (0.15).
    int8 = quantization.QuantType.QInt8
    quantization.quantize_dynamic(str(path), str(quantized), weight_type=int8, per_channel=True)
    quantized.replace(path)


def _require(name: str, package: str | None = None):
    import importlib

    try:
        return importlib.import_module(name)
    except ModuleNotFoundError:
        raise MissingDependencyError(
            f"--format onnx needs {package or name}: pip install 'bertfit[export]'."
        ) from None
