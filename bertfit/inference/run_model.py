"""A run's model as inference restores it (`restored_model`: its best or latest checkpoint,
LoRA folded in, on this process's Keras backend: TensorFlow's for `Classifier.from_run`, JAX's
for `inference.jax_classifier`), and what a loaded classifier knows of the run besides the
model (`run_metadata`). No TensorFlow here.
"""

from __future__ import annotations

from bertfit.config import check_positions, encoder_policy
from bertfit.data.buckets import saved_buckets
from bertfit.data.tasks import Task
from bertfit.model.chunked import ChunkedClassifier
from bertfit.model.classifier import BertClassifier
from bertfit.model.encoder import BertEncoder
from bertfit.model.int8 import INT8, quantize_base
from bertfit.model.lora import adapted_layers, enable_lora, merge_lora
from bertfit.runs.run_dir import RunDir
from bertfit.runs.weights import restore_model
from bertfit.text.lengths import WindowSpec


def restored_model(run_dir: RunDir, config, task: Task, which: str = "best"):
    """The run's classifier with the weights of its `which` checkpoint ("best" or "latest"),
    LoRA adapters folded in: a `BertClassifier`, or a `ChunkedClassifier` for a run of
    `--long-documents chunk`. Built on this process's Keras backend: TensorFlow's for
    `Classifier.from_run`, JAX's for `inference.jax_classifier` (the checkpoint is one format,
    `bertfit.runs.weights`)."""
    bert = run_dir.load_bert_config()
    check_positions(
        config.model.max_seq_length, bert.max_sequence_length, f"the encoder of {run_dir.shown}"
    )
    encoder = BertEncoder(bert, random_init=False, dtype=encoder_policy(config.model))
    encoder.use_attention(config.model.attention)
    model = BertClassifier(
        encoder,
        task.num_outputs,
        config.model.pooling,
        0.0,
        normalize_features=bool(config.model.normalize_features),  # saved runs before it: None
    )
    if WindowSpec.for_model(config.model) is not None:
        model = ChunkedClassifier(model, config.model.chunk_pooling)
    lora = config.model.lora_rank > 0  # the run's adapters, folded in once restored
    if lora:
        m = config.model
        if m.base_precision == INT8:  # the checkpoint holds int8 kernels and their scales
            quantize_base(adapted_layers(model).values())
        enable_lora(model, m.lora_rank, m.lora_alpha, m.lora_targets)
    restore_model(model, run_dir.checkpoint_path(which))
    if lora:
        merge_lora(model)
    return model


def run_metadata(config, task: Task) -> dict:
    """What a loaded classifier needs to know besides the graph."""
    data = config.data
    return {
        "task": task.to_dict(),
        "labels": list(task.labels),
        "pairs": data.text_pair_column is not None,
        "max_seq_length": config.model.max_seq_length,
        "buckets": list(saved_buckets(config.data.buckets, config.model.max_seq_length)),
        "model": config.model.name,
        "long_documents": _long_documents(config.model),
        "columns": {
            "text": data.text_column,
            "text_pair": data.text_pair_column,
            "label": data.label_column,
        },
    }


def _long_documents(model) -> dict:
    """How the model reads texts longer than its window: `{"mode": "truncate"}`, or for
    "chunk" the windows (`stride`, `max_chunks`) and their pooling."""
    windows = WindowSpec.for_model(model)
    if windows is None:
        return {"mode": model.long_documents}
    return {
        "mode": model.long_documents,
        "stride": windows.stride,
        "max_chunks": windows.max_chunks,
        "chunk_pooling": model.chunk_pooling,
    }
