"""A run's weights by name, and restoring a model from a checkpoint of them: what training saves
(`bertfit.training.checkpointing`) and everything that reads a run (evaluate, predict, export,
serve) restores.

bertfit names every variable itself: the model's weights by their canonical names
(`model/encoder/...`, `model/head/kernel`), the optimizer's variables by position
(`optimizer/<i>/<name>`), the dropout RNG states by position (`rng/<i>`). The names are the
checkpoint's format: a run saved by an older bertfit restores only while they stay the same.

Values go through Keras (`keras.ops.convert_to_numpy`, `Variable.assign`), so the same code saves
and restores on TensorFlow and on JAX and the files are the same (`bertfit.runs.checkpoint_files`,
safetensors): a run trained on JAX evaluates, exports and serves in TensorFlow, and one trained
where TensorFlow is not installed exports on a machine that has it.
"""

from __future__ import annotations

import keras
import numpy as np

from bertfit.errors import CheckpointError
from bertfit.runs.checkpoint_files import read_checkpoint


def model_variables(model) -> dict[str, object]:
    """Every weight of a `BertClassifier` under a stable name. A `ChunkedClassifier`'s are its
    classifier's, under the same names, and its window pooling's (the attention score's
    kernel as `window_pooling/score/kernel`; mean and max have none)."""
    classifier = getattr(model, "classifier", model)
    encoder = classifier.encoder
    if hasattr(encoder, "named_variables"):
        named = {f"encoder/{k}": v for k, v in encoder.named_variables().items()}
    else:  # an opaque wrapped SavedModel: its variable paths are stable
        named = {f"encoder/{v.path}": v for v in encoder.weights}
    named["head/kernel"] = classifier.head.kernel
    named["head/bias"] = classifier.head.bias
    score = getattr(getattr(model, "window_pooling", None), "score", None)
    if score is not None:
        named["window_pooling/score/kernel"] = score.kernel
    return named


def adapter_variables(model) -> dict[str, object]:
    """What a LoRA run trains, by `model_variables`' names: the adapters (`.../lora_a`,
    `.../lora_b`), the head and the window pooling's score; empty without LoRA. Together with
    the base checkpoint they are the whole model, in a small fraction of its size."""
    named = model_variables(model)
    if not any("/lora_" in name for name in named):
        return {}
    return {
        name: v for name, v in named.items() if "/lora_" in name or not name.startswith("encoder/")
    }


def rng_variables(model) -> list:
    """The state of every dropout seed generator, in the model's (deterministic) layer order."""
    return [v for v in model.variables if "seed_generator_state" in v.path]


def checkpoint_variables(model, optimizer=None, adapters_only: bool = False) -> dict:
    """The variables a checkpoint holds, by their names there: the model's (`adapters_only`: a
    LoRA model's `adapter_variables` alone) and, with an `optimizer`, its variables and the RNG
    states too: everything a resumed run needs."""
    named = adapter_variables(model) if adapters_only else model_variables(model)
    variables = {f"model/{name}": v for name, v in named.items()}
    if optimizer is not None:
        variables.update({f"optimizer/{i}/{v.name}": v for i, v in enumerate(optimizer.variables)})
        variables.update({f"rng/{i}": v for i, v in enumerate(rng_variables(model))})
    return variables


def variable_values(variables: dict) -> dict[str, np.ndarray]:
    """Each variable's value on the host, by name (what `save_checkpoint` writes)."""
    return {name: np.asarray(keras.ops.convert_to_numpy(v.value)) for name, v in variables.items()}


def restore_variables(variables: dict, path: str) -> str | None:
    """Loads every variable of `variables` (by name) from the checkpoint at `path` and returns
    its `TrainingState`'s JSON (None in a checkpoint without one). A variable the checkpoint
    lacks, or holds in another shape, is an error before any is changed, not a silent skip."""
    arrays, state = read_checkpoint(path, variables)
    missing = [name for name in variables if name not in arrays]
    if missing:
        raise CheckpointError(
            f"{path} holds no {missing[0]} ({len(missing)} of the {len(variables)} variables "
            "restored are missing): it is not a checkpoint of this run's model. Pass the run "
            "directory the checkpoint belongs to."
        )
    for name, variable in variables.items():
        if tuple(arrays[name].shape) != tuple(variable.shape):
            raise CheckpointError(
                f"{path} holds {name} of shape {tuple(arrays[name].shape)}, and the model's is "
                f"{tuple(variable.shape)}: it is not a checkpoint of this run's model. Pass the "
                "run directory the checkpoint belongs to."
            )
    for name, variable in variables.items():
        variable.assign(arrays[name])
    return state


def restore_model(model, path: str) -> None:
    """Loads every model weight from the checkpoint at `path`."""
    restore_variables(checkpoint_variables(model), path)


def restore_adapters(model, path: str) -> None:
    """Loads a LoRA run's adapters and head (`checkpoints/adapter`) into `model`, a classifier
    built on the run's base checkpoint with the run's `enable_lora`."""
    restore_variables(checkpoint_variables(model, adapters_only=True), path)
