"""The sentence-transformers flavour of `bertfit export --format hf`: for a run whose head no
transformers `...ForSequenceClassification` computes (mean pooling where the family's head
pools [CLS]; ModernBERT's, GTE's and NomicBERT's heads, which put a nonlinear layer after
[CLS]), a folder that `sentence_transformers.SentenceTransformer` loads with no custom code and
whose `encode` gives bertfit's calibrated logits:

    OUT/
      config.json, model.safetensors       the encoder as the family's base `AutoModel`
      tokenizer.json, tokenizer_config.json the run's tokenizer (as the classifier folder's)
      modules.json                          Transformer → Pooling → (Normalize) → Dense
      sentence_bert_config.json             max_seq_length: the run's
      config_sentence_transformers.json     no prompts, no similarity
      1_Pooling/config.json                 "cls" (the first token) or "mean" (over the
                                            attention mask, [CLS] and [SEP] included: bertfit's)
      2_Normalize                           (no files) for a head on the pooled vector's
                                            direction (`--few-shot`'s), which it reads
      2_Dense/ or 3_Dense/                  bertfit's head, calibration folded in
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
    modules = [_module(0, "", "Transformer"), _module(1, "1_Pooling", "Pooling")]
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
    if model.normalize_features:
        modules.append(_module(2, "2_Normalize", "Normalize"))
    dense = f"{len(modules)}_Dense"
    modules.append(_module(len(modules), dense, "Dense"))
    dense_config = {
        "in_features": hidden,
        "out_features": kernel.shape[1],
        "bias": True,
        "activation_function": IDENTITY,
    }
    tensors = {"linear.weight": kernel.T, "linear.bias": bias}
    tensors = {k: np.ascontiguousarray(v, np.float32) for k, v in tensors.items()}
    files[f"{dense}/config.json"] = _json(dense_config)
    files[f"{dense}/model.safetensors"] = save(tensors, metadata={"format": "pt"})
    files["modules.json"] = _json(modules)
    return files


def _module(index: int, path: str, kind: str) -> dict:
    """modules.json's entry of sentence-transformers' module `kind` at `path`."""
    return {
        "idx": index,
        "name": str(index),
        "path": path,
        "type": f"sentence_transformers.models.{kind}",
    }


def _json(value) -> bytes:
    return (json.dumps(value, indent=2) + "\n").encode("utf-8")
