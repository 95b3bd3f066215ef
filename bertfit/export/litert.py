"""`bertfit export --format litert`: a LiteRT (TFLite) model with the tokenizer inside.

Raw strings in, probabilities out: the signature `serving_default` takes `text` (string
[batch]) and gives `probabilities` (float32 [batch, labels]; `value` [batch] for regression).
Inside, TensorFlow Text's `FastBertTokenizer` (whose ops, `FastBertNormalize`,
`FastWordpieceTokenizeWithOffsets` and `RaggedTensorToTensor`, have LiteRT kernels) tokenizes,
every text is packed (`[CLS] ids [SEP]`, truncated to the run's `max_seq_length`) and the batch
padded to the smallest of the run's length buckets that holds its longest text, as the
SavedModel pads, and the model and the softmax/sigmoid run as LiteRT builtins (the shapes are
dynamic: the interpreter sizes its tensors at each call). `--quantize int8` quantizes the
weights to int8 (dynamic range). A student with a pruned vocabulary (`bertfit distill
--prune-vocab`) tokenizes and packs with its teacher's whole vocabulary, then renumbers the ids
(a gather: an id not kept becomes [UNK]'s). The folder `OUT/<version>/` holds `model.tflite` and
`bertfit.json` (labels, task, max_seq_length).

The tokenizer ops are custom ops: the interpreter must have TensorFlow Text's kernels. In Python,
with `ai-edge-litert` and `tensorflow-text` installed, and without importing TensorFlow::

    import ctypes, importlib.util, os
    import numpy as np
    from ai_edge_litert.interpreter import InterpreterWithCustomOps

    def package_dir(name):
        return importlib.util.find_spec(name).submodule_search_locations[0]

    for library in (os.path.join(package_dir("tensorflow"), "libtensorflow_framework.so.2"),
                    os.path.join(package_dir("tensorflow_text"), "core", "pybinds",
                                 "libpybinds_library_common.so")):
        ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)   # C libraries only, no Python modules
    interpreter = InterpreterWithCustomOps(
        model_path="OUT/1/model.tflite", custom_op_registerers=LITERT_TEXT_OPS)
    classify = interpreter.get_signature_runner()
    classify(text=np.array(["a gripping film"]))["probabilities"]

(or, where TensorFlow may be imported, `custom_op_registerers=
tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS`). On Android and iOS, build LiteRT with
TensorFlow Text's TFLite ops (`tensorflow_text/core/kernels/*_tflite`) and register the same
three ops.

Only WordPiece runs of single texts that truncate export; a SentencePiece or BPE run, a
text-pair model or a `--long-documents chunk` run is refused with what to do instead.
bertfit's in-graph tokenizer follows Hugging Face's; `FastBertTokenizer` differs from it on a
few inputs: a special token written in the text (`[SEP]`) is split into punctuation and a word
here but kept whole by bertfit; a NUL character; Unicode compatibility characters, which
`FastBertNormalizer` decomposes when it lowercases (NFKD: the ellipsis `…` becomes `...`, the
ligature `ﬁ` `fi`, fullwidth `Ａ` `a`, where Hugging Face keeps `…` or gives `[UNK]`). LiteRT has
no other string normalizer to replace it with.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

from bertfit.errors import ConfigError
from bertfit.export import portable
from bertfit.inference.graph import ClassifierModule, smallest_bucket
from bertfit.model.inputs import MASK, TYPE_IDS, WORD_IDS
from bertfit.text.tokenizer import BertTokenizer

MODEL_FILE = "model.tflite"
# The custom ops of the model, as the C functions that register them (TensorFlow Text's).
LITERT_TEXT_OPS = ["AddFastBertNormalize", "AddFastWordpieceTokenize", "AddRaggedTensorToTensor"]


def export_litert(
    classifier, root: str | Path, version: int | None = None, quantize: str | None = None
) -> Path:
    """Writes `classifier` (from a run directory) as `root/<version>/model.tflite` and
    `bertfit.json`; returns that folder.

    Examples:
    >>> clf = bertfit.load_classifier("runs/sst")  # doctest: +SKIP
    >>> export_litert(clf, "exported/sst-lite", quantize="int8")  # doctest: +SKIP
    PosixPath('exported/sst-lite/1')
    """
    module = portable.check_portable(classifier, "litert")
    portable.check_quantize(quantize)
    tokenizer = portable.whole_tokenizer(module.tokenizer)
    if not isinstance(tokenizer, BertTokenizer):
        raise ConfigError(
            "--format litert needs a WordPiece (BERT-style) tokenizer: LiteRT's only tokenizer "
            "kernels are TensorFlow Text's FastBertTokenizer's (WordPiece), and this run's "
            f"tokenizer is {tokenizer.kind or type(tokenizer).__name__}. Export it with --format "
            "onnx (model.onnx with its tokenizer.json) or --format saved-model (the tokenizer "
            "inside, for TF Serving or `bertfit serve`)."
        )
    if module.pairs:
        raise ConfigError(
            "--format litert exports single-text models; this one classifies text pairs. Use "
            "--format onnx (its tokenizer.json packs pairs) or --format saved-model."
        )
    content = litert_model(module, quantize)
    data = portable.metadata(
        module,
        "litert",
        quantize,
        inputs={"text": "string [batch]"},
        custom_ops=LITERT_TEXT_OPS,
    )

    def write(folder: Path) -> None:
        (folder / MODEL_FILE).write_bytes(content)
        portable.write_metadata(folder, data)

    return portable.write_export(root, version, write)


def litert_model(module: ClassifierModule, quantize: str | None = None) -> bytes:
    """The LiteRT flatbuffer of `module`: strings in, the numeric output out."""
    graph = _LiteGraph(module)
    with portable.convertible_activations(module.model):
        traced = graph.classify.get_concrete_function()
    with portable.converter_notes_quiet():
        return _converted(traced, quantize)


def _converted(traced, quantize: str | None) -> bytes:
    frozen = _Frozen(convert_variables_to_constants_v2(traced), traced.structured_outputs)
    # The converter leaves a traced Keras model's weights as variables without values; a
    # function with the weights as constants, saved and read back, converts whole.
    with tempfile.TemporaryDirectory() as saved:
        tf.saved_model.save(
            frozen,
            saved,
            signatures={"serving_default": frozen.classify.get_concrete_function()},
            options=tf.saved_model.SaveOptions(experimental_custom_gradients=False),
        )
        converter = tf.lite.TFLiteConverter.from_saved_model(saved)
        converter.allow_custom_ops = True  # TensorFlow Text's tokenizer ops
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        if quantize == "int8":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]  # int8 weights, dynamic range
        return converter.convert()


def fast_bert_tokenizer(tokenizer: BertTokenizer) -> tf_text.FastBertTokenizer:
    """TensorFlow Text's `FastBertTokenizer` with `tokenizer`'s vocabulary and settings (ids
    without special tokens, as `tokenizer.tokenize`), or a `ConfigError` for settings it lacks."""
    config = tokenizer.config
    lower = config.lower_case
    if config.strip_accents not in (None, lower):
        raise ConfigError(
            "--format litert: TensorFlow Text's FastBertTokenizer lowercases and strips "
            f"accents together, but this run's tokenizer has lower_case={lower} and "
            f"strip_accents={config.strip_accents}; export with --format onnx or saved-model."
        )
    return tf_text.FastBertTokenizer(
        vocab=list(tokenizer._vocab.tokens),
        suffix_indicator="##",
        max_bytes_per_word=config.max_chars_per_word,
        token_out_type=tf.int32,
        unknown_token=config.unk_token,
        lower_case_nfd_strip_accents=lower,
    )


def _text_spec() -> list[tf.TensorSpec]:
    return [tf.TensorSpec([None], tf.string, name="text")]


class _LiteGraph(tf.Module):
    """Strings → FastBertTokenizer → packed to the batch's length bucket → renumbered to a
    pruned vocabulary's ids, if the model has one → model → numeric output."""

    def __init__(self, module: ClassifierModule):
        super().__init__(name="bertfit_litert")
        self.module = module
        self.tokenizer = portable.whole_tokenizer(module.tokenizer)
        self.fast = fast_bert_tokenizer(self.tokenizer)
        self.classify = tf.function(self._classify, input_signature=_text_spec(), autograph=False)

    def _classify(self, text):
        module, tokenizer = self.module, self.tokenizer
        ids = self.fast.tokenize(text)
        kept = tf.minimum(tf.cast(ids.row_lengths(), tf.int32), module.max_seq_length - 2)
        # Padded to the smallest length bucket holding the batch's longest text, as the
        # SavedModel does: a short text costs a short row, not max_seq_length.
        width = smallest_bucket(module.buckets, tf.reduce_max(kept) + 2)
        rows = tf.cast(ids.nrows(), tf.int32)
        body = ids.to_tensor(default_value=tokenizer.pad_id, shape=tf.stack([rows, width - 2]))
        word_ids = tf.concat(
            [tf.fill([rows, 1], tokenizer.cls_id), body, tf.fill([rows, 1], tokenizer.pad_id)],
            axis=1,
        )
        position = tf.range(width)[tf.newaxis, :]
        word_ids = tf.where(position == (kept + 1)[:, tf.newaxis], tokenizer.sep_id, word_ids)
        mask = tf.cast(position < (kept + 2)[:, tf.newaxis], tf.int32)
        inputs = {
            WORD_IDS: portable.renumbered(module.tokenizer, word_ids),
            MASK: mask,
            TYPE_IDS: tf.zeros_like(word_ids),
        }
        return portable.numeric_outputs(module, module.model(inputs, training=False))


class _Frozen(tf.Module):
    """A frozen (weights as constants) text function, with its outputs named again."""

    def __init__(self, function, structure):
        super().__init__(name="bertfit_litert_frozen")
        self.function = function
        self.structure = structure
        self.classify = tf.function(self._classify, input_signature=_text_spec(), autograph=False)

    def _classify(self, text):
        return tf.nest.pack_sequence_as(self.structure, self.function(text))
