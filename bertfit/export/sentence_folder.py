"""The sentence-transformers flavour of `bertfit export --format hf`: for a run whose head no
transformers `...ForSequenceClassification` computes (mean pooling where the family's head
pools [CLS]; ModernBERT's, GTE's and NomicBERT's heads, which put a nonlinear layer after
[CLS]), a folder that `sentence_transformers.SentenceTransformer` loads with no custom code and
whose `encode` gives bertfit's calibrated logits:

    OUT/
      config.json, model.safetensors       the encoder as the family's base `AutoModel`
      tokenizer.json, tokenizer_config.json the run's tokenizer (as the classifier folder's)
      modules.json                          Transformer → Pooling → Dense
      sentence_bert_config.json             max_seq_length: the run's
      config_sentence_transformers.json     no prompts, no similarity
      1_Pooling/config.json                 "cls" (the first token) or "mean" (over the
                                            attention mask, [CLS] and [SEP] included: bertfit's)
      2_Dense/                              bertfit's head, calibration folded in
                                            (`hf.calibrated_head`), activation Identity

The labels, thresholds and task are in config.json, as in the classifier folder.
"""

from __future__ import annotations

import json

import numpy as np

from bertfit.errors import ConfigError

IDENTITY = "torch.nn.modules.linear.Identity"
FLAVOUR = "sentence-transformers"


def sentence_files(module, kernel: np.ndarray, bias: np.ndarray, why: str) -> dict[str, bytes]:
    """The folder's sentence-transformers files (path → contents) for `module` whose head is
    `kernel` [hidden, outputs] and `bias`, or a `ConfigError` when sentence-transformers cannot
    hold it; `why` says why the classifier folder cannot."""
    from safetensors.numpy import save

    if module.pairs:
        raise ConfigError(
            f"--format hf cannot hold this text-pair model: {why}, and the sentence-transformers "
            "folder written instead reads single texts. Export it with --format onnx or "
            "saved-model."
        )
    model = module.model
    hidden = model.encoder.config.hidden_size
    if model.pooling == "cls" and model.encoder.pooler is not None:
        raise ConfigError(
            f"--format hf cannot hold this {model.encoder.config.model_type} model: {why}, "
            "and the family's base model (the sentence-transformers folder's) has no pooler "
            "either. Export it with --format onnx or saved-model."
        )
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {
            "idx": 1,
            "name": "1",
            "path": "1_Pooling",
            "type": "sentence_transformers.models.Pooling",
        },
    ]
    pooling = {
        "word_embedding_dimension": hidden,
        "pooling_mode_cls_token": model.pooling == "cls",
        "pooling_mode_mean_tokens": model.pooling == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False,
        "include_prompt": True,
    }
    files = {
        "sentence_bert_config.json": _json(
            {"max_seq_length": module.max_seq_length, "do_lower_case": False}
        ),
        "config_sentence_transformers.json": _json(
            {"prompts": {}, "default_prompt_name": None, "similarity_fn_name": None}
        ),
        "1_Pooling/config.json": _json(pooling),
    }
    modules.append(
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
    )
    dense = {
        "in_features": hidden,
        "out_features": kernel.shape[1],
        "bias": True,
        "activation_function": IDENTITY,
    }
    tensors = {"linear.weight": kernel.T, "linear.bias": bias}
    tensors = {k: np.ascontiguousarray(v, np.float32) for k, v in tensors.items()}
    files["2_Dense/config.json"] = _json(dense)
    files["2_Dense/model.safetensors"] = save(tensors, metadata={"format": "pt"})
    files["modules.json"] = _json(modules)
    return files


def _json(value) -> bytes:
    return (json.dumps(value, indent=2) + "\n").encode("utf-8")
