"""Model checks: gradient flow on one batch, XLA compilation per shape, memory per replica
(the plan itself: `checks/memory.py`)."""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from bertfit.checkpoints.pooling import DeclaredPooling
from bertfit.checkpoints.savedmodel import SavedModelEncoder, inspect_savedmodel
from bertfit.checks.batches import canonical, shape_text, split_element
from bertfit.checks.findings import ERROR, INFO, WARNING, Report
from bertfit.checks.memory import OPTIMIZER_SLOTS, Architecture, adapters_of, plan
from bertfit.data.tasks import SINGLE_LABEL
from bertfit.errors import CheckpointError
from bertfit.model.inputs import STARTS, WORD_IDS
from bertfit.model.losses import per_example_loss
from bertfit.tf_build import Installed, install_commands
from bertfit.training.strategy import host_xla
from bertfit.translate import error_summary, translate

SIGNATURE_ONLY_WHY = (
    "a signature-only SavedModel exposes zero trainable variables, so fine-tuning it "
    "trains nothing. tensorflow-hub does not train it either: hub.KerasLayer(path, "
    "trainable=True) raises a ValueError (a signature, a TF1 model, or no __call__), or, for "
    "a callable SavedModel listing no trainable variables, logs 'trainable but has zero "
    "trainable weights' and trains only the head"
)
SIGNATURE_ONLY_FIX = (
    "get the reusable SavedModel (trainable_variables and __call__) or the "
    "original checkpoint; or use it frozen for features with "
    "bertfit.load_encoder(path, trainable=False)"
)
TF1_SIGNATURE_ONLY_FIX = (
    "get the reusable TF2 SavedModel or the original checkpoint (bertfit loads either); or "
    "use it frozen for features with bertfit.load_encoder(path, trainable=False) when its "
    "serving_default signature takes input_word_ids, input_mask and input_type_ids (else "
    "hub.KerasLayer(path, signature=NAME, signature_outputs_as_dict=True) in a tf_keras model)"
)


def signature_only_fix(tf1: bool) -> str:
    """The fix for a signature-only SavedModel: a TF1 one loads frozen only through a
    signature that takes the encoder's inputs."""
    return TF1_SIGNATURE_ONLY_FIX if tf1 else SIGNATURE_ONLY_FIX


def model_inputs(features):
    """What the model is called on: named inputs under bertfit's names, or the features as
    they are when they are one unnamed tensor (a model taking one input, e.g. strings)."""
    if isinstance(features, dict) or hasattr(features, "keys"):
        return canonical(features)
    return features


def loss_and_logits(model, element, training: bool = True, kind: str = SINGLE_LABEL):
    """The weighted mean loss of one batch and its logits, with the loss of the task `kind`
    (`model.losses`: the one `bertfit train` minimises); a batch without labels is scored
    against class 0."""
    features, labels, weights = split_element(element)
    features = model_inputs(features)
    logits = model(features, training=training)
    batch = tf.shape(logits)[0]
    if labels is None:
        kind, labels = SINGLE_LABEL, tf.zeros([batch], tf.int32)
    labels = tf.cast(labels, tf.int32 if kind == SINGLE_LABEL else tf.float32)
    weights = tf.ones([batch], tf.float32) if weights is None else tf.cast(weights, tf.float32)
    if weights.shape.rank == 2:  # a packed batch's: one per example slot, as the logits
        labels = tf.reshape(labels, [-1, *labels.shape[2:]])
        weights = tf.reshape(weights, [-1])
    losses = per_example_loss(kind, labels, logits)
    return tf.reduce_sum(losses * weights) / tf.maximum(tf.reduce_sum(weights), 1.0), logits


def replica_step(model, variables):
    """Forward, loss and gradients: what the compiled replica step does for a user's model."""

    def step(element):
        with tf.GradientTape() as tape:
            loss, _ = loss_and_logits(model, element)
        return [g for g in tape.gradient(loss, variables) if g is not None], loss

    return step


def _path(variable) -> str:
    return getattr(variable, "path", None) or variable.name


def check_gradients(
    report: Report,
    model,
    element,
    *,
    encoder=None,
    excluded=(),
    where: str = "model",
    kind: str = SINGLE_LABEL,
    declared_pooling: DeclaredPooling | None = None,
) -> None:
    """One step on one batch with the task's loss (`kind`): variables with None or all-zero
    gradients, and why (`declared_pooling`: what the run's checkpoint declares, which says
    whether its pooler is worth pooling with)."""
    features, _, weights = split_element(element)
    batch_size = _leading(features)
    variables = list(model.trainable_variables)
    encoder = encoder if encoder is not None else getattr(model, "encoder", None)
    if encoder is not None and not encoder.trainable_weights:
        no_encoder_variables(report, encoder, where)
    for layer in _untrainable_encoder_layers(model) if encoder is None else ():
        no_encoder_variables(report, layer, where)
    if not variables:
        return
    try:
        logits = model(model_inputs(features), training=False)
    except Exception as e:  # reported as a finding
        report_failure(report, "grad-step-failed", "the model's forward pass failed", e, where)
        return
    if batch_size is not None and logits.shape[0] is not None and logits.shape[0] != batch_size:
        report.add(
            "shape-batch-changed",
            ERROR,
            f"the model returns {logits.shape[0]} rows of logits for a batch of {batch_size}",
            where=f"{where}: output {shape_text(logits.shape)}",
            why="a reshape moved examples across the batch dimension; losses no longer "
            "line up with labels, and sharding over replicas splits examples",
            fix="reshape with the batch dimension kept first, e.g. tf.reshape(x, "
            "[tf.shape(x)[0], -1]), never [-1, ...] over the batch",
        )
        return
    try:
        with tf.GradientTape() as tape:
            loss, logits = loss_and_logits(model, element, kind=kind)
        gradients = tape.gradient(loss, variables)
    except Exception as e:  # reported as a finding
        report_failure(
            report, "grad-step-failed", "one training step on one batch failed", e, where
        )
        return
    report_gradients(report, model, variables, gradients, weights, excluded, declared_pooling)


def _pooler_fix(bertfit_excludes: bool, declared: DeclaredPooling | None) -> str:
    """What to do about a pooler without gradients: nothing when bertfit leaves it out and the
    checkpoint declares another pooling (its pooler was never trained); else leave it out, or
    pool with it."""
    if bertfit_excludes and declared is not None and declared.pooling != "cls":
        return (
            f"none: the checkpoint's {declared.file} declares {declared.describe()} pooling, so "
            "its pooler was never trained and pooling with it (--pooling cls) would not help"
        )
    return "leave the pooler out of the trained variables, or pool with it (--pooling cls)"


def report_gradients(
    report: Report,
    model,
    variables,
    gradients,
    weights,
    excluded,
    declared_pooling: DeclaredPooling | None = None,
) -> None:
    """Findings about one step's gradients: None for the pooler, the head or other
    variables; all zero. The pooler's fix does not send a run back to it when the checkpoint
    declares another pooling (its pooler was never trained: `checkpoints.pooling`)."""
    head = {id(v) for v in getattr(getattr(model, "head", None), "trainable_weights", [])}
    none = [v for v, g in zip(variables, gradients, strict=True) if g is None]
    pooler = [v for v in none if "pooler" in _path(v)]
    head_none = [v for v in none if id(v) in head]
    named = {id(v) for v in pooler + head_none}
    other = [v for v in none if id(v) not in named]
    if pooler:
        bertfit_excludes = all(any(x in _path(v) for x in excluded) for v in pooler)
        report.add(
            "grad-pooler-unused",
            INFO if bertfit_excludes else WARNING,
            f"the pooler's {len(pooler)} variable(s) get no gradient: the loss does not "
            "use pooled_output",
            where=", ".join(_path(v) for v in pooler),
            why="weight decay would still shrink them, and they count as 'trained'"
            + (" (bertfit leaves them out for --pooling mean)" if bertfit_excludes else ""),
            fix=_pooler_fix(bertfit_excludes, declared_pooling),
        )
    if head_none:
        report.add(
            "grad-head-disconnected",
            ERROR,
            "the classification head gets no gradient: its output does not reach the loss",
            where=", ".join(_path(v) for v in head_none),
            why="the head stays at its random initialisation",
            fix="return the head's logits from call() and compute the loss on them",
        )
    if other:
        report.add(
            "grad-none",
            ERROR,
            f"{len(other)} trainable variable(s) get no gradient",
            where=", ".join(_path(v) for v in other[:8]),
            why="they are not connected to the loss (an unused layer or branch)",
            fix="use them in the forward pass, or mark them trainable=False",
        )
    zero = [
        v
        for v, g in zip(variables, gradients, strict=True)
        if g is not None
        and not bool(tf.reduce_any(tf.convert_to_tensor(g) != 0))
        # LoRA's A gets no gradient until B, which starts at zero, has moved: by design
        and not v.path.endswith("lora_kernel_a")
    ]
    if zero:
        all_weightless = weights is not None and not np.any(np.asarray(weights) > 0)
        cause = (
            "every example weight in the batch is 0"
            if all_weightless
            else "the inputs never reach them (e.g. an embedding row never used), a dead "
            "activation, or a zero learning signal"
        )
        report.add(
            "grad-zero",
            WARNING if not all_weightless or len(zero) < len(variables) else ERROR,
            f"{len(zero)} variable(s) get an all-zero gradient on this batch",
            where=", ".join(_path(v) for v in zero[:8]),
            why=cause,
            fix="check the example weights and that every layer is used",
        )


ENCODER_LAYER_TYPES = ("KerasLayer", "BertEncoder", "SavedModelEncoder")  # KerasLayer: TF Hub


def _untrainable_encoder_layers(model) -> list:
    """The encoder layers (TF Hub's `hub.KerasLayer` included, in Keras 3 or tf_keras models)
    inside `model` that expose no trainable variable."""
    return [
        layer
        for layer in getattr(model, "layers", [])
        if type(layer).__name__ in ENCODER_LAYER_TYPES
        and not layer.trainable_weights
        and not is_preprocessing_layer(layer)
    ]


def is_preprocessing_layer(layer) -> bool:
    """TF Hub's BERT preprocessing as a `hub.KerasLayer` (strings in, ids out): it has no
    weights to train, and is not an encoder."""
    loaded = getattr(layer, "_func", None)  # hub.KerasLayer's loaded SavedModel
    if any(hasattr(loaded, name) for name in ("bert_pack_inputs", "tokenize")):
        return True
    try:
        return any(tf.as_dtype(t.dtype) == tf.string for t in tf.nest.flatten(layer.input))
    except (AttributeError, TypeError, ValueError):  # not called in a functional model
        return False


def no_encoder_variables(report: Report, encoder, where: str) -> None:
    signature_only = (
        isinstance(encoder, SavedModelEncoder) or type(encoder).__name__ == "KerasLayer"
    ) and not encoder.weights
    if signature_only or (
        isinstance(encoder, SavedModelEncoder)
        and "signature" in str(getattr(getattr(encoder, "load_report", None), "format", ""))
    ):
        report.add(
            "grad-signature-only",
            ERROR,
            "the encoder is a signature-only SavedModel with zero trainable variables",
            where=where,
            why=SIGNATURE_ONLY_WHY,
            fix=signature_only_fix(_loads_tf1(encoder)),
        )
    else:
        report.add(
            "grad-frozen-encoder",
            ERROR,
            "the encoder is frozen (trainable=False): only the head would train",
            where=f"{where}: {encoder.name}",
            why="fine-tuning needs the encoder's gradients; a frozen encoder gives "
            "feature extraction only",
            fix="set encoder.trainable = True (load_encoder(..., trainable=True))",
        )


def _loads_tf1(layer) -> bool:
    """Whether a `hub.KerasLayer` holds a TF1 model (a Hub module or a TF1 SavedModel)."""
    if getattr(layer, "_is_hub_module_v1", False):
        return True
    handle = getattr(layer, "_handle", None)  # hub.KerasLayer's path
    if not isinstance(handle, str) or not Path(handle, "saved_model.pb").is_file():
        return False
    try:
        return inspect_savedmodel(Path(handle)).tf1
    except CheckpointError:
        return False


def _leading(features):
    """The examples of a batch: its rows, times a packed batch's example slots."""
    named = canonical(features)  # {"<features>": tensor} for one unnamed tensor
    slots = named[STARTS].shape[1] if STARTS in named else 1
    for value in named.values():
        shape = getattr(value, "shape", None)
        if shape is not None and len(shape) >= 1:
            return None if shape[0] is None else shape[0] * slots
    return None


def report_failure(
    report: Report, code: str, message: str, error: BaseException, where: str
) -> None:
    """An exception from a step the check ran, as an error finding (not a traceback): in
    bertfit's words where `translate` knows it, else its summary."""
    translated = translate(error)
    text = str(translated) if translated is not None else error_summary(error)
    report.add(
        code,
        ERROR,
        f"{message}: {text}",
        where=where,
        fix=translated.fix if translated is not None else "",
    )


def compile_stage(target: str) -> str:
    """XLA's own compiler for the local CPU/GPU; TPU programs need a TPU to be compiled, so a
    CPU rehearsal lowers the step through the same TF→XLA bridge (where shape, dtype and
    unsupported-op errors arise) and stops before the TPU backend."""
    local = "gpu" if tf.config.list_logical_devices("GPU") else "cpu"
    return "optimized_hlo" if target == local else "hlo"


def compile_shapes(
    report: Report, step, elements: list, target: str, name: str, full: bool = False
) -> None:
    """XLA-compiles `step` once per element shape; each shape and its outcome is reported.
    With a TensorFlow that cannot compile for this machine (the TPU build off a TPU), the
    report says so instead."""
    if not host_xla():
        report.add(
            "compile-unavailable",
            WARNING,
            f"the {name} was not XLA-compiled: this TensorFlow ({Installed.here().describe()}) "
            "has no XLA backend for this machine's CPU",
            where=name,
            why="the TPU build of TensorFlow compiles for TPUs only; off a TPU it cannot "
            "compile anything",
            fix=f"rehearse in a separate venv with {install_commands('cpu')}, or run "
            "`bertfit doctor` on the TPU VM, which compiles and runs the real step there",
        )
        return
    function = tf.function(step, jit_compile=True)
    stage = compile_stage(target) if full else "hlo"
    for element in elements:
        features, _, _ = split_element(element)
        ids = canonical(features).get(WORD_IDS)
        shape = shape_text(ids.shape) if ids is not None else "?"
        start = time.perf_counter()
        ok = True
        try:
            function.experimental_get_compiler_ir(element)(stage=stage)
        except Exception as e:  # reported as a finding
            ok = False
            if _holds_strings(features):
                _strings_not_compiled(report, target, f"{name} {shape}")
            else:
                report_failure(
                    report,
                    "compile-failed",
                    f"XLA could not compile the {name} for {shape}",
                    e,
                    f"{name} {shape}",
                )
        report.compiled.append(
            {
                "name": name,
                "shape": shape,
                "stage": stage,
                "ok": ok,
                "seconds": round(time.perf_counter() - start, 2),
            }
        )


def _holds_strings(features) -> bool:
    return any(getattr(v, "dtype", None) == tf.string for v in tf.nest.flatten(features))


def _strings_not_compiled(report: Report, target: str, where: str) -> None:
    """A model that tokenizes inside its step (TF Hub's preprocessing layer) cannot be XLA
    compiled: string ops have no XLA kernels. It trains without XLA on CPU and GPU."""
    report.add(
        "compile-strings-in-step",
        ERROR if target == "tpu" else WARNING,
        "the model takes strings and tokenizes inside the training step, so XLA cannot "
        "compile the step (string ops have no XLA kernels)",
        where=where,
        why="a TPU runs only compiled steps; on CPU and GPU the model trains, but without "
        "jit_compile",
        fix="tokenize in the input pipeline instead: dataset.map(lambda text, label: "
        "(preprocess(text), label)) with the TF Hub preprocessing model (or "
        "bertfit.BertPreprocessor), and give the model the three int32 inputs",
    )


# ---- memory ----


def encoder_config(model):
    """The architecture of the encoder inside `model`, for the activation estimate: a bertfit
    encoder's `config`, else one read from the encoder variables' names and shapes (a TF Hub
    `hub.KerasLayer` in a tf_keras model); None when neither says."""
    encoder = getattr(model, "encoder", None)
    config = getattr(encoder, "config", None)
    if config is not None and getattr(config, "num_hidden_layers", 0):
        return config
    return config_from_variables(getattr(model, "weights", []))


def config_from_variables(variables):
    """A `BertConfig` with the layer count, width and heads of the Model Garden or Google BERT
    variables among `variables` (by `tf.Variable` name, any scope); None if there are none."""
    from bertfit.checkpoints.names import TF2_FIRST_QUERY, tf2_variable_scope
    from bertfit.model.config import BertConfig

    shapes = {
        re.sub(r":\d+$", "", getattr(v, "path", None) or v.name): tuple(v.shape) for v in variables
    }
    shapes.update({re.sub(r":\d+$", "", v.name): tuple(v.shape) for v in variables})
    scope = tf2_variable_scope(shapes)
    if scope is not None:
        layer = re.escape(scope) + r"transformer/layer_(\d+)/"
        query = shapes[scope + TF2_FIRST_QUERY]  # [hidden, heads, head_size]
        hidden, heads = query[0], query[1]
    else:
        google = next((n for n in shapes if n.endswith("bert/embeddings/word_embeddings")), None)
        if google is None:
            return None
        layer = (
            re.escape(google.removesuffix("embeddings/word_embeddings")) + r"encoder/layer_(\d+)/"
        )
        hidden = shapes[google][1]
        heads = max(1, hidden // 64)
    found = {int(m.group(1)) for n in shapes if (m := re.match(layer, n))}
    if not found:
        return None
    return BertConfig(
        vocab_size=1,
        hidden_size=hidden,
        num_hidden_layers=max(found) + 1,
        num_attention_heads=heads,
    )


def text_model_shapes(model, elements: list) -> list[tuple[int, int]]:
    """The [batch, seq_length] a strings-in model packs each element to: the output of its
    preprocessing layer (the one returning `input_word_ids`), run on the element's strings."""
    shapes = []
    for element in elements:
        features = split_element(element)[0]
        for layer in getattr(model, "layers", []):
            try:
                out = layer(features)
            except Exception:  # not the preprocessing layer
                continue
            ids = out.get(WORD_IDS) if isinstance(out, dict) else None
            if ids is not None and len(ids.shape) == 2:
                shapes.append(tuple(int(d) for d in ids.shape))
                break
    return shapes


def dataset_memory(model, elements: list, replicas: int) -> dict:
    """`memory_per_replica` for a user's model on the shapes its batches take: the ids' shape,
    or for a strings-in model the shape its preprocessing layer packs them to."""
    shapes = []
    for element in elements:
        ids = canonical(split_element(element)[0]).get(WORD_IDS)
        if ids is not None and len(ids.shape) == 2:
            shapes.append(tuple(ids.shape))
    if not shapes and _holds_strings(split_element(elements[0])[0] if elements else None):
        shapes = text_model_shapes(model, elements[:1])
    shapes = [(b // replicas, s) for b, s in dict.fromkeys(shapes)]
    return memory_per_replica(model, shapes)


def memory_per_replica(
    model, shapes: list[tuple[int, ...]], compute_bytes: int = 4, remat: bool = False
) -> dict:
    """Parameters (exact), gradients + AdamW slots of the trainable variables (exact),
    activations per shape and the predicted peak at the largest (`checks.memory`'s plan).

    A shape [b, K, s] (windows of long documents) is b·K sequences of s tokens: the encoder
    runs on every window.
    """
    parameters = int(sum(np.prod(v.shape) for v in model.weights))
    trainable = int(sum(np.prod(v.shape) for v in model.trainable_weights))
    param_bytes = int(sum(np.prod(v.shape) * tf.as_dtype(v.dtype).size for v in model.weights))
    config = encoder_config(model)
    activations, peak = {}, None
    if config is not None and hasattr(config, "num_hidden_layers"):
        architecture = Architecture.of(config)
        for shape in shapes:
            name = f"[{', '.join(map(str, shape))}]"
            activations[name] = architecture.activation_bytes(shape, compute_bytes, remat)
        if shapes:
            largest = max(shapes, key=lambda s: architecture.activation_bytes(s, 1, remat))
            adapters = adapters_of(model)
            peak = plan(
                param_bytes, trainable, architecture, largest, compute_bytes, remat, adapters
            )
    return {
        "parameters": parameters,
        "trainable_parameters": trainable,
        "parameters_bytes": param_bytes,
        "training_state_bytes": trainable * 4 * (1 + OPTIMIZER_SLOTS),
        "activations_bytes": activations,
        "remat": remat,
        "plan": None if peak is None else peak.to_dict(),
        "architecture": None if peak is None else dataclasses.asdict(architecture),
    }
