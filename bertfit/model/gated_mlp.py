"""Gated feed-forward layers (GLU variants, Shazeer 2020), a part of the family kit
(`model/blocks.py`): output(act(gate(x)) * up(x)), the activation naming the variant (GeGLU:
"gelu", SwiGLU: "silu", ReGLU: "relu"; `BertConfig.hidden_act`).

Checkpoints store the two input projections either as two matrices (NomicBERT's `fc12` gate and
`fc11` up, Llama's and EuroBERT's `gate_proj` and `up_proj`) or as one of twice the
intermediate size whose halves are the up and the gate (GTE's `up_gate_proj`) or the gate and
the up (ModernBERT's `Wi`); `GatedFeedForward` keeps the checkpoint's layout, so its weights
load as they are stored.

Examples:
>>> from bertfit.model.config import BertConfig
>>> config = BertConfig(hidden_size=8, num_attention_heads=2, intermediate_size=16,
...                     hidden_act="silu")
>>> mlp = GatedFeedForward(config, layout=SPLIT, name="mlp")
>>> mlp.build()
>>> sorted(mlp.named_variables())
['mlp/gate/kernel', 'mlp/output/bias', 'mlp/output/kernel', 'mlp/up/kernel']
>>> tuple(mlp(ops.ones([3, 8])).shape)
(3, 8)
"""

from __future__ import annotations

import keras
from keras import ops

from bertfit.model.blocks import dense, dense_variables, feed_forward_activation
from bertfit.model.config import BertConfig
from bertfit.model.layers import Dropout

SPLIT = "split"  # two matrices: `gate` and `up`
UP_GATE = "up_gate"  # one matrix, `input`: the up half, then the gate half (GTE)
GATE_UP = "gate_up"  # one matrix, `input`: the gate half, then the up half (ModernBERT)
LAYOUTS = (SPLIT, UP_GATE, GATE_UP)


class GatedFeedForward(keras.layers.Layer):
    """A gated feed-forward on token rows [rows, hidden]: output(dropout(act(gate) * up)).

    Args:
        config: the sizes, `hidden_act` and initialisation (`BertConfig`).
        layout: how the input projections are stored: `SPLIT`, `UP_GATE` or `GATE_UP`.
        input_bias: whether the input projections have biases.
        output_bias: whether the output projection has one.
        dropout: the rate on the gated states (GTE's), 0 for none.

    Its weights are named below the layer's own name: `<name>/gate` and `<name>/up` (`SPLIT`)
    or `<name>/input`, and `<name>/output`.
    """

    def __init__(
        self,
        config: BertConfig,
        layout: str = SPLIT,
        input_bias: bool = False,
        output_bias: bool = True,
        dropout: float = 0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if layout not in LAYOUTS:
            raise ValueError(f"layout {layout!r}: expected one of {LAYOUTS}.")
        dtype = self.dtype_policy
        self.layout = layout
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size
        width = config.intermediate_size
        if layout == SPLIT:
            self.gate = dense(width, config, "gate", dtype, use_bias=input_bias)
            self.up = dense(width, config, "up", dtype, use_bias=input_bias)
            self.projections = (self.gate, self.up)
        else:  # `input` and `output` are names of Keras' Layer properties
            self.fused = dense(2 * width, config, "input", dtype, use_bias=input_bias)
            self.projections = (self.fused,)
        self.output_dense = dense(config.hidden_size, config, "output", dtype, use_bias=output_bias)
        self.activation = feed_forward_activation(config.hidden_act)
        self.dropout = Dropout(dropout, dtype=dtype)

    def build(self, input_shape=None):
        for layer in self.projections:
            layer.build((None, self.hidden_size))
        self.output_dense.build((None, self.intermediate_size))
        self.built = True

    def call(self, x, training=False):
        if self.layout == SPLIT:
            gate, up = self.gate(x), self.up(x)
        elif self.layout == UP_GATE:
            up, gate = ops.split(self.fused(x), 2, axis=-1)
        else:
            gate, up = ops.split(self.fused(x), 2, axis=-1)
        hidden = self.dropout(self.activation(gate) * up, training=training)
        return self.output_dense(hidden)

    def named_variables(self) -> dict[str, keras.Variable]:
        """The weights under `<name>/...` (see the class docstring)."""
        named = {}
        for layer in (*self.projections, self.output_dense):
            named |= dense_variables(f"{self.name}/{layer.name}", layer)
        return named
