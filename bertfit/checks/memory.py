"""The memory plan: peak training memory per replica, predicted from the model and the run's
settings, and the settings that make it fit a device (`bertfit check --device-memory 16GB`).

Peak per replica = weights (every variable, at its dtype)
                 + gradients and AdamW's two slots (float32, trainable variables only: a frozen
                   base, as with LoRA, has neither)
                 + the larger of: the activations kept for the backward pass at the longest
                   shape, and the clipped copy of the gradients the update makes (a model
                   whose state dwarfs its activations peaks in the update)
                 + the runtime's own (`runtime_bytes`, below)
                 + with LoRA on a bf16 or int8 base, that base's float32 copies (`Adapters`).

Activations per layer and token, in values of the compute dtype:
    ACTIVATION_HIDDEN · h + ACTIVATION_INTERMEDIATE · i + ACTIVATION_SCORES · heads · s
With `--remat` the backward pass keeps each layer's input (h per token) and recomputes one
layer at a time, so activations are L · h + one layer's. LoRA adds x @ A per adapted layer
(rank values per token, float32); its x is the layer's input, kept already, and nothing of
[in, out] size (`model/lora.py`: the adapters are computed factored).

The counts are measured, not read off the layer's code: counting every tensor the layer's
gradient uses gives ~10 h + 2 i + 3 per score, yet XLA fuses the norms, dropouts and GELU
into their neighbours and keeps about 2 h + i (and ~3 values per attention score: the
probabilities, their dropout mask and the dropped ones). Calibrated on this 2-core CPU
(fp32, the whole step XLA-compiled) from the peak resident memory of the real step at
batch × seq 16 × 128 with and without remat (`bench/memory.py`): the difference fixes the
per-layer count.

The runtime's own is what the step costs besides those tensors: RUNTIME_BYTES (TensorFlow's
threads, XLA's compiled programs) and RUNTIME_PER_KERNEL_BYTE times the layers' kernels at
float32: after its first (compiling) call the process keeps about 0.7 bytes per kernel byte
more than the step's tensors, for full fine-tuning and LoRA alike (a 4-layer, hidden-1024
LoRA step: 233 MiB more resident after that call than before, of which XLA's own buffer
assignment holds 92 MiB of temporaries; each further compiled shape keeps ~65 MiB more).
The two constants are a least-squares fit to the twelve float32 rows (full, remat, LoRA,
LoRA + remat) of `bench/memory.py` at three shapes: 24 and 4 layers of hidden 1024 at batch
1 × 256, 4 layers of hidden 256 at 16 × 128 (2026-11-26): a calibration of this CPU's runtime,
not a count, and an overestimate on an accelerator, whose compiled program lives in host
memory. It over-predicts a LoRA step: 4 layers of hidden 1024 by 16% to 31%, 4 of hidden
256 at 16 × 128 by 16% (364 MiB for the 313 measured on 2026-11-29).
The bf16 and int8 bases' float32 copies are counted, not fitted: XLA's buffer assignment for a
bf16 base (its CPU backend computes bf16 matmuls in float32) and the resident memory after
quantizing an int8 base (`Adapters.base_copies_bytes`).
The fit is TensorFlow 2.21's. TensorFlow 2.20 (the TPU build's minor) keeps a constant
RUNTIME_BYTES_BY_MINOR more at the same step: 4 layers of hidden 256 at 32 × 64 peak at 451 vs
416 MiB without remat and 399 vs 363 MiB with it (2026-11-26, this CPU).
`tests/checks/test_memory_plan.py` holds other shapes within 15% of their measurement (a LoRA
step: at most 20% over).
"""

from __future__ import annotations

import dataclasses
import os
import re

import numpy as np
import tensorflow as tf

from bertfit.errors import ConfigError
from bertfit.model.lora import adapted_layers

ACTIVATION_HIDDEN = 2
ACTIVATION_INTERMEDIATE = 1
ACTIVATION_SCORES = 3
RUNTIME_BYTES = 242 * 2**20
RUNTIME_PER_KERNEL_BYTE = 0.73  # of the layers' kernels at float32 (see the docstring)
RUNTIME_BYTES_BY_MINOR = {"2.20": 36 * 2**20}  # beyond 2.21's, where the fit was made
TF_MINOR = ".".join(tf.__version__.split(".")[:2])
OPTIMIZER_SLOTS = 2  # AdamW's first and second moments
BASE_BYTES = {"fp32": 4, "bf16": 2, "int8": 1}  # a frozen base's kernels (--base-precision)

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?)B?\s*$", re.IGNORECASE)


def parse_memory(text: str) -> int:
    """A device's memory as a number of bytes: "16GB", "16 GiB", "15.5G", "800MB" (GB and GiB
    are both read as 2**30 bytes, as accelerators are sold).

    Examples:
    >>> parse_memory("16GB") == 16 * 2**30
    True
    >>> parse_memory("512MiB") == 512 * 2**20
    True
    """
    match = _SIZE.match(str(text))
    if match is None or float(match.group(1)) <= 0:
        raise ConfigError(
            f"--device-memory {text!r} is not a memory size: give a number and a unit, "
            "e.g. 16GB, 24GiB or 800MB"
        )
    power = " KMGT".index(match.group(2).upper() or " ")
    return int(float(match.group(1)) * 2 ** (10 * power))


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What the activation term needs of an encoder."""

    layers: int
    hidden: int
    intermediate: int
    heads: int

    @classmethod
    def of(cls, config) -> Architecture:
        hidden = config.hidden_size
        return cls(
            layers=config.num_hidden_layers,
            hidden=hidden,
            intermediate=getattr(config, "intermediate_size", None) or 4 * hidden,
            heads=config.num_attention_heads,
        )

    def layer_values_per_token(self, seq: int) -> int:
        """Activation values one layer keeps per token for its backward pass."""
        return (
            ACTIVATION_HIDDEN * self.hidden
            + ACTIVATION_INTERMEDIATE * self.intermediate
            + ACTIVATION_SCORES * self.heads * seq
        )

    @property
    def kernel_values(self) -> int:
        """The values of every layer's kernels: query, key, value and attention output (h·h
        each), intermediate and output (h·i each)."""
        return self.layers * (4 * self.hidden**2 + 2 * self.hidden * self.intermediate)

    def activation_bytes(self, shape: tuple[int, ...], compute_bytes: int, remat: bool) -> int:
        """Activations of one replica's batch of `shape` ([b, s], or [b, K, s] for windows):
        every layer's (plain), or each layer's input plus one layer's (remat)."""
        tokens, seq = int(np.prod(shape)), shape[-1]
        layer = tokens * self.layer_values_per_token(seq)
        inputs = tokens * self.hidden
        kept = self.layers * inputs + layer if remat else self.layers * layer + inputs
        return int(kept * compute_bytes)


@dataclasses.dataclass(frozen=True)
class Adapters:
    """What the plan needs of a LoRA run (`bertfit.model.lora`): how many Dense layers carry
    adapters, their rank, and the bytes a value of its frozen base's kernels takes (4, or
    2 and 1 with `--base-precision bf16` and `int8`)."""

    layers: int
    rank: int
    base_bytes: int = 4

    def activation_bytes(self, shape: tuple[int, ...], architecture: Architecture, remat: bool):
        """x @ A of every adapted layer ([tokens, rank] in float32), which the backward pass of
        (x @ A) @ B keeps beside x, the layer's input the base already keeps; with `--remat`,
        one transformer layer's."""
        layers = self.layers / architecture.layers if remat else self.layers
        return int(np.prod(shape) * self.rank * 4 * layers)

    def base_copies_bytes(self, architecture: Architecture, compute_bytes: int) -> int:
        """What a frozen base in bf16 or int8 costs on this CPU besides its own bytes: XLA's
        CPU backend has no bfloat16 matmul, computes each in float32 and holds a float32 copy
        of every bf16 kernel in the step's buffers; an int8 base is read as float32 and
        quantized, and the process keeps the float32 kernels' memory (freed, not returned),
        plus one dequantized kernel at a time (`model/int8.py`: `int8_matmul`)."""
        float32 = architecture.kernel_values * 4
        if self.base_bytes == BASE_BYTES["bf16"]:
            return float32
        if self.base_bytes == BASE_BYTES["int8"]:
            return float32 + architecture.hidden * architecture.intermediate * compute_bytes
        return 0


def runtime_bytes(architecture: Architecture) -> int:
    """What the step costs besides the tensors the plan counts (see the module's docstring):
    RUNTIME_BYTES (and RUNTIME_BYTES_BY_MINOR), and RUNTIME_PER_KERNEL_BYTE of the layers' kernels
    at float32."""
    extra = RUNTIME_BYTES_BY_MINOR.get(TF_MINOR, 0)
    return RUNTIME_BYTES + extra + int(RUNTIME_PER_KERNEL_BYTE * architecture.kernel_values * 4)


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """Predicted peak memory per replica of one training step, its parts in bytes."""

    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    shape: tuple[int, ...]
    remat: bool
    runtime_bytes: int = RUNTIME_BYTES
    base_copies_bytes: int = 0  # a bf16 or int8 frozen base's float32 copies (`Adapters`)

    @property
    def peak_bytes(self) -> int:
        """The larger of the backward pass's peak (state and activations) and the update's
        (state and the clipped copy of the gradients, the activations freed)."""
        state = self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
        working = max(self.activations_bytes, self.gradients_bytes)
        return state + working + self.runtime_bytes + self.base_copies_bytes

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "peak_bytes": self.peak_bytes}


def plan(
    weights_bytes: int,
    trainable: int,
    architecture: Architecture,
    shape: tuple[int, ...],
    compute_bytes: int = 4,
    remat: bool = False,
    adapters: Adapters | None = None,
) -> MemoryPlan:
    """The peak of a step on one replica's batch of `shape` (the longest bucket's); with
    `adapters`, a LoRA run's (`trainable` then counts the adapters and the head)."""
    activations = architecture.activation_bytes(shape, compute_bytes, remat)
    if adapters is not None:
        activations += adapters.activation_bytes(shape, architecture, remat)
    return MemoryPlan(
        weights_bytes=weights_bytes,
        gradients_bytes=trainable * 4,
        optimizer_bytes=trainable * 4 * OPTIMIZER_SLOTS,
        activations_bytes=activations,
        shape=tuple(shape),
        remat=remat,
        runtime_bytes=runtime_bytes(architecture),
        base_copies_bytes=(
            0 if adapters is None else adapters.base_copies_bytes(architecture, compute_bytes)
        ),
    )


def adapters_of(model) -> Adapters | None:
    """A built model's LoRA adapters (`bertfit.model.lora`) as the plan counts them; None
    without any."""
    dense = list(adapted_layers(model).values())
    layers = [layer for layer in dense if layer.lora_enabled]
    if not layers:
        return None
    kernels = [layer._kernel for layer in dense]
    return Adapters(
        layers=len(layers),
        rank=layers[0].lora_rank,
        base_bytes=min(tf.as_dtype(kernel.dtype).size for kernel in kernels),
    )


def plan_for_model(model, config, shape, compute_bytes: int = 4, remat: bool = False):
    """`plan` for a built Keras `model` whose encoder has `config`: weights and trainable
    counts read from the model (`trainable_weights`, so a frozen base counts once), and its
    adapters if it has any."""
    weights = int(sum(np.prod(v.shape) * tf.as_dtype(v.dtype).size for v in model.weights))
    trainable = int(sum(np.prod(v.shape) for v in model.trainable_weights))
    architecture = Architecture.of(config)
    return plan(weights, trainable, architecture, shape, compute_bytes, remat, adapters_of(model))


def what_fits(plan_: MemoryPlan, architecture: Architecture, device_bytes: int) -> list[str]:
    """The settings that each alone bring `plan_` under `device_bytes`: --remat, the largest
    batch per replica that fits (halving), a shorter --max-seq-length; [] when none does."""
    fixes = []
    fixed = plan_.peak_bytes - max(plan_.activations_bytes, plan_.gradients_bytes)
    compute_bytes = max(1, _compute_bytes(plan_, architecture))

    def fits(shape, remat) -> bool:
        activations = architecture.activation_bytes(shape, compute_bytes, remat)
        return fixed + max(activations, plan_.gradients_bytes) <= device_bytes

    batch, *rest = plan_.shape
    if not plan_.remat and fits(plan_.shape, True):
        fixes.append("--remat")
    smaller = batch // 2
    while smaller >= 1 and not fits((smaller, *rest), plan_.remat):
        smaller //= 2
    if smaller >= 1:
        fixes.append(f"a batch of {smaller} per replica (--grad-accum keeps the effective batch)")
    seq = plan_.shape[-1] // 2
    while seq >= 16 and not fits((*plan_.shape[:-1], seq), plan_.remat):
        seq //= 2
    if seq >= 16:
        fixes.append(f"--max-seq-length {seq}")
    return fixes


def _compute_bytes(plan_: MemoryPlan, architecture: Architecture) -> int:
    """The compute dtype's size the plan's activations were counted at."""
    one = architecture.activation_bytes(plan_.shape, 1, plan_.remat)
    return round(plan_.activations_bytes / one) if one else 4


def lora_trainable(architecture: Architecture, head: int, rank: int = 8) -> int:
    """Trainable values with rank-`rank` LoRA adapters on every layer's query and value and the
    head trained: 2 adapters × (h·r + r·h) per layer."""
    return architecture.layers * 2 * 2 * architecture.hidden * rank + head


def int8_base_saving(architecture: Architecture, base_bytes: int, compute_bytes: int = 4) -> int:
    """The bytes `--base-precision int8` frees on a LoRA run whose frozen base is stored at
    `base_bytes` a value, as the plan counts them: each layer's kernels (query, key, value,
    attention output: h·h each; intermediate and output: h·i each) at one byte, less a float32
    scale per output column, less the float32 copies an int8 base costs on this CPU beyond
    the present base's (`Adapters.base_copies_bytes`): negative from an fp32 base, whose peak
    an int8 one raises here (bench/memory.py: 2,783 against 2,679 MiB)."""
    h, i, layers = architecture.hidden, architecture.intermediate, architecture.layers
    scales = layers * (4 * h + i + h)
    copies = Adapters(1, 1, BASE_BYTES["int8"]).base_copies_bytes(architecture, compute_bytes)
    present = Adapters(1, 1, base_bytes).base_copies_bytes(architecture, compute_bytes)
    return architecture.kernel_values * (base_bytes - 1) - scales * 4 - (copies - present)


def report_fit(
    report,
    memory: dict,
    device_bytes: int,
    where: str,
    head: int,
    lora: bool = False,
    say_fits: bool = True,
    base_bytes: int | None = None,
) -> None:
    """A finding: the plan's peak fits `device_bytes` (info, unless `say_fits` is False), or
    it does not (error) and the settings that each alone would make it fit. `lora`: the run
    has no adapters (`--lora-rank 8` may fit); `base_bytes`: a LoRA run's frozen base is
    stored at that many bytes a value (`--base-precision int8` may fit)."""
    from bertfit.checks.findings import ERROR, INFO

    if not memory.get("plan"):
        return
    data = dict(memory["plan"])
    data.pop("peak_bytes")
    plan_ = MemoryPlan(**{**data, "shape": tuple(data["shape"])})
    architecture = Architecture(**memory["architecture"])
    peak = plan_.peak_bytes
    if peak <= device_bytes:
        if not say_fits:
            return
        report.add(
            "memory-fits",
            INFO,
            f"a training step needs about {_gib(peak)} per replica (predicted), within the "
            f"device's {_gib(device_bytes)}",
            where=where,
        )
        return
    fixes = what_fits(plan_, architecture, device_bytes)
    if lora:
        adapted = dataclasses.replace(
            plan_,
            gradients_bytes=lora_trainable(architecture, head) * 4,
            optimizer_bytes=lora_trainable(architecture, head) * 4 * OPTIMIZER_SLOTS,
        )
        if adapted.peak_bytes <= device_bytes:
            fixes.append("--lora-rank 8")
    if base_bytes is not None and base_bytes > BASE_BYTES["int8"]:
        saving = int8_base_saving(architecture, base_bytes)
        if peak - saving <= device_bytes:
            fixes.append("--base-precision int8")
    report.add(
        "memory-exceeds-device",
        ERROR,
        f"does not fit {_gib(device_bytes)}: a training step needs about {_gib(peak)} per "
        f"replica (weights {_gib(plan_.weights_bytes)}, gradients and optimizer state "
        f"{_gib(plan_.gradients_bytes + plan_.optimizer_bytes)}, activations "
        f"{_gib(plan_.activations_bytes)} at {list(plan_.shape)})",
        where=where,
        why="the step would fail with out-of-memory (RESOURCE_EXHAUSTED) on the device",
        fix=(
            "fits with " + ", or ".join(fixes)
            if fixes
            else "no single setting here makes it fit: combine them, or use a device with "
            "more memory or more replicas"
        ),
    )


def _gib(size: float) -> str:
    for unit, power in (("GiB", 30), ("MiB", 20)):
        if size >= 2**power:
            return f"{size / 2**power:.1f} {unit}"
    return f"{size / 2**10:.0f} KiB"


def host_memory() -> int | None:
    """This machine's physical memory in bytes (a CPU replica's device), None if unknown."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
