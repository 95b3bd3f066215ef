"""`bertfit export --format onnx`: an ONNX model that takes token ids, and the tokenizer beside it
as a Hugging Face `tokenizer.json`.

`model.onnx` (converted with tf2onnx, opset 17) takes the three int64 inputs `input_word_ids`,
`input_mask` and `input_type_ids` ([batch, seq], any seq up to the encoder's position table) and
gives `probabilities` (float32 [batch, labels]; `value` [batch] for regression). `tokenizer.json`
(for the `tokenizers` package, or any runtime that reads it: transformers.js, the Rust crate)
tokenizes as bertfit does, id for id, truncates to the run's `max_seq_length` (pairs longest
first, as bertfit) and pads a batch to its longest text. `--quantize int8` quantizes the weights
with ONNX Runtime's `quantize_dynamic` (int8 weights per output channel, activations quantized
on the fly). The
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
from pathlib import Path

import tensorflow as tf

from bertfit.errors import MissingDependencyError
from bertfit.export import portable
from bertfit.inference.graph import ClassifierModule
from bertfit.model.inputs import INPUT_NAMES
from bertfit.text.tokenizer import BertTokenizer

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
    tokenizer_json = tokenizer_file(module.tokenizer, module.max_seq_length)
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


def tokenizer_file(tokenizer: BertTokenizer, max_seq_length: int):
    """A `tokenizers.Tokenizer` that tokenizes, truncates and packs as `tokenizer` does (BERT's
    normalizer, pre-tokenizer, WordPiece and its template: BERT's `[CLS] a [SEP] b [SEP]`,
    MPNet's `<s> a </s></s> b </s>`), padding a batch to its longest text."""
    _require("tokenizers")
    from tokenizers import processors

    from bertfit.text.host import wordpiece_tokenizer

    config = tokenizer.config
    vocab = tokenizer._vocab.ids
    result = wordpiece_tokenizer(tokenizer._vocab.tokens, config)
    cls, sep, second = config.cls_token, config.sep_token, config.second_type_id
    separators = " ".join([f"{sep}:0"] * config.pair_separators)
    result.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0",
        pair=f"{cls}:0 $A:0 {separators} $B:{second} {sep}:{second}",
        special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])],
    )
    result.enable_truncation(max_length=max_seq_length, strategy="longest_first")
    result.enable_padding(pad_id=vocab[config.pad_token], pad_token=config.pad_token)
    return result


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
