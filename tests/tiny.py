"""Tiny random BERTs and vocabularies for fast tests (no MiniLM needed)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import tensorflow as tf

from bertfit.model.config import BertConfig
from bertfit.model.encoder import BertEncoder

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = (
    "the a an film movie good bad great awful boring fun plot actor story is was not "
    "very , . ! ? ' and but it this that of to in"
).split()
PIECES = ["##s", "##ing", "##ed", "##ly", "##y"]
TINY_VOCAB = SPECIAL + WORDS + PIECES

TINY_CONFIG = BertConfig(
    vocab_size=len(TINY_VOCAB),
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


def tiny_encoder(config: BertConfig = TINY_CONFIG, seed: int = 0) -> BertEncoder:
    """An encoder whose every weight is random, biases and LayerNorms included."""
    encoder = BertEncoder(config)
    rng = np.random.default_rng(seed)
    for variable in encoder.weights:
        variable.assign(rng.normal(0, 0.2, variable.shape).astype("float32"))
    return encoder


def write_vocab(path: Path, vocab=TINY_VOCAB) -> Path:
    file = path / "vocab.txt"
    file.write_text("".join(f"{token}\n" for token in vocab), encoding="utf-8")
    return file


def write_tiny_hf(
    path: Path, config: BertConfig = TINY_CONFIG, prefix: str = "", trainable: bool = False
) -> BertEncoder:
    """Writes a random tiny BERT as a HF directory with the real safetensors writer.

    By default every weight is random (a strict loading test); `trainable` keeps BERT's own
    initialisation (LayerNorm at 1, biases at 0), which trains well from scratch.
    """
    from safetensors.numpy import save_file

    from bertfit.checkpoints.names import hf_table
    from bertfit.checkpoints.weights import read_weights

    encoder = BertEncoder(config) if trainable else tiny_encoder(config)
    tensors = read_weights(encoder, hf_table(config.num_hidden_layers))
    save_file(
        {prefix + k: np.ascontiguousarray(v) for k, v in tensors.items()},
        str(path / "model.safetensors"),
    )
    (path / "config.json").write_text(json.dumps(config.to_hf_dict()))
    (path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    write_vocab(path)
    return encoder


def tiny_inputs(batch: int = 3, seq: int = 8, seed: int = 1) -> dict[str, tf.Tensor]:
    """Random ids with right padding of varying length and two segments."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, len(TINY_VOCAB), (batch, seq))
    lengths = np.linspace(seq, 3, batch).astype(int)
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype("int32")
    ids[:, 0] = 2
    types = ((np.arange(seq)[None, :] >= lengths[:, None] // 2) & (mask == 1)).astype("int32")
    return {
        "input_word_ids": tf.constant(ids * mask, tf.int32),
        "input_mask": tf.constant(mask),
        "input_type_ids": tf.constant(types),
    }


# ---- writers for every checkpoint format, each with the tool that writes it ----

HUB_MODULE_CONFIG = BertConfig(  # head size 64, as in Google's modules (which ship no config)
    vocab_size=len(TINY_VOCAB),
    hidden_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=256,
    max_position_embeddings=64,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


def _google_weights(encoder: BertEncoder) -> dict[str, np.ndarray]:
    from bertfit.checkpoints.names import tf1_table
    from bertfit.checkpoints.weights import read_weights

    return read_weights(encoder, tf1_table(encoder.config.num_hidden_layers))


def write_tiny_tf1(path: Path, config: BertConfig = TINY_CONFIG) -> BertEncoder:
    """Google's layout: `tf.compat.v1.train.Saver` over `bert/...` variables in a `tf.Graph`."""
    encoder = tiny_encoder(config)
    weights = _google_weights(encoder)
    with tf.Graph().as_default():
        for name, value in weights.items():
            tf.compat.v1.get_variable(name, initializer=tf.constant(value))
        tf.compat.v1.get_variable("cls/predictions/output_bias", initializer=tf.zeros([3]))
        tf.compat.v1.train.get_or_create_global_step()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, str(path / "bert_model.ckpt"), write_meta_graph=False)
    (path / "bert_config.json").write_text(json.dumps(config.to_dict()))
    write_vocab(path)
    return encoder


def _nested(weights: dict[str, np.ndarray]) -> tf.Module:
    """Objects whose attribute paths are the stored names (a list index becomes a dict key)."""
    root: dict = {}
    for name, value in weights.items():
        *parents, leaf = name.split("/")
        node = root
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = tf.Variable(value)
    module = tf.Module()
    for key, value in root.items():
        setattr(module, key, value)
    return module


def write_tiny_tf2(path: Path, config: BertConfig = TINY_CONFIG) -> BertEncoder:
    """`tf.train.Checkpoint(encoder=...)` over objects laid out like Model Garden's encoder
    (no config file, so its GELU is Model Garden's: the tanh approximation)."""
    from bertfit.checkpoints.names import tf2_checkpoint_table
    from bertfit.checkpoints.weights import read_weights

    encoder = tiny_encoder(dataclasses.replace(config, hidden_act="gelu_new"))
    table = tf2_checkpoint_table(config.num_hidden_layers, config.num_attention_heads)
    checkpoint = tf.train.Checkpoint(encoder=_nested(read_weights(encoder, table)))
    checkpoint.write(str(path / "bert_model.ckpt"))
    write_vocab(path)
    return encoder


def write_tiny_savedmodel(
    path: Path, config: BertConfig = TINY_CONFIG, signature_only: bool = False
) -> BertEncoder:
    """`tf.saved_model.save`: a reusable TF Hub-style encoder, or one with signatures only."""
    from bertfit.checkpoints.hub_export import HubBertEncoder, write_hub_encoder

    encoder = tiny_encoder(config)
    if not signature_only:
        write_hub_encoder(encoder, path, vocab_file=None, lower_case=True)
        write_vocab(path / "assets")
        return encoder
    weights = {k: v.numpy() for k, v in encoder.named_variables().items()}
    root = tf.Module()
    root.model = HubBertEncoder(config, weights)
    specs = [
        tf.TensorSpec([None, None], tf.int32, name=n)
        for n in ("input_word_ids", "input_mask", "input_type_ids")
    ]

    @tf.function(input_signature=specs)
    def serve(input_word_ids, input_mask, input_type_ids):
        out = root.model.forward(
            {
                "input_word_ids": input_word_ids,
                "input_mask": input_mask,
                "input_type_ids": input_type_ids,
            }
        )
        return {"pooled_output": out["pooled_output"], "sequence_output": out["sequence_output"]}

    tf.saved_model.save(root, str(path), signatures={"serving_default": serve})
    write_vocab(path / "assets")
    return encoder


class _Unnamed(tf.Module):
    """A non-BERT reusable SavedModel: variables with names bertfit cannot map."""

    variables = None
    trainable_variables = None

    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(3)
        self.table = tf.Variable(
            rng.normal(size=(len(TINY_VOCAB), 8)).astype("float32"), name="lookup"
        )
        self.dense = tf.Variable(rng.normal(size=(8, 8)).astype("float32"), name="mix")
        self.variables = [self.table, self.dense]
        self.trainable_variables = [self.table, self.dense]

    @tf.function
    def __call__(self, inputs, training=False):
        x = tf.tanh(tf.gather(self.table, inputs["input_word_ids"]) @ self.dense)
        x *= tf.cast(inputs["input_mask"], tf.float32)[..., tf.newaxis]
        return {"sequence_output": x, "pooled_output": x[:, 0]}


def write_opaque_savedmodel(path: Path) -> tf.Module:
    module = _Unnamed()
    specs = {
        n: tf.TensorSpec([None, None], tf.int32)
        for n in ("input_word_ids", "input_mask", "input_type_ids")
    }
    for training in (False, True):
        module.__call__.get_concrete_function(specs, training=training)
    tf.saved_model.save(module, str(path))
    write_vocab(path / "assets")
    return module


def write_tiny_hub_module(
    path: Path, config: BertConfig = HUB_MODULE_CONFIG, lower_case: bool = True
) -> BertEncoder:
    """A TF1 Hub module as `hub.Module.export` lays it out: a TF1 SavedModel (graphs tagged {}
    and {"train"}, `bert/...` variables, `assets/vocab.txt`, `tokens` and `tokenization_info`
    signatures) plus `tfhub_module.pb` (a `ModuleDef` with format FORMAT_V3). Google built its
    modules with `modeling.py`, whose GELU is the tanh approximation."""
    encoder = tiny_encoder(dataclasses.replace(config, hidden_act="gelu_new"))
    weights = _google_weights(encoder)
    staging = path.parent / (path.name + "_vocab")
    staging.mkdir(parents=True, exist_ok=True)
    vocab = write_vocab(staging)
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        variables = {n: v1.get_variable(n, initializer=tf.constant(w)) for n, w in weights.items()}
        ids = v1.placeholder(tf.int32, [None, None], name="input_ids")
        mask = v1.placeholder(tf.int32, [None, None], name="input_mask")
        segments = v1.placeholder(tf.int32, [None, None], name="segment_ids")
        first = tf.gather(variables["bert/embeddings/word_embeddings"], ids[:, 0])
        pooled = tf.tanh(
            first @ variables["bert/pooler/dense/kernel"] + variables["bert/pooler/dense/bias"]
        )
        sequence = (
            tf.gather(variables["bert/embeddings/word_embeddings"], ids)
            * tf.cast(mask + 0 * segments, tf.float32)[..., None]
        )
        vocab_asset = tf.constant(str(vocab))
        v1.add_to_collection(v1.GraphKeys.ASSET_FILEPATHS, vocab_asset)
        build = v1.saved_model.utils.build_tensor_info
        tokens = v1.saved_model.signature_def_utils.build_signature_def(
            {"input_ids": build(ids), "input_mask": build(mask), "segment_ids": build(segments)},
            {"pooled_output": build(pooled), "sequence_output": build(sequence)},
            "tokens",
        )
        info = v1.saved_model.signature_def_utils.build_signature_def(
            {},
            {"vocab_file": build(vocab_asset), "do_lower_case": build(tf.constant(lower_case))},
            "tokenization_info",
        )
        builder = v1.saved_model.Builder(str(path))
        with v1.Session() as session:
            session.run(v1.global_variables_initializer())
            signatures = {"tokens": tokens, "tokenization_info": info}
            builder.add_meta_graph_and_variables(
                session,
                [],
                signature_def_map=signatures,
                assets_collection=v1.get_collection(v1.GraphKeys.ASSET_FILEPATHS),
            )
            builder.add_meta_graph(["train"], signature_def_map=signatures)
        builder.save()
    (path / "tfhub_module.pb").write_bytes(b"\x08\x03")  # ModuleDef{format: FORMAT_V3}
    return encoder


def write_tiny_torch_bin(path: Path, config: BertConfig = TINY_CONFIG) -> BertEncoder:
    """A HF directory whose weights are a `torch.save` state dict (`pytorch_model.bin`)."""
    import torch

    from bertfit.checkpoints.names import hf_table
    from bertfit.checkpoints.weights import read_weights

    encoder = tiny_encoder(config)
    tensors = read_weights(encoder, hf_table(config.num_hidden_layers))
    torch.save(
        {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in tensors.items()},
        str(path / "pytorch_model.bin"),
    )
    (path / "config.json").write_text(json.dumps(config.to_hf_dict()))
    write_vocab(path)
    return encoder


POSITIVE = ["good", "great", "fun"]
NEGATIVE = ["bad", "awful", "boring"]
FILLER = ["the", "film", "movie", "plot", "story", "actor", "was", "is", "very", "and", "it"]


def sentiment_rows(n: int, seed: int = 0, labels=("neg", "pos")) -> list[tuple[str, str]]:
    """A separable toy task in the tiny vocabulary: the label is the polarity word's class."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        label = i % 2
        word = rng.choice(POSITIVE if label else NEGATIVE)
        filler = list(rng.choice(FILLER, size=int(rng.integers(1, 12))))
        filler.insert(int(rng.integers(0, len(filler) + 1)), str(word))
        rows.append((" ".join(filler), labels[label]))
    return rows


def write_csv(path: Path, rows, header=("text", "label")) -> Path:
    import csv

    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def tagged_rows(n: int, seed: int = 0) -> list[tuple[str, list[str]]]:
    """A separable multi-label toy task: "pos" when a positive word is in the text, "neg" for a
    negative one, "plot" for the word plot; a row has zero to three labels."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        words = list(
            rng.choice(["the", "film", "was", "very", "and", "it"], size=int(rng.integers(1, 6)))
        )
        labels = []
        for label, vocabulary in (("pos", POSITIVE), ("neg", NEGATIVE), ("plot", ["plot"])):
            if rng.random() < 0.5:
                words.insert(int(rng.integers(0, len(words) + 1)), str(rng.choice(vocabulary)))
                labels.append(label)
        rows.append((" ".join(words), labels))
    return rows


def scored_rows(n: int, seed: int = 0) -> list[tuple[str, float]]:
    """A learnable regression toy task: the target is (positive words - negative words) + 0.5."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        good, bad = int(rng.integers(0, 3)), int(rng.integers(0, 3))
        words = list(rng.choice(FILLER, size=int(rng.integers(1, 5))))
        words += list(rng.choice(POSITIVE, size=good)) + list(rng.choice(NEGATIVE, size=bad))
        rng.shuffle(words)
        rows.append((" ".join(map(str, words)), good - bad + 0.5))
    return rows


def write_jsonl(path: Path, rows, keys=("text", "label")) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(dict(zip(keys, row, strict=True))) + "\n")
    return path


# ---- command lines ----

# --no-report: drawing report.html imports matplotlib and takes ~2 s of a 2-core CPU, as much
# as training a tiny model; the tests of the report pass `no_report=None` to draw it.
TRAIN_FLAGS = {
    "max_seq_length": 16,
    "batch_size": 8,
    "epochs": 1,
    "quiet": True,
    "no_report": True,
}


def train_args(
    model, train, output=None, *extra: str, command: str | None = "train", **flags
) -> list[str]:
    """`bertfit train` arguments on a tiny model: `--model`, `--train`, `--output-dir` when
    `output` is given, then `flags` over the defaults `TRAIN_FLAGS` (max_seq_length 16,
    batch_size 8, epochs 1, quiet, no report), then `extra` as given (last, so they win).

    A flag's name is the option with `_` for `-`: True is a bare switch (`quiet=True` is
    `--quiet`), None leaves it out (`epochs=None`: bertfit's default), anything else is its
    value (`jit_compile="false"`, `buckets="8,16"`). `command` is the subcommand first in the
    list (`"check"` takes the same flags), or None for none.
    """
    args = [command] if command else []
    args += ["--model", str(model), "--train", str(train)]
    if output is not None:
        args += ["--output-dir", str(output)]
    for name, value in {**TRAIN_FLAGS, **flags}.items():
        if value is False:
            raise ValueError(f"{name}=False: use None to leave a flag out, or a string value")
        if value is not None:
            flag = "--" + name.replace("_", "-")
            args += [flag] if value is True else [flag, str(value)]
    return [*args, *extra]
