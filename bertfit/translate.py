"""Known TensorFlow / XLA / Keras errors, explained: what went wrong in plain words, and the fix.

    with explain_errors():
        for losses in trainer.run_plan(batches): ...

re-raises a recognised error as a `TranslatedError` (a `BertfitError`, so the CLI prints it
without a traceback) whose `__cause__` is the original; anything unrecognised passes through
untouched.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Callable, Iterator

from bertfit.errors import BertfitError


class TranslatedError(BertfitError):
    """A TensorFlow/XLA/Keras error explained; `code` is stable, `original` the raw error."""

    def __init__(self, code: str, message: str, fix: str, original: BaseException):
        self.code, self.explanation, self.fix, self.original = code, message, fix, original
        first = _first_line(original)
        super().__init__(
            f"{message} Fix: {fix} (TensorFlow said: {type(original).__name__}: {first})"
        )


@dataclasses.dataclass(frozen=True)
class Rule:
    code: str
    pattern: re.Pattern
    explain: Callable[[re.Match], tuple[str, str]]  # match → (message, fix)


def _rule(code: str, pattern: str, explain) -> Rule:
    return Rule(code, re.compile(pattern, re.S), explain)


STATIC_FIX = (
    "give every tensor that reaches the compiled step a shape fixed before training: "
    "pad to fixed lengths in the input pipeline (bertfit's length buckets do), batch "
    "with drop_remainder=True or pad the last batch, and keep data-dependent sizes "
    "(boolean_mask, unique, ragged) out of the model."
)

RULES = [
    _rule(
        "xla-dynamic-concat",
        r"Dynamic concatenation is not supported|Cannot concatenate "
        r"arrays that differ in dimensions.*?<=",
        lambda m: (
            "XLA cannot compile a concatenation whose size depends on the data "
            "(a dynamic dimension, e.g. from boolean_mask, where or per-batch padding).",
            STATIC_FIX,
        ),
    ),
    _rule(
        "xla-not-constant",
        r"must be a compile-time constant",
        lambda m: (
            "XLA needs a shape (or size, axis, depth) that is known when compiling, "
            "but here it is computed from the data.",
            STATIC_FIX,
        ),
    ),
    _rule(
        "xla-string-input",
        r"on XLA_\w+_JIT: _Arg .*?T=DT_STRING",
        lambda m: (
            "raw strings reached the XLA-compiled step; XLA only handles numbers.",
            "tokenize outside the compiled function (in the tf.data pipeline, e.g. "
            "with bertfit's tokenizer) and pass int32 ids, mask and type ids.",
        ),
    ),
    _rule(
        "xla-unsupported-op",
        r"Detected unsupported operations when trying to compile graph "
        r".*? on (XLA_\w+_JIT): (\w+)",
        lambda m: (
            f"the compiled step contains the op {m.group(2)}, which XLA "
            f"({m.group(1)}) cannot compile" + _op_hint(m.group(2)) + ".",
            "move it out of the jit-compiled step (into the tf.data input pipeline), "
            "or replace it with dense, fixed-shape operations.",
        ),
    ),
    _rule(
        "strategy-replica-under-one-xla",
        r"Trying to access resource (\S*replica_\d+\S*).*?located in device "
        r"(\S+) from device (\S+)",
        lambda m: (
            f"one XLA computation on {_device(m.group(3))} reached {m.group(1)}, another "
            f"replica's copy of a variable (on {_device(m.group(2))}): Keras' "
            "compile(jit_compile=True) compiles the whole multi-replica train step as one "
            "XLA cluster, which MirroredStrategy (and TF 2.21's Keras) cannot place.",
            "make the model a bertfit.ReplicaJitModel (bertfit.BertClassifier works the same "
            "way): it XLA-compiles each replica's forward and backward pass and keeps "
            "strategy.run and the update outside XLA; or compile(..., jit_compile=False).",
        ),
    ),
    _rule(
        "strategy-resource-device",
        r"Trying to access resource (\S+).*?located in device "
        r"(\S+) from device (\S+)",
        lambda m: (
            f"the variable {m.group(1)} lives on {_device(m.group(2))} but the step runs "
            f"on {_device(m.group(3))}: it was created outside strategy.scope() (or "
            "under another strategy / device scope).",
            "create the model, the optimizer and the metrics inside "
            "`with strategy.scope():` (bertfit's Trainer does), and never mix "
            "variables from two strategies.",
        ),
    ),
    _rule(
        "xla-uninitialized-variable",
        r"RET_CHECK failure.*?is_initialized|variable\.var\(\)->is_initialized",
        lambda m: (
            "XLA compiled a step that reads a variable (or lookup table) that was not "
            "initialised yet: usually preprocessing inside the jit-compiled model (a "
            "tokenizer or TF Hub preprocessor taking strings, whose vocabulary table is "
            "created lazily), which XLA cannot hold anyway.",
            "tokenize in the tf.data pipeline (dataset.map(preprocessor) after "
            "batch(..., drop_remainder=True)) and give the compiled model the int32 ids; "
            "or build and call the model once eagerly before compile(jit_compile=True).",
        ),
    ),
    _rule(
        "strategy-mixed",
        r"Mixing different tf\.distribute\.Strategy objects|"
        r"`colocate_vars_with` must only be passed a variable created in this",
        lambda m: (
            "a variable or the optimizer's slots were created outside the "
            "strategy's scope, then used inside strategy.run: the optimizer was built "
            "outside `strategy.scope()` (it creates its slot variables lazily on the "
            "first apply), or the model was.",
            "build the model and the optimizer inside `with strategy.scope():`, and "
            "call optimizer.build(model.trainable_variables) there, before the first "
            "step.",
        ),
    ),
    _rule(
        "graph-placeholder",
        r"You must feed a value for placeholder tensor '([^']+)'",
        lambda m: (
            f"a TF1-style graph ran without a value for its placeholder "
            f"{m.group(1)!r}: code built for tf.compat.v1 sessions (or a Keras 2 "
            "optimizer built outside the scope that traced it) was run as if eager.",
            "use TF2 code end to end: load the model with bertfit.load_encoder, build "
            "the optimizer inside strategy.scope(), and do not mix tf.compat.v1 "
            "graphs or sessions with tf.function.",
        ),
    ),
    _rule(
        "signature-mismatch",
        r"Could not find matching concrete function|Binding inputs to "
        r"tf\.function failed due to `Can not cast (.*?) to (.*?)`",
        lambda m: (
            "a saved function was called with inputs that match none of its "
            "signatures"
            + (f": got {m.group(1)}, it takes {m.group(2)}" if m.group(1) else "")
            + ".",
            "pass exactly the dtypes, shapes and names the SavedModel was exported "
            "with (`bertfit inspect PATH` lists its signatures): usually int32 ids of "
            "shape [batch, seq] named input_word_ids, input_mask, input_type_ids.",
        ),
    ),
    _rule(
        "keras-mixed-versions",
        r"Only instances of `?keras\.Layer`? can be added",
        lambda m: (
            "a Keras 2 (tf_keras, e.g. tensorflow_hub.KerasLayer) layer was given to "
            "a Keras 3 model; the two Keras versions' objects do not mix.",
            "load the encoder with bertfit.load_encoder(path), which gives a Keras 3 "
            "layer for every format, TF Hub SavedModels included; or build the whole "
            "model with tf_keras.",
        ),
    ),
    _rule(
        "input-longer-than-positions",
        r"Incompatible shapes: \[(?:\d+),(\d+),\d+\] vs\. "
        r"\[(?:\d+),(\d+),\d+\].*?embeddings",
        lambda m: (
            f"the inputs are {max(map(int, m.groups()))} tokens long but the "
            f"encoder's position table has {min(map(int, m.groups()))} rows "
            "(max_position_embeddings).",
            "pack the inputs to at most max_position_embeddings tokens: lower "
            "--max-seq-length (or the tokenizer's max_seq_length).",
        ),
    ),
    _rule(
        "xla-shape-inference",
        r"tf2xla conversion failed|XLA compilation.*?(shape|Shape)",
        lambda m: (
            "XLA could not infer or match a shape while compiling the step (often a "
            "dimension that differs between batches, or a reshape that changes the "
            "batch size).",
            STATIC_FIX,
        ),
    ),
    _rule(
        "out-of-memory",
        r"OOM when allocating|ResourceExhaustedError|RESOURCE_EXHAUSTED",
        lambda m: (
            "the device ran out of memory.",
            "lower --batch-size (use --grad-accum to keep the effective batch), lower "
            "--max-seq-length or the buckets, or use --precision mixed_bf16.",
        ),
    ),
]


def _op_hint(op: str) -> str:
    if "Ragged" in op:
        return " (ragged tensors have data-dependent shapes: pad them in the input pipeline)"
    if "PyFunc" in op:
        return " (a tf.py_function / numpy call runs Python, which cannot be compiled)"
    if "String" in op or "Regex" in op or "Wordpiece" in op:
        return " (string processing belongs in the input pipeline)"
    return ""


def _device(name: str) -> str:
    return name.split("/device:")[-1] if "/device:" in name else name


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    for line in text.splitlines():
        if line.strip() and not line.startswith(("in user code", "Graph execution error")):
            return line.strip()[:300]
    return text[:300]


# Keras' note around an error raised in a layer's call: the layer before, its arguments after.
_KERAS_CALL_NOTE = re.compile(
    r"^Exception encountered when calling [^\n]*\n|\nArguments received by .*", re.S
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def error_summary(error: BaseException) -> str:
    """`Type: message` of an error in one line: for a `BertfitError` its message (it says the
    fix), else the last line of TensorFlow's (where it names the failing op). Keras' note
    around an error raised inside a layer's call ("Exception encountered when calling ...",
    "Arguments received by ...: • training=False") is removed first: it names the layer and
    its arguments, not what went wrong."""
    text = _ANSI.sub("", _KERAS_CALL_NOTE.sub("", str(error))).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if isinstance(error, BertfitError):
        line = " ".join(lines)
    else:
        line = lines[-1] if lines else ""
    return f"{type(error).__name__}: {line[:300]}"


def translate(error: BaseException) -> TranslatedError | None:
    """The explanation of a known TF/XLA/Keras error, or None when it is not a known one."""
    if isinstance(error, BertfitError):
        return None
    text = f"{type(error).__name__}: {error}"
    for rule in RULES:
        match = rule.pattern.search(text)
        if match:
            message, fix = rule.explain(match)
            return TranslatedError(rule.code, message[0].upper() + message[1:], fix, error)
    return None


@contextlib.contextmanager
def explain_errors() -> Iterator[None]:
    """Re-raises known TF/XLA/Keras errors as `TranslatedError` (original as `__cause__`)."""
    try:
        yield
    except Exception as error:  # only known errors are translated
        translated = translate(error)
        if translated is None:
            raise
        raise translated from error
