"""Google's original TF1 BERT checkpoints: `bert_config.json` + `bert_model.ckpt.*` + `vocab.txt`.

Also holds what the TF checkpoint formats share: finding the checkpoint prefix in a folder,
reading its tensors and config, and working out the architecture from tensor shapes when no
config says it.

Activation names: `BertConfig.hidden_act` uses Hugging Face's ("gelu" is the exact erf GELU,
"gelu_new" its tanh approximation). Google's `modeling.py` and Model Garden's encoders compute
"gelu" as the tanh approximation, so a Google `bert_config.json` saying "gelu" and a TF encoder
with no config are read as "gelu_new" (`GOOGLE_ACTIVATIONS`).
"""

from __future__ import annotations

import dataclasses
import json
import re
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tensorflow as tf

from bertfit.checkpoints.base import Checkpoint
from bertfit.checkpoints.names import (
    TF1_ALBERT_LAYER,
    TF1_IGNORED_PREFIXES,
    Source,
    google_table,
    tf1_family,
)
from bertfit.errors import CheckpointError, CheckpointWarning
from bertfit.model.config import BertConfig
from bertfit.text.wordpiece import read_tokenizer_config

CONFIG_NAMES = ("bert_config.json", "albert_config.json", "config.json")
OPTIMIZER_SLOTS = ("/adam_m", "/adam_v", "/Adam", "/Adam_1", "/.OPTIMIZER_SLOT/")
# The `CheckpointWarning` code of a config value assumed (no config file gives it).
CONFIG_ASSUMED = "model-config-assumed"


def find_checkpoint_prefix(path: Path) -> Path | None:
    """The TF checkpoint prefix (`.../bert_model.ckpt`) at `path`, a folder or a prefix."""
    if Path(f"{path}.index").is_file():
        return path
    if path.is_file() and path.suffix == ".index":
        return path.with_suffix("")
    if path.is_file() and re.search(r"\.data-\d+-of-\d+$", path.name):
        return path.with_name(path.name.split(".data-")[0])
    if not path.is_dir():
        return None
    latest = tf.train.latest_checkpoint(str(path)) if (path / "checkpoint").is_file() else None
    if latest and Path(f"{latest}.index").is_file():
        return Path(latest)
    indexes = sorted(path.glob("*.index"))
    preferred = [i for i in indexes if i.name.startswith("bert_model")]
    chosen = (preferred or indexes or [None])[0]
    return None if chosen is None else chosen.with_suffix("")


def list_checkpoint(prefix: Path) -> dict[str, list[int]]:
    """Stored name → shape, without reading the values."""
    try:
        return dict(tf.train.list_variables(str(prefix)))
    except (tf.errors.OpError, ValueError) as e:
        raise CheckpointError(
            f"{prefix}: cannot read the TF checkpoint index ({_first_line(e)}). The .index file is "
            "truncated or not a TF checkpoint; download or export it again."
        ) from e


def read_checkpoint_tensors(
    prefix: Path, keep: Callable[[str], bool] = lambda name: True
) -> dict[str, np.ndarray]:
    """The stored tensors whose names `keep` accepts; a missing or cut data file is an error."""
    try:
        reader = tf.train.load_checkpoint(str(prefix))
        return {
            name: reader.get_tensor(name)
            for name in reader.get_variable_to_shape_map()
            if keep(name)
        }
    except (tf.errors.OpError, ValueError, IndexError) as e:
        raise CheckpointError(
            f"{prefix}: the TF checkpoint cannot be read ({_first_line(e)}). Its .data-* file is "
            "missing or truncated (an interrupted download or copy?); fetch all of "
            f"{prefix.name}.index and {prefix.name}.data-* again."
        ) from e


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def is_optimizer_slot(name: str) -> bool:
    return any(slot in name for slot in OPTIMIZER_SLOTS)


# A Google `bert_config.json` / Model Garden activation name → Hugging Face's name for the same
# function (`modeling.py`'s and Model Garden's `gelu` are the tanh approximation).
GOOGLE_ACTIVATIONS = {"gelu": "gelu_new", "Text>gelu": "gelu_new", "swish": "silu"}
TF_DEFAULT_ACTIVATION = "gelu_new"  # what Google's and Model Garden's encoders use


def read_config(path: Path) -> BertConfig:
    """A config file next to a TF checkpoint or in a SavedModel's assets.

    A file that names its `model_type` was written by Hugging Face or by bertfit, and its
    `hidden_act` already uses Hugging Face's names. One without (Google's `bert_config.json`)
    uses `modeling.py`'s, where "gelu" is the tanh approximation.
    """
    config = BertConfig.from_json_file(path)
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        values = {}
    if isinstance(values, dict) and "model_type" not in values:
        act = GOOGLE_ACTIVATIONS.get(config.hidden_act, config.hidden_act)
        config = dataclasses.replace(config, hidden_act=act)
    return config


def find_config_file(*folders: Path) -> Path | None:
    for folder in folders:
        for name in CONFIG_NAMES:
            if (folder / name).is_file():
                return folder / name
    return None


def count_layers(names, pattern: str) -> int:
    found = {int(m.group(1)) for n in names if (m := re.search(pattern, n))}
    return max(found) + 1 if found else 0


def infer_config(
    shapes: dict[str, list[int]],
    table: dict[str, Source],
    num_layers: int,
    num_heads: int | None,
    where: Path,
    hidden_act: str = TF_DEFAULT_ACTIVATION,
) -> tuple[BertConfig, list[str]]:
    """The architecture from stored shapes; returns the config and notes about guesses made.

    No config says the activation, so it is that of the encoders these formats come from:
    Google's and Model Garden's tanh-approximated GELU, unless `hidden_act` says otherwise.
    """

    def shape(canonical: str) -> list[int]:
        source = table[canonical]
        name = next((n for n in source.names if n in shapes), None)
        if name is None:
            raise CheckpointError(
                f"{where}: no tensor {source.names[0]!r}, so this is not a complete BERT encoder "
                "(truncated, or a different architecture). Export the full encoder again."
            )
        return list(source.to_encoder(np.zeros(shapes[name], np.int8)).shape)

    vocab, width = shape("embeddings/word_embeddings")
    hidden = width
    if "embeddings/projection/kernel" in table:  # factorised embeddings: projected to hidden
        hidden = shape("embeddings/projection/kernel")[1]
    notes = []
    if num_heads is None:
        num_heads = max(1, hidden // 64)
        notes.append(
            f"no config file gives the number of attention heads; assumed head size 64 "
            f"({num_heads} heads), as in every Google BERT. Put a bert_config.json next "
            "to the checkpoint if that is wrong."
        )
    config = BertConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        intermediate_size=shape("layer_0/intermediate/kernel")[1],
        max_position_embeddings=shape("embeddings/position_embeddings")[0],
        type_vocab_size=shape("embeddings/token_type_embeddings")[0],
        hidden_act=hidden_act,
        embedding_size=width if width != hidden else None,
    )
    return config, notes


# ---- the families Google's and Model Garden's names hold besides BERT ----

# The layer count of each released ALBERT by hidden size (base, large, xlarge, xxlarge): one
# shared layer is stored, so only a config or the exported graph says how often it is applied.
ALBERT_LAYERS = {768: 12, 1024: 24, 2048: 24, 4096: 12}


def albert_layers_guess(hidden: int) -> tuple[int, str]:
    """The layer count of a released ALBERT of this width, and a note saying it was guessed."""
    layers = ALBERT_LAYERS.get(hidden, 12)
    return layers, (
        f"no config file gives ALBERT's number of layers (its one shared layer is stored once); "
        f"assumed {layers}, as in Google's released ALBERT of hidden size {hidden}. Put an "
        "albert_config.json next to the checkpoint if that is wrong."
    )


def config_family(config_file: Path | None) -> str | None:
    """The family a config file names: its `model_type` (bertfit's and Hugging Face's), or
    ALBERT for Google's `albert_config.json` (which has `num_hidden_groups`); None when it is
    a plain BERT config that does not say."""
    if config_file is None:
        return None
    try:
        values = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(values, dict):
        return None
    model_type = values.get("model_type")
    if model_type in ("albert", "electra", "bert"):
        return {"albert": "ALBERT", "electra": "ELECTRA", "bert": "BERT"}[model_type]
    if config_file.name == "albert_config.json" or {"num_hidden_groups", "inner_group_num"} & set(
        values
    ):
        groups, inner = values.get("num_hidden_groups", 1), values.get("inner_group_num", 1)
        if (groups, inner) != (1, 1):
            raise CheckpointError(
                f"{config_file}: this ALBERT has num_hidden_groups={groups}, inner_group_num="
                f"{inner}; bertfit loads ALBERTs with one shared layer (1, 1), as every "
                "released ALBERT has."
            )
        return "ALBERT"
    return None


def as_family(
    config: BertConfig, family: str, embedding_width: int, has_pooler: bool
) -> BertConfig:
    """A BERT config (read from Google's config file or inferred from shapes) as the family
    the stored names show: ALBERT shares one layer, ALBERT and ELECTRA project embeddings of
    `embedding_width` to the hidden size; the pooler is there when the checkpoint has one.
    A config that already names the family (bertfit's own) is kept as it is."""
    if family == "BERT" or config.model_type == family.lower():
        return config
    return dataclasses.replace(
        config,
        model_type=family.lower(),
        embedding_size=embedding_width if embedding_width != config.hidden_size else None,
        share_layers=family == "ALBERT",
        has_pooler=has_pooler,
    )


def vocab_in(*folders: Path) -> Path | None:
    for folder in folders:
        for candidate in (folder / "vocab.txt", folder / "assets" / "vocab.txt"):
            if candidate.is_file():
                return candidate
    return None


def casing_in(*folders: Path) -> bool | None:
    """`do_lower_case` from a `tokenizer_config.json` in `folders`; None when none says.

    Never guessed from a path: an uncased model under `cased_experiments/` is still uncased.
    With None, `load.check_vocab` lets the vocab decide (capitals in it mean cased).
    """
    for folder in folders:
        value = read_tokenizer_config(folder).get("lower_case")
        if value is not None:
            return bool(value)
    return None


def read_tf1(path: Path) -> Checkpoint:
    """Reads a Google TF1 BERT checkpoint folder (or checkpoint prefix)."""
    prefix = find_checkpoint_prefix(path)
    if prefix is None:
        raise CheckpointError(f"{path}: no TF checkpoint (*.index) found.")
    folder = prefix.parent
    google = read_google(prefix, prefix, folder, folder.parent)
    for note in google.notes:
        warnings.warn(CheckpointWarning(f"{prefix}: {note}", code=CONFIG_ASSUMED), stacklevel=2)
    return Checkpoint(
        format="tf1-checkpoint",
        path=prefix,
        config=google.config,
        tensors=google.tensors,
        table=google.table,
        vocab_file=vocab_in(folder),
        lower_case=casing_in(folder),
        tokenizer_dir=sentencepiece_dir(folder) if vocab_in(folder) is None else None,
        ignored_prefixes=TF1_IGNORED_PREFIXES + (google.prefix + "cls/",),
        family=google.family,
        notes=google.notes,
    )


def sentencepiece_dir(*folders: Path) -> Path | None:
    """A folder holding a SentencePiece model under a name bertfit's tokenizer loader knows
    (ALBERT's `spiece.model`); Google's ALBERT releases call theirs `30k-clean.model`, which is
    copied once into bertfit's cache as `spiece.model`."""
    from bertfit.text.loading import SENTENCEPIECE_FILES

    for folder in folders:
        if any((folder / name).is_file() for name in SENTENCEPIECE_FILES):
            return folder
    for folder in folders:
        models = sorted(folder.glob("*.model")) if folder.is_dir() else []
        if models:
            return staged_sentencepiece(models[0])
    return None


def staged_sentencepiece(model: Path) -> Path:
    """A cache folder with `model` as `spiece.model` (the name ALBERT's tokenizer loads)."""
    import hashlib

    from bertfit.cache import cache_root

    data = model.read_bytes()
    folder = cache_root() / "sentencepiece" / hashlib.sha256(data).hexdigest()[:16]
    if not (folder / "spiece.model").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".spiece.model.{id(data)}"
        partial.write_bytes(data)
        partial.replace(folder / "spiece.model")
    return folder


@dataclasses.dataclass
class GoogleCheckpoint:
    """What `read_google` found: the architecture, tensors, name table and family."""

    config: BertConfig
    tensors: dict[str, np.ndarray]
    table: dict[str, Source]
    prefix: str  # the scope the names start with ("bert/")
    family: str  # "BERT" or "ALBERT"
    notes: list[str]


def read_google(prefix: Path, where: Path, *config_folders: Path) -> GoogleCheckpoint:
    """A checkpoint with Google's `bert/...` names (TF1 checkpoints, TF1 Hub modules' variables)
    of a BERT or an ALBERT (google-research/albert, one shared layer): its config (from a config
    file in `config_folders`, else inferred, with notes), its tensors without optimizer slots,
    and the scope its names start with."""
    shapes = list_checkpoint(prefix)
    stored_prefix = _bert_prefix(shapes, where)
    family = tf1_family(shapes, stored_prefix)
    if family == "ALBERT" and any(
        n.startswith(stored_prefix + "encoder/transformer/")
        and not n.startswith(stored_prefix + TF1_ALBERT_LAYER)
        for n in shapes
    ):
        raise CheckpointError(
            f"{where}: this ALBERT has more than one layer group or inner group (names beyond "
            f"{stored_prefix}{TF1_ALBERT_LAYER}); bertfit loads ALBERTs with one shared layer, "
            "as every released ALBERT has."
        )
    config_file = find_config_file(*config_folders)
    config_family(config_file)  # refuses an ALBERT config with several layer groups
    notes: list[str] = []
    if family == "ALBERT":
        num_layers = 1
    else:
        num_layers = count_layers(shapes, re.escape(stored_prefix) + r"encoder/layer_(\d+)/")
    table = google_table(family, num_layers, stored_prefix)
    if config_file is not None:
        config = read_config(config_file)
    else:
        config, notes = infer_config(shapes, table, num_layers, None, where)
        if family == "ALBERT":
            layers, note = albert_layers_guess(config.hidden_size)
            config = dataclasses.replace(config, num_hidden_layers=layers)
            notes.append(note)
    word_width = shapes[stored_prefix + "embeddings/word_embeddings"][1]
    has_pooler = stored_prefix + "pooler/dense/kernel" in shapes
    config = as_family(config, family, word_width, has_pooler)
    if family == "BERT":
        table = google_table(family, config.num_hidden_layers, stored_prefix)
    tensors = read_checkpoint_tensors(prefix, lambda n: not is_optimizer_slot(n))
    return GoogleCheckpoint(config, tensors, table, stored_prefix, family, notes)


def _bert_prefix(shapes: dict, where: Path) -> str:
    """ "bert/" in Google's files; hub modules and fine-tuned models may add a scope before it."""
    for name in shapes:
        if name.endswith("bert/embeddings/word_embeddings"):
            return name[: -len("embeddings/word_embeddings")]
    raise CheckpointError(
        f"{where}: a TF checkpoint without bert/embeddings/word_embeddings, so not a Google BERT."
    )
