"""An int8 frozen base under LoRA (`--base-precision int8`): the QLoRA idea with Keras' own
quantisation.

    quantize_base(adapted_layers(classifier).values())   # the encoder's layers' kernels -> int8
    enable_lora(classifier, rank=8, ...)   # float32 adapters on top (`bertfit.model.lora`)
    merge_lora(classifier)             # W <- dequantized W + alpha/rank * A @ B, in float32

Each kernel of the encoder's transformer layers (attention and feed-forward: nearly all of a
BERT's weights) is stored as int8 with one float32 scale per output column (Keras'
`Dense.quantize("int8")`: abs-max per channel, a quarter of the float32 bytes). The embeddings,
norms, biases, pooler and head stay as they were.

Weight-only: the matmul runs in the compute dtype on the dequantized kernel. Keras' default
int8 mode also rounds each token's activations to int8 at every call (`inputs_quantizer`), a
second error that the merged export, in float32, would not have: the trained model and its
export would then differ by ~1e-2, not the ~1e-6 of float rounding. On a CPU an int8 x int8
matmul is not faster in TensorFlow's XLA step either, so the activations stay unquantized and
the base only saves memory, as QLoRA's 4-bit base does.

Merging dequantizes: the merged kernel is `int8 / scale + alpha/rank * A @ B` in float32 and the
layer becomes a plain float32 Dense (no quantized variables or code in an export), so export,
predict and serve see a float32 model. The rounding of the base to int8 happens once, before
training: the adapters learn on the rounded base, which is what the merged export holds.
"""

from __future__ import annotations

import types
from collections.abc import Iterable

import keras

from bertfit.model.variable_removal import one_collection

INT8 = "int8"


def weight_only_int8() -> keras.quantizers.Int8QuantizationConfig:
    """Keras' int8 quantisation of the kernel alone (abs-max per output column), the
    activations left in the compute dtype (see the module's docstring)."""
    return keras.quantizers.Int8QuantizationConfig(activation_quantizer=None)


def quantize_base(layers: Iterable[keras.layers.Dense]) -> int:
    """Stores the kernels of built Dense `layers` (`lora.adapted_layers`: the encoder's
    transformer layers) in int8, before `enable_lora` (Keras adapts a quantized Dense), each
    computing with `int8_call`; returns how many layers it quantized."""
    layers = [layer for layer in layers if not is_int8(layer)]
    with one_collection():  # Keras' quantize deletes each float kernel
        for layer in layers:
            layer.quantize(INT8, config=weight_only_int8())
            # Keras' `quantized_call` dispatches to `_int8_call`: this layer's is ours.
            object.__setattr__(layer, "_int8_call", types.MethodType(int8_call, layer))
    return len(layers)


def int8_call(layer: keras.layers.Dense, inputs, training=None):
    """An int8 Dense layer's call (Keras' `Dense._int8_call` without activation quantization):
    `int8_matmul`, the bias and the activation. An adapted layer computes with
    `lora.lora_call` instead, which adds its adapters' term to the same `int8_matmul`."""
    x = int8_matmul(layer, inputs)
    if layer.bias is not None:
        x = keras.ops.add(x, layer.bias)
    if layer.activation is not None:
        x = layer.activation(x)
    return x


def int8_matmul(layer: keras.layers.Dense, inputs):
    """`inputs` times an int8 layer's dequantized kernel, which lives for one matmul only.

    A dequantization reads nothing but variables, so XLA is free to compute it once for the
    forward pass, the backward pass and a `--remat` recomputation, and early: with Keras' own
    call every layer's kernel was in float32 at once, the step more costly than on the float32
    base it replaces (the XLA step's temporary buffers on 6 BERT-large layers, batch 1 x 256:
    318 MiB against LoRA's 186 MiB on a float32 base). Here each dequantization reads the
    tensor it multiplies (`_after`: the layer's input, or in the backward pass the incoming
    gradient, as `tf.recompute_grad` does), so it happens where it is used: 164 MiB (85 MiB
    with `--remat`, against 105 MiB)."""
    kernel, scale = layer._kernel, layer.kernel_scale
    dtype = layer.compute_dtype

    def dequantized(after):
        # in float32 (the scales' dtype), rounded once to the compute dtype: under a mixed
        # policy the product, its output and the gradient it passes back are then in the
        # compute dtype, as every other layer's (a float32 kernel would make them float32,
        # which TensorFlow does not mix with the bfloat16 gradients of the next layer)
        float32 = keras.ops.divide(keras.ops.cast(_after(kernel, after), "float32"), scale)
        return keras.ops.cast(float32, dtype)

    @keras.ops.custom_gradient
    def matmul(inputs):
        def gradient(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            return keras.ops.matmul(upstream, keras.ops.transpose(dequantized(upstream)))

        return keras.ops.matmul(inputs, dequantized(inputs)), gradient

    return matmul(inputs)


def _after(kernel, tensor):
    """`kernel` unchanged, but as a value computed from `tensor` (zero added unless its first
    element is NaN): XLA can neither compute what uses it before `tensor` exists nor merge it
    with another use of `kernel`."""
    first = keras.ops.reshape(tensor, [-1])[:1]
    return keras.ops.add(kernel, keras.ops.cast(keras.ops.isnan(first), kernel.dtype))


def is_int8(layer) -> bool:
    """Whether `layer` holds an int8 kernel (`quantize_base`)."""
    return getattr(layer, "quantization_mode", None) == INT8


def dequantized_kernel(layer: keras.layers.Dense):
    """An int8 Dense layer's base kernel in float32: the int8 values over their scales."""
    return keras.ops.divide(keras.ops.cast(layer._kernel, "float32"), layer.kernel_scale)


def replace_with_float32(layer: keras.layers.Dense, kernel) -> None:
    """Makes an int8 Dense a plain float32 one holding `kernel`: its int8 kernel and scales
    removed, its dtype policy the unquantized one (a LoRA-enabled layer is merged first)."""
    old = (layer._kernel, layer.kernel_scale)
    layer._tracker.unlock()
    for variables in (layer._trainable_variables, layer._non_trainable_variables):
        variables[:] = [v for v in variables if all(v is not o for o in old)]
    del layer._kernel, layer.kernel_scale
    layer._kernel = layer.add_weight(
        name="kernel",
        shape=tuple(kernel.shape),
        initializer="zeros",
        dtype="float32",
    )
    layer._kernel.assign(kernel)
    layer._tracker.lock()
    layer._is_quantized = False
    layer.quantization_config = None
    layer.dtype_policy = layer.dtype_policy.name.split("_from_", 1)[1]
