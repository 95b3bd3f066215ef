"""LoRA: low-rank adapters on an encoder's Dense layers: Keras' `Dense.enable_lora` variables,
computed factored (x @ W + s * (x @ A) @ B, never W + s * A @ B) while training.

    enable_lora(classifier, rank=8, alpha=16, targets=("auto",), seed=42)
    # train: each targeted kernel W is frozen and the layer computes
    # x @ W + (alpha / rank) * (x @ A) @ B, where A [in, rank] starts uniform in +-1/sqrt(in)
    # (PEFT's) and B [rank, out] at zero (the model starts as the base)
    merge_lora(classifier)   # W <- W + (alpha / rank) * A @ B: a plain Dense again, to export

A PEFT user's expectations carry over: the adapters are the only trained encoder weights, the
classification head is always trained (PEFT's `modules_to_save`), `alpha / rank` scales the
update, and the default targets are the attention's query and value projections (PEFT's default
for BERT-like models). A starts as PEFT's (`kaiming_uniform_(a=sqrt(5))`: uniform in
+-1/sqrt(in)), not Keras' He-uniform default (+-sqrt(6/in), 2.4 times larger), so that the
learning rates tuned with PEFT mean the same here: the update A @ B scales with A. Targets are
the last part of a Dense layer's canonical name (`layer_<i>/attention/query` -> "query");
ModernBERT, GTE and NomicBERT fuse query, key and value into one Dense ("qkv"), which their
"auto" targets. "all" targets every Dense of the encoder's layers. The embeddings, the pooler and
the head are never adapted.

Keras' `Dense.enable_lora` makes the variables (it freezes the kernel, `trainable=False`, and
adds `lora_kernel_a`/`lora_kernel_b` in float32 whatever the compute dtype), but bertfit does
not use its call as it is: Keras' `Dense.kernel` is the merged W' = W + (alpha / rank) * A @ B,
formed at every forward pass, so each adapted layer holds a full [in, out] temporary that XLA
keeps for the backward pass, and the adapters' gradients come from the merged kernel's,
dW' = x^T dy, another full [in, out] matrix per layer, before dA = s dW' B^T and
dB = s A^T dW'. `enable_lora` here keeps Keras' variables and makes each adapted layer compute
with `lora_call`: x @ W + (alpha / rank) * ((x @ A) @ B), whose backward pass keeps x and
x @ A and forms dA and dB at their own [in, r] and [r, out] sizes. Measured on BERT-large's
shape (24 layers, hidden 1024, rank 8 on query and value, batch 1 x 256, `bench/memory.py`):
the step's peak went from 2895 MiB with Keras' call to 2681 MiB (-214 MiB: 48 adapted
layers' 4 MiB temporaries), and 2722 to 2601 MiB with `--remat`. On a float32 base the two
compute the same within float32 rounding (tests/model/test_lora.py); on a bfloat16 base the
merged kernel is rounded once to bfloat16, which the factored call never does, so a merge
changes the outputs by bfloat16's rounding (2**-8 of a value). bertfit's checkpoints name the
variables themselves (`blocks.dense_variables`: the frozen kernel, plus `<name>/lora_a` and
`<name>/lora_b`), so a run keeps the adapters apart and merges them only when it loads the run
for inference (`Classifier.from_run`).
"""

from __future__ import annotations

import types
from collections.abc import Sequence

import keras
import numpy as np

from bertfit.errors import ConfigError
from bertfit.model.int8 import dequantized_kernel, int8_matmul, is_int8, replace_with_float32
from bertfit.model.variable_removal import one_collection

AUTO = "auto"
ALL = "all"
# The targets of "auto", by family (`BertConfig.model_type`): the attention's query and value.
AUTO_TARGETS = {"modernbert": ("qkv",), "gte": ("qkv",), "nomic_bert": ("qkv",)}
DEFAULT_TARGETS = ("query", "value")


def peft_a_initializer(seed: int | None) -> keras.initializers.Initializer:
    """PEFT's initialiser of A, `kaiming_uniform_(a=sqrt(5))` on its [rank, in] weight: uniform
    in +-1/sqrt(in), which is variance scaling 1/3 over the fan-in (`in` for Keras' [in, rank])."""
    return keras.initializers.VarianceScaling(1 / 3, "fan_in", "uniform", seed=seed)


def adapted_layers(model) -> dict[str, keras.layers.Dense]:
    """The encoder's Dense layers inside its transformer layers, by canonical name
    ("layer_0/attention/query"), in the encoder's order. ALBERT's shared layer is named once."""
    classifier = getattr(model, "classifier", model)
    encoder = getattr(classifier, "encoder", None)
    # a wrapped SavedModel, or a user's own Keras model (`bertfit.check(model=...)` of a TF Hub
    # layer): no bertfit layers to adapt
    if not hasattr(encoder, "named_variables"):
        return {}
    by_kernel = {}
    for name, variable in encoder.named_variables().items():
        if name.startswith("layer_") and name.endswith("/kernel"):
            by_kernel[id(variable)] = name[: -len("/kernel")]
    layers = {}
    for layer in encoder._flatten_layers(include_self=False):
        if isinstance(layer, keras.layers.Dense):
            kernel = layer._kernel if layer.lora_enabled else layer.kernel
            if id(kernel) in by_kernel:
                layers[by_kernel[id(kernel)]] = layer
    return layers


def resolve_targets(model_type: str, targets: Sequence[str]) -> tuple[str, ...]:
    """`targets` with "auto" replaced by the family's defaults (see the module's docstring)."""
    resolved: list[str] = []
    for target in targets:
        names = AUTO_TARGETS.get(model_type, DEFAULT_TARGETS) if target == AUTO else (target,)
        resolved += [n for n in names if n not in resolved]
    return tuple(resolved)


def target_layers(model, targets: Sequence[str]) -> dict[str, keras.layers.Dense]:
    """The layers `targets` (resolved, or ("all",)) pick; a target naming no layer is an error
    that lists the names this encoder has."""
    layers = adapted_layers(model)
    if not layers:
        raise ConfigError(
            "--lora-rank needs an encoder bertfit builds (Hugging Face, TF2 or TF1 "
            "checkpoints); this one is a wrapped SavedModel whose layers it cannot adapt. "
            "Leave --lora-rank out, or pass a checkpoint of the same model."
        )
    if ALL in targets:
        return layers
    picked = {n: layer for n, layer in layers.items() if n.rsplit("/", 1)[-1] in targets}
    known = sorted({n.rsplit("/", 1)[-1] for n in layers})
    unknown = [t for t in targets if not any(n.rsplit("/", 1)[-1] == t for n in layers)]
    if unknown:
        raise ConfigError(
            f"--lora-targets {','.join(unknown)}: this encoder has no such Dense layer; its "
            f"layers' Dense layers are {', '.join(known)} (or pass 'auto' or 'all')."
        )
    return picked


def enable_lora(
    model, rank: int, alpha: float | None, targets: Sequence[str], seed: int | None = None
) -> dict[str, keras.layers.Dense]:
    """Adds rank-`rank` adapters to the targeted Dense layers of a built classifier's encoder
    (their kernels frozen) and returns them by name. `alpha` None: the rank (scale 1). Each
    layer's A is seeded by `seed` and its place, so a run is reproducible."""
    classifier = getattr(model, "classifier", model)
    targets = resolve_targets(classifier.encoder.config.model_type, targets)
    layers = target_layers(model, targets)
    check_rank(rank, layers)
    for i, layer in enumerate(layers.values()):
        layer.enable_lora(
            rank,
            lora_alpha=alpha,
            a_initializer=peft_a_initializer(None if seed is None else seed + i),
        )
        _compute_factored(layer)
    adapters = {id(v) for layer in layers.values() for v in adapter_variables(layer)}
    for variable in classifier.encoder.weights:
        if id(variable) not in adapters:
            variable.trainable = False  # biases, norms, embeddings, pooler: PEFT's bias="none"
    return layers


def check_rank(rank: int, layers: dict[str, keras.layers.Dense]) -> None:
    """Refuses a rank that is not below both sides of every adapted kernel [in, out]: the
    update A @ B cannot have a rank above min(in, out), and at that rank A and B hold more
    weights than the kernel."""
    for name, layer in layers.items():
        fan_in, fan_out = layer._kernel.shape
        _refuse_rank(rank, min(fan_in, fan_out), f"{name}'s kernel is [{fan_in}, {fan_out}]")


def check_rank_fits(rank: int, hidden_size: int) -> None:
    """`check_rank` before the model is built (`bertfit tune` checks every trial first): each
    layer LoRA adapts reads or writes the encoder's hidden vectors, so `hidden_size` is a side
    of its kernel."""
    if rank:
        why = f"each layer it adapts reads or writes vectors of the hidden size, {hidden_size}"
        _refuse_rank(rank, hidden_size, why)


def _refuse_rank(rank: int, limit: int, why: str) -> None:
    if rank >= limit:
        raise ConfigError(
            f"--lora-rank {rank}: {why}, so adapters of rank {limit} or more are not low-rank: "
            "they would hold more weights than the kernel, and change it no more freely than "
            f"training it whole. Pass a --lora-rank below {limit} (LoRA uses 4 to 64), or "
            "leave --lora-rank out to fine-tune every weight."
        )


def lora_call(layer: keras.layers.Dense, inputs, training=None):
    """An adapted Dense layer's call: `x @ W + alpha/rank * ((x @ A) @ B)`, then the bias and
    the activation, W the frozen kernel (float32, bfloat16, or int8 through
    `int8.int8_matmul`). The adapters' term is computed in float32 (A and B are float32;
    under a mixed policy Keras' autocast reads them in the compute dtype, as its own call
    did) and the sum rounded once to the compute dtype. Nothing here is [in, out] but W itself:
    the backward pass keeps x and x @ A, and A's and B's gradients are `x^T (dy B^T)` [in, r]
    and `(x A)^T dy` [r, out] (the module's docstring says why this is not Keras' call)."""
    if is_int8(layer):
        base = int8_matmul(layer, inputs)
    else:
        base = keras.ops.matmul(inputs, keras.ops.cast(layer._kernel, layer.compute_dtype))
    update = keras.ops.matmul(keras.ops.matmul(inputs, layer.lora_kernel_a), layer.lora_kernel_b)
    scale = layer.lora_alpha / layer.lora_rank
    x = keras.ops.cast(keras.ops.add(base, scale * update), layer.compute_dtype)
    if layer.bias is not None:
        x = keras.ops.add(x, layer.bias)
    if layer.activation is not None:
        x = layer.activation(x)
    return x


def _compute_factored(layer: keras.layers.Dense) -> None:
    """Makes a LoRA-enabled layer compute with `lora_call`: its `call`, and its `_int8_call`,
    which Keras' `quantized_call` dispatches to on an int8 base (`bertfit.model.int8`)."""
    call = types.MethodType(lora_call, layer)
    object.__setattr__(layer, "call", call)
    if is_int8(layer):
        object.__setattr__(layer, "_int8_call", call)


def adapter_variables(layer: keras.layers.Dense) -> tuple:
    """A LoRA-enabled Dense layer's A and B; () for a plain one."""
    return (layer.lora_kernel_a, layer.lora_kernel_b) if layer.lora_enabled else ()


def lora_parameters(model) -> int:
    """How many adapter weights the model holds (A and B of every adapted layer)."""
    return sum(
        int(np.prod(layer.lora_kernel_a.shape)) + int(np.prod(layer.lora_kernel_b.shape))
        for layer in adapted_layers(model).values()
        if layer.lora_enabled
    )


def merge_lora(model) -> int:
    """Folds every adapter into its kernel (W + alpha/rank * A @ B, in the kernel's dtype) and
    removes it: the layers are plain Dense layers again, as a model trained without LoRA, so an
    export holds no adapter code. An int8 base (`bertfit.model.int8`) is dequantized: its
    layers become float32 ones, adapted or not. Returns how many layers were merged."""
    with one_collection():  # each layer merged deletes two or three variables
        return sum(_merge(layer) for layer in adapted_layers(model).values())


def _merge(layer: keras.layers.Dense) -> bool:
    """`merge_lora` for one layer: whether it had adapters to merge."""
    if not layer.lora_enabled:
        if is_int8(layer):  # an int8 base's layer without adapters
            replace_with_float32(layer, dequantized_kernel(layer))
        return False
    kernel = layer._kernel
    delta = (layer.lora_alpha / layer.lora_rank) * keras.ops.matmul(
        layer.lora_kernel_a, layer.lora_kernel_b
    )
    if is_int8(layer):  # dequantized, and float32 from now on (`bertfit.model.int8`)
        replace_with_float32(layer, dequantized_kernel(layer) + delta)
        kernel = layer._kernel
    else:
        kernel.assign(keras.ops.cast(keras.ops.cast(kernel, "float32") + delta, kernel.dtype))
    adapters = (layer.lora_kernel_a, layer.lora_kernel_b)
    layer._trainable_variables[:] = [
        v for v in layer._trainable_variables if all(v is not a for a in adapters)
    ]
    layer._tracker.unlock()
    del layer.lora_kernel_a, layer.lora_kernel_b
    layer._tracker.lock()
    layer.lora_enabled = False
    layer.__dict__.pop("call", None)  # Dense's own call (`_compute_factored`)
    kernel.trainable = True
    return True
