"""`bertfit export --format hf`: a trained classifier as a Hugging Face model folder, for
transformers' `AutoModelForSequenceClassification` and `AutoTokenizer` (no custom code), and
the servers that load such folders (Text Embeddings Inference, vLLM); or, for a run no
transformers head computes, a sentence-transformers folder (below).

    OUT/
      config.json               the family's config, `architectures` its
                                `...ForSequenceClassification`, `id2label`/`label2id`,
                                `problem_type`, `label_thresholds` (multi-label) and `bertfit`
                                (the task, max_seq_length, pairs)
      model.safetensors         the encoder under the family's own names, and the head
      tokenizer.json            the run's tokenizer: its normalizer, model, [CLS]/[SEP] template,
                                padding, truncation to max_seq_length (longest first)
      tokenizer_config.json     `model_max_length` = the run's max_seq_length, special tokens

The logits are what bertfit's probabilities come from, calibration included: a temperature T
divides the classifier's weights and bias (W / T, b / T: exactly the logits / T bertfit divides),
so softmax (single-label) or a sigmoid per label (multi-label) of transformers' logits is
`bertfit predict`'s probabilities. A regression head gives the value in the training targets'
units (the standardisation folded in: W * std, b * std + mean). A multi-label model's
per-label decision thresholds are `config.json`'s `label_thresholds` (label name → threshold;
`model.config.label_thresholds` in transformers), what `bertfit predict` decides with.

The encoder's weights are written through the family's name table (`checkpoints.families`:
the one the loaders read with), the head in the place the family's transformers head holds it:

- BERT, ALBERT: the pooler (dense + tanh on [CLS]) and `classifier`, as bertfit's;
- RoBERTa, XLM-R, CamemBERT, MPNet: transformers' head is dense + tanh on [CLS] + `out_proj`,
  which is bertfit's pooler and head (`classifier.dense`, `classifier.out_proj`);
- DeBERTa-v3: transformers' `ContextPooler` on [CLS] with `pooler_hidden_act="linear"` and an
  identity matrix (exact), then `classifier`;
- ELECTRA (dense + GELU + `out_proj` on [CLS]), DistilBERT (`pre_classifier` + ReLU +
  `classifier` on [CLS]) and EuroBERT (dense + GELU + `classifier` on [CLS] or, for
  `--pooling mean`, on the tokens' mean: `classifier_pooling` "bos" or "mean"): an activation
  f with f(z) - f(-z) = z (GELU: z Φ(z) + z Φ(-z) = z; ReLU), so the dense layer's rows 2k and
  2k + 1 compute bertfit's k-th logit z and -z, and the last layer subtracts them. Exact, for
  a head of at most hidden_size / 2 outputs.

A run whose head no transformers head computes is written as a sentence-transformers folder
instead (`export.sentence_folder`; config.json's `bertfit.flavour` and `bertfit.why` say so):
a head on the pooled vector's direction (`--few-shot`'s, sentence-transformers' Normalize);
mean pooling where the family's head pools [CLS] (all but EuroBERT's); the families whose
transformers head puts a layer between [CLS] and the classifier that no weights make linear
(ModernBERT, mmBERT, Ettin: dense + GELU + LayerNorm, the LayerNorm rescaling each vector; GTE
and NomicBERT: a dense + tanh pooler, bounded), which bertfit's head (a linear layer) has not;
more than hidden_size / 2 outputs on ELECTRA, DistilBERT or EuroBERT. Refused before anything
is written, naming the reason: `--long-documents chunk` models, a model with unmerged LoRA
adapters or int8 kernels, a text-pair model that needs the sentence-transformers folder (its
`encode` reads single texts), and a GTE or NomicBERT whose settings transformers' model has
not (GTE's NTK-scaled rotary positions).

    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    model = AutoModelForSequenceClassification.from_pretrained("OUT")
    tokenizer = AutoTokenizer.from_pretrained("OUT")
    probabilities = model(**tokenizer(texts, padding=True, truncation=True,
                                      return_tensors="pt")).logits.softmax(-1)
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from bertfit import storage
from bertfit.checkpoints.families import SUPPORTED
from bertfit.checkpoints.hf import SAFETENSORS
from bertfit.checkpoints.names import HF_WORD_EMBEDDINGS
from bertfit.checkpoints.weights import read_weights
from bertfit.data.tasks import MULTI_LABEL, REGRESSION, Task
from bertfit.errors import ConfigError
from bertfit.export import portable
from bertfit.model.config import FAMILY_FIELDS, BertConfig
from bertfit.text.pruned import PrunedTokenizer

THRESHOLDS_KEY = "label_thresholds"  # config.json: label → multi-label decision threshold
PROBLEM_TYPES = {
    "single-label": "single_label_classification",
    MULTI_LABEL: "multi_label_classification",
    REGRESSION: "regression",
}


@dataclasses.dataclass(frozen=True)
class Head:
    """Where a family's transformers `...ForSequenceClassification` keeps bertfit's head.

    Args:
        pooler: True: bertfit's pooler (dense + tanh on [CLS]) is the head's first layer;
            False: bertfit's head reads [CLS] itself.
        pooler_key: the pooler's state-dict prefix in the task model, when it is not the
            encoder's own (RoBERTa's head: `classifier.dense`).
        classifier: the prefix of the last linear layer's `weight` and `bias`.
        identity: a dense layer before `classifier` that is set to the identity (DeBERTa's
            `ContextPooler`, its activation "linear" in `config`).
        signed: a dense layer before `classifier` whose activation f has f(z) - f(-z) = z
            (GELU, ReLU): its rows 2k and 2k + 1 compute bertfit's k-th logit and its negative,
            `classifier` their difference (`signed_head`).
        config: what the task model's config.json adds.
        poolings: bertfit's poolings the head computes → what config.json adds for each.
    """

    pooler: bool
    classifier: str = "classifier"
    pooler_key: str | None = None
    identity: str | None = None
    signed: str | None = None
    config: dict = dataclasses.field(default_factory=dict)
    poolings: dict = dataclasses.field(default_factory=lambda: {"cls": {}})


_ROBERTA = Head(pooler=True, pooler_key="classifier.dense", classifier="classifier.out_proj")
HEADS = {
    "bert": Head(pooler=True),
    "albert": Head(pooler=True),
    "roberta": _ROBERTA,
    "xlm-roberta": _ROBERTA,
    "camembert": _ROBERTA,
    "mpnet": _ROBERTA,
    "deberta-v2": Head(
        pooler=False,
        identity="pooler.dense",
        config={"pooler_hidden_act": "linear", "pooler_dropout": 0.0},
    ),
    "electra": Head(pooler=False, signed="classifier.dense", classifier="classifier.out_proj"),
    "distilbert": Head(pooler=False, signed="pre_classifier"),
    "eurobert": Head(
        pooler=False,
        signed="dense",
        poolings={"cls": {"classifier_pooling": "bos"}, "mean": {"classifier_pooling": "mean"}},
    ),
}
# What transformers' head of the other families computes between [CLS] and the classifier.
OTHER_HEADS = {
    "modernbert": "a dense layer, GELU and a LayerNorm (which rescales each vector)",
    "gte": "a dense + tanh pooler",
    "new": "a dense + tanh pooler",
    "nomic_bert": "a dense + tanh pooler",
}
FORMAT_NAME = "hf"


def export_hf(
    classifier, root: str | Path, version: int | None = None, quantize: str | None = None
) -> Path:
    """Writes `classifier` (from a run directory) as the Hugging Face folder `root` (absent or
    empty), whole or not at all; returns it. Refused, before anything is written, when
    transformers' head of its family cannot compute bertfit's (see the module docstring).

    Examples:
    >>> clf = bertfit.load_classifier("runs/sst")  # doctest: +SKIP
    >>> export_hf(clf, "exported/sst-hf")  # doctest: +SKIP
    PosixPath('exported/sst-hf')
    """
    if version is not None or quantize is not None:
        flag = "--version" if version is not None else "--quantize"
        raise ConfigError(
            f"{flag} is not for --format hf: its export is one folder of float32 weights "
            f"(OUT itself, as transformers loads it); leave {flag} out."
        )
    if storage.is_url(root):
        raise ConfigError(
            f"--format hf writes a local folder; {root} is a URL. Export to a local OUT and "
            "upload the folder."
        )
    root = Path(root)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ConfigError(f"{root} exists and is not an empty folder; pick a new OUT folder.")
    module = portable.check_portable(classifier, FORMAT_NAME)
    model = module.model
    _check_plain(model)
    head, why = task_head(model)
    from bertfit.export.onnx import tokenizer_file  # every kind, as --format onnx writes it

    tokenizer = tokenizer_file(portable.whole_tokenizer(module.tokenizer), module.max_seq_length)
    if head is not None:
        config = hf_config(model.encoder.config, head, module)
        tensors = state_dict(model, head, module.task)
        files = {}
    else:  # a sentence-transformers folder: the encoder as the base model, the head a Dense
        from bertfit.export.sentence_folder import FLAVOUR, sentence_files

        files = sentence_files(module, *calibrated_head(model, module.task), why)
        config = base_config(model.encoder.config) | label_fields(module)
        config["bertfit"] |= {"flavour": FLAVOUR, "why": why}
        tensors = encoder_tensors(model.encoder, prefix="")
    if isinstance(module.tokenizer, PrunedTokenizer):
        tensors, config = whole_vocabulary(tensors, config, module.tokenizer.new_ids)

    def write(folder: Path) -> None:
        from safetensors.numpy import save_file

        save_file(tensors, str(folder / SAFETENSORS), metadata={"format": "pt"})
        (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n", "utf-8")
        (folder / "tokenizer.json").write_text(tokenizer.to_str(pretty=True), "utf-8")
        tokenizer_config = _tokenizer_config(tokenizer, module.max_seq_length)
        (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
        for name, data in files.items():
            (folder / name).parent.mkdir(exist_ok=True)
            (folder / name).write_bytes(data)

    return portable.write_folder(root, write)


def _check_plain(model) -> None:
    """A `ConfigError` for weights no Hugging Face folder holds as they are."""
    named = model.encoder.named_variables()
    if any(name.endswith(("/lora_a", "/kernel_scale")) for name in named):
        raise ConfigError(
            "--format hf takes plain float weights; this model has unmerged LoRA adapters or "
            "int8 kernels. Load the run with bertfit.load_classifier (it merges them) and "
            "export that, or use `bertfit export --format hf --run RUN`."
        )


def task_head(model) -> tuple[Head | None, str]:
    """The family's `Head` when transformers' sequence-classification head computes the
    model's, else None and why not (the sentence-transformers folder holds it instead)."""
    config = model.encoder.config
    if model.normalize_features:
        return None, (
            "its head reads the pooled vector divided by its length (--few-shot), which no "
            "transformers sequence-classification head does"
        )
    head = HEADS.get(config.model_type)
    if head is not None and config.has_pooler and not head.pooler:
        return None, (
            f"this model's [CLS] goes through a pooler (dense + tanh) that transformers' "
            f"{config.model_type} sequence-classification head does not have"
        )
    if head is None or head.pooler != config.has_pooler:
        between = OTHER_HEADS.get(config.model_type, "a dense + tanh pooler")
        return None, (
            f"transformers' {config.model_type} sequence-classification head puts {between} "
            "between [CLS] and the classifier, which bertfit's head does not have"
        )
    if model.pooling not in head.poolings:
        return None, (
            f"{model.pooling} pooling: transformers' {config.model_type} "
            "sequence-classification head pools [CLS]"
        )
    if head.signed is not None and 2 * model.num_classes > config.hidden_size:
        return None, (
            f"{model.num_classes} outputs: transformers' {config.model_type} head computes each "
            f"from two of its {config.hidden_size} hidden units (at most hidden_size / 2)"
        )
    return head, ""


def whole_vocabulary(
    tensors: dict[str, np.ndarray], config: dict, new_ids: np.ndarray
) -> tuple[dict[str, np.ndarray], dict]:
    """A pruned vocabulary's model (`tensors`, `config`) over the whole vocabulary, which
    transformers' tokenizer gives and its model cannot renumber: id i's word embedding is the
    row of its new id `new_ids[i]` (an id not kept: the unknown token's), so every text gives
    the pruned model's outputs.

    Examples:
    >>> table = {"bert.embeddings.word_embeddings.weight": np.array([[0.0], [1.0], [2.0]])}
    >>> new_ids = np.array([0, 1, 1, 2, 1])  # ids 2 and 4 not kept: [UNK]'s new id, 1
    >>> tensors, config = whole_vocabulary(table, {"vocab_size": 3}, new_ids)
    >>> tensors["bert.embeddings.word_embeddings.weight"].ravel().tolist(), config
    ([0.0, 1.0, 1.0, 2.0, 1.0], {'vocab_size': 5})
    """
    name = next(name for name in tensors if name.endswith(HF_WORD_EMBEDDINGS))
    return {**tensors, name: tensors[name][new_ids]}, {**config, "vocab_size": len(new_ids)}


def flavour_note(folder: str | Path) -> str | None:
    """What `bertfit export --format hf` says of a sentence-transformers folder it wrote (None
    for a classifier folder)."""
    why = json.loads((Path(folder) / "config.json").read_text("utf-8"))["bertfit"].get("why")
    if why is None:
        return None
    return (
        f"wrote a sentence-transformers folder ({why}): SentenceTransformer(OUT).encode(texts) "
        "gives the calibrated logits (docs/exports.md)"
    )


def encoder_tensors(encoder, prefix: str) -> dict[str, np.ndarray]:
    """The encoder's tensors through its family's name table, each name after `prefix`."""
    family = SUPPORTED[encoder.config.model_type]
    weights = read_weights(encoder, family.table(encoder.config))
    tensors = {prefix + name: value for name, value in weights.items()}
    return {name: np.ascontiguousarray(value, np.float32) for name, value in tensors.items()}


def state_dict(model, head: Head, task: Task) -> dict[str, np.ndarray]:
    """The task model's tensors (float32, transformers' [out, in] layout): the encoder through
    its family's name table under the family's prefix, and the calibrated head."""
    encoder = model.encoder
    prefix = SUPPORTED[encoder.config.model_type].prefixes[0]
    tensors = encoder_tensors(encoder, prefix)
    if head.pooler_key is not None:  # the encoder's pooler is the head's first layer
        for part in ("weight", "bias"):
            tensors[f"{head.pooler_key}.{part}"] = tensors.pop(f"{prefix}pooler.dense.{part}")
    if head.identity is not None:
        hidden = encoder.config.hidden_size
        tensors[f"{head.identity}.weight"] = np.eye(hidden, dtype=np.float32)
        tensors[f"{head.identity}.bias"] = np.zeros(hidden, np.float32)
    kernel, bias = calibrated_head(model, task)
    if head.signed is not None:
        dense, dense_bias, kernel, bias = signed_head(kernel, bias, encoder.config.hidden_size)
        tensors[f"{head.signed}.weight"] = dense.T
        tensors[f"{head.signed}.bias"] = dense_bias
    tensors[f"{head.classifier}.weight"] = kernel.T
    tensors[f"{head.classifier}.bias"] = bias
    return {name: np.ascontiguousarray(value, np.float32) for name, value in tensors.items()}


def calibrated_head(model, task: Task) -> tuple[np.ndarray, np.ndarray]:
    """The head's kernel [hidden, outputs] and bias, float64, whose logits are bertfit's
    meaning's: divided by the calibration's temperatures, or for regression in the targets'
    units."""
    kernel = np.asarray(model.head.kernel.numpy(), np.float64)
    bias = np.asarray(model.head.bias.numpy(), np.float64)
    if task.kind == REGRESSION:
        return kernel * task.std, bias * task.std + task.mean
    if task.temperatures:
        temperatures = np.asarray(task.temperatures, np.float64)
        return kernel / temperatures, bias / temperatures
    return kernel, bias


def signed_head(kernel: np.ndarray, bias: np.ndarray, hidden: int) -> tuple[np.ndarray, ...]:
    """The linear head (`kernel` [hidden, outputs], `bias`) as two layers around an activation
    f with f(z) - f(-z) = z: the first's kernel [hidden, hidden] and bias give units 2k and
    2k + 1 the k-th logit z and -z (the others 0), the second's [hidden, outputs] and bias
    f(z) - f(-z).

    Examples:
    >>> dense, dense_bias, out, out_bias = signed_head(np.ones((4, 1)), np.array([0.5]), 4)
    >>> relu = lambda z: np.maximum(z, 0.0)
    >>> x = np.array([1.0, -2.0, 0.5, -3.0])
    >>> float((relu(x @ dense + dense_bias) @ out + out_bias)[0])  # x.sum() + 0.5
    -3.0
    """
    outputs = kernel.shape[1]
    dense = np.zeros((hidden, hidden), np.float64)
    dense_bias = np.zeros(hidden, np.float64)
    dense[:, 0 : 2 * outputs : 2], dense[:, 1 : 2 * outputs : 2] = kernel, -kernel
    dense_bias[0 : 2 * outputs : 2], dense_bias[1 : 2 * outputs : 2] = bias, -bias
    out = np.zeros((hidden, outputs), np.float64)
    out[2 * np.arange(outputs), np.arange(outputs)] = 1.0
    out[2 * np.arange(outputs) + 1, np.arange(outputs)] = -1.0
    return dense, dense_bias, out, np.zeros(outputs, np.float64)


def hf_config(config: BertConfig, head: Head, module) -> dict:
    """The task model's config.json: the encoder's architecture in the family's terms (the
    inverse of its `read_config`), the labels and the task."""
    family = SUPPORTED[config.model_type]
    return {
        **base_config(config),
        "architectures": [f"{family.hf_class}ForSequenceClassification"],
        **head.config,
        **head.poolings[module.model.pooling],
        **label_fields(module),
    }


def base_config(config: BertConfig) -> dict:
    """The family's base model's config.json (`...Model`): the encoder's architecture in the
    family's terms, the inverse of its `read_config`."""
    family = SUPPORTED[config.model_type]
    return {
        "architectures": [f"{family.hf_class}Model"],
        "model_type": config.model_type,
        **{k: v for k, v in config.to_dict().items() if k not in FAMILY_FIELDS},
        "pad_token_id": config.pad_token_id,
        **_family_fields(config),
    }


def label_fields(module) -> dict:
    """config.json's labels (`id2label`, `label2id`), `problem_type`, a multi-label model's
    `label_thresholds` and `bertfit` (the task, max_seq_length, pairs, what the logits are)."""
    task = module.task
    labels = ["value"] if task.kind == REGRESSION else list(task.labels)
    values = {
        "id2label": {str(i): label for i, label in enumerate(labels)},
        "label2id": {label: i for i, label in enumerate(labels)},
        "problem_type": PROBLEM_TYPES[task.kind],
    }
    if task.kind == MULTI_LABEL:
        values[THRESHOLDS_KEY] = dict(zip(task.labels, task.decision_thresholds, strict=True))
    values["bertfit"] = {
        "task": task.to_dict(),
        "max_seq_length": module.max_seq_length,
        "pairs": module.pairs,
        "logits": "value" if task.kind == REGRESSION else "calibrated logits",
    }
    return values


def _family_fields(config: BertConfig) -> dict:
    """The family's own config.json fields, as its `read_config` reads them."""
    if config.model_type == "albert":
        return {"embedding_size": config.embedding_size, "num_hidden_groups": 1}
    if config.model_type == "electra":
        return {"embedding_size": config.embedding_width}
    if config.model_type == "distilbert":
        return {
            "dim": config.hidden_size,
            "n_layers": config.num_hidden_layers,
            "n_heads": config.num_attention_heads,
            "hidden_dim": config.intermediate_size,
            "activation": config.hidden_act,
        }
    if config.model_type == "mpnet":
        return dict(config.variant)  # relative_attention_num_buckets
    if config.model_type == "eurobert":
        from bertfit.model.eurobert import EuroBertSettings

        settings = EuroBertSettings(**config.variant)
        return {
            "num_key_value_heads": settings.num_key_value_heads,
            "rope_parameters": {"rope_theta": settings.rope_theta, "rope_type": "default"},
            "attention_bias": settings.attention_bias,
            "mlp_bias": settings.mlp_bias,
            "rms_norm_eps": config.layer_norm_eps,
        }
    if config.model_type == "modernbert":
        from bertfit.model.modernbert import ModernBertSettings

        settings = ModernBertSettings(**config.variant)
        every, layers = settings.global_attn_every_n_layers, config.num_hidden_layers
        return {
            "hidden_activation": config.hidden_act,
            "norm_eps": config.layer_norm_eps,
            "norm_bias": settings.norm_bias,
            "attention_bias": settings.attention_bias,
            "mlp_bias": settings.mlp_bias,
            "mlp_dropout": settings.mlp_dropout,
            "embedding_dropout": config.hidden_dropout_prob,
            "attention_dropout": config.attention_probs_dropout_prob,
            "local_attention": settings.local_attention,
            "layer_types": [
                "sliding_attention" if i % every else "full_attention" for i in range(layers)
            ],
            "rope_parameters": {
                "full_attention": {
                    "rope_type": "default",
                    "rope_theta": settings.global_rope_theta,
                },
                "sliding_attention": {
                    "rope_type": "default",
                    "rope_theta": settings.local_rope_theta,
                },
            },
            "max_position_embeddings": settings.max_sequence_length,
            "classifier_pooling": settings.classifier_pooling,
            # transformers' defaults are ModernBERT's own tokenizer's ids; the tokenizer
            # files hold the run's.
            **dict.fromkeys(("bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id")),
        }
    if config.model_type in ("gte", "nomic_bert"):
        return _rotary_fields(config)
    if config.model_type == "deberta-v2":
        from bertfit.model.deberta import DebertaSettings

        settings = DebertaSettings(**config.variant)
        return {
            "relative_attention": settings.relative_attention,
            "position_buckets": settings.position_buckets,
            "max_relative_positions": settings.max_relative_positions,
            "pos_att_type": list(settings.pos_att_type),
            "share_att_key": settings.share_att_key,
            "norm_rel_ebd": "layer_norm" if settings.norm_rel_ebd else "none",
            "conv_kernel_size": settings.conv_kernel_size,
            "conv_act": settings.conv_act,
            "position_biased_input": config.absolute_positions,
            "pooler_hidden_size": config.hidden_size,
        }
    return {}


def _rotary_fields(config: BertConfig) -> dict:
    """GTE's and NomicBERT's config.json fields in transformers 5's spelling, or a
    `ConfigError` for a setting transformers' `GteModel` or `NomicBertModel` does not have."""
    from bertfit.model.rotary_glu import RotaryGluSettings

    settings = RotaryGluSettings(**config.variant)
    if config.model_type == "gte":
        standard = dataclasses.replace(
            RotaryGluSettings(), rope_theta=settings.rope_theta, mlp_dropout=settings.mlp_dropout
        )
    else:
        from bertfit.checkpoints.families.nomic_bert import read_config

        standard = dataclasses.replace(
            RotaryGluSettings(**read_config({}).variant), rope_theta=settings.rope_theta
        )
    if settings != standard:
        different = {
            field.name: getattr(settings, field.name)
            for field in dataclasses.fields(settings)
            if getattr(settings, field.name) != getattr(standard, field.name)
        }
        raise ConfigError(
            f"--format hf cannot hold this {config.model_type} model: its {different} are "
            f"not in transformers' {config.model_type} model (which has {config.model_type}'s "
            "released settings). Export it with --format onnx or saved-model."
        )
    return {"rope_parameters": {"rope_type": "default", "rope_theta": settings.rope_theta}}


def _tokenizer_config(tokenizer, max_seq_length: int) -> dict:
    """tokenizer_config.json: transformers' generic tokenizer over tokenizer.json, its longest
    input the run's, and the special tokens by role."""
    from bertfit.text.tokenizer_json import template

    spec = json.loads(tokenizer.to_str())
    roles = {k: v for k, v in template(spec.get("post_processor")).items() if k.endswith("_token")}
    pad = (spec.get("padding") or {}).get("pad_token")
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": max_seq_length,
        **roles,
        **({"pad_token": pad} if pad else {}),
    }
