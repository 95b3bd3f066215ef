"""The student's starting checkpoint cut from the teacher: its embeddings, pooler and the chosen
layers of its fine-tuned encoder, renumbered 0..k-1, written as a Hugging Face `BertModel`
directory with the teacher's tokenizer, so the student's run loads it as any `--model`."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from bertfit.checkpoints.hf import SAFETENSORS
from bertfit.checkpoints.names import HF_WORD_EMBEDDINGS, hf_table
from bertfit.checkpoints.weights import read_weights
from bertfit.errors import ConfigError
from bertfit.text.vocab_map import read_vocab_map, write_vocab_map
from bertfit.text.wordpiece import read_vocab

_LAYER = re.compile(r"^encoder\.layer\.(\d+)\.")
_FEED_FORWARD_IN = "encoder.layer.{}.intermediate.dense"
_FEED_FORWARD_OUT = "encoder.layer.{}.output.dense.weight"


@dataclasses.dataclass(frozen=True)
class StudentCut:
    """What of the teacher the student keeps: its `layers` (None: the student is a
    --student-model, nothing is cut), the word ids `kept_ids` (None: all) and each layer's
    feed-forward width `intermediate_size` (None: the teacher's)."""

    layers: list[int] | None
    kept_ids: np.ndarray | None = None
    intermediate_size: int | None = None


def student_tensors(teacher_tensors: dict[str, np.ndarray], layers: list[int]) -> dict:
    """The Hugging Face tensors of a student keeping `layers` of the teacher: the teacher's
    layer `layers[j]` becomes layer j; every tensor outside the layers is kept as it is."""
    renumber = {teacher: student for student, teacher in enumerate(layers)}
    kept = {}
    for name, value in teacher_tensors.items():
        found = _LAYER.match(name)
        if found is None:
            kept[name] = value
        elif int(found.group(1)) in renumber:
            kept[_LAYER.sub(f"encoder.layer.{renumber[int(found.group(1))]}.", name)] = value
    return kept


def narrow_feed_forward(tensors: dict[str, np.ndarray], layers: int, size: int) -> dict:
    """The Hugging Face tensors with each of the first `layers` layers' feed-forward narrowed
    to `size` neurons: the ones whose input and output weights have the largest product of
    norms (what a neuron can add to the layer's output), kept in their order."""
    narrowed = dict(tensors)
    for layer in range(layers):
        into, out = _FEED_FORWARD_IN.format(layer), _FEED_FORWARD_OUT.format(layer)
        weight_in, weight_out = tensors[f"{into}.weight"], tensors[out]  # [I, H], [H, I]
        reach = np.linalg.norm(weight_in, axis=1) * np.linalg.norm(weight_out, axis=0)
        kept = np.sort(np.argsort(-reach, kind="stable")[:size])
        narrowed[f"{into}.weight"] = weight_in[kept]
        narrowed[f"{into}.bias"] = tensors[f"{into}.bias"][kept]
        narrowed[out] = weight_out[:, kept]
    return narrowed


def check_cuttable(config) -> None:
    """Refuses (ConfigError) a teacher whose encoder (its `BertConfig`) a student cannot be
    cut from: only BERT-architecture layers are cut (and their vocabularies pruned)."""
    if config.model_type != "bert":
        raise ConfigError(
            f"--student-layers cuts BERT-architecture teachers only; this teacher is a "
            f"{config.model_type} encoder. Pass --student-model CHECKPOINT instead."
        )


def write_student(
    encoder,
    tokenizer_dir: Path,
    layers: list[int],
    path: Path,
    kept: np.ndarray | None = None,
    intermediate_size: int | None = None,
) -> Path:
    """Writes the student cut from `encoder` (the teacher's) into `path`; returns it. With
    `kept` (ids of the teacher's tokenizer, increasing: `bertfit.text.vocab_map.kept_ids`) the
    student's word embeddings are those rows alone, and its tokenizer renumbers ids to them;
    with `intermediate_size`, its feed-forwards keep that many neurons
    (`narrow_feed_forward`)."""
    config = encoder.config
    check_cuttable(config)
    if not hasattr(encoder, "named_variables"):  # a loaded SavedModel's, not bertfit's layers
        raise ConfigError(
            "--student-layers cuts a teacher whose encoder bertfit built from a checkpoint; "
            "this teacher's is a loaded SavedModel. Pass --student-model CHECKPOINT instead."
        )
    tensors = student_tensors(read_weights(encoder, hf_table(config.num_hidden_layers)), layers)
    student = dataclasses.replace(config, num_hidden_layers=len(layers))
    if kept is not None:
        tensors[HF_WORD_EMBEDDINGS] = tensors[HF_WORD_EMBEDDINGS][kept]
        student = dataclasses.replace(student, vocab_size=len(kept))
    if intermediate_size is not None:
        tensors = narrow_feed_forward(tensors, len(layers), intermediate_size)
        student = dataclasses.replace(student, intermediate_size=intermediate_size)
    path.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()},
        str(path / SAFETENSORS),
        metadata={"format": "pt"},
    )
    (path / "config.json").write_text(json.dumps(student.to_hf_dict(), indent=2))
    for name in ("vocab.txt", "tokenizer_config.json"):
        shutil.copyfile(tokenizer_dir / name, path / name)
    # the ids kept of the whole vocabulary: a pruned teacher's ids are already renumbered
    whole_ids = read_vocab_map(tokenizer_dir, len(read_vocab(tokenizer_dir / "vocab.txt")))
    if kept is not None:
        whole_ids = kept if whole_ids is None else whole_ids[kept]
    if whole_ids is not None:
        write_vocab_map(path, whole_ids)
    return path
