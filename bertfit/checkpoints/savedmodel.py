"""TF2 SavedModels in the TF Hub BERT style: reusable, signature-only, or preprocessing.

A reusable SavedModel (`trainable_variables` and a `__call__`) whose variable names identify a
BERT is read into the native encoder, so it fine-tunes under any strategy and with XLA. Other
reusable SavedModels are wrapped whole as `SavedModelEncoder`, a Keras 3 layer whose variables
really train. A signature-only SavedModel exposes no trainable variables: it is refused for
training and offered for frozen feature extraction.

What the SavedModel stores decides the rest, never its path:
- bertfit's own `convert --to tf-hub` keeps the encoder's config (`assets/bert_config.json`,
  with its `model_type`) and casing (`assets/tokenizer_config.json`), read back unchanged.
- Model Garden's `export_tfhub` keeps no config: the architecture comes from the variables'
  shapes and the activation is its tanh-approximated GELU (unless its Keras metadata names
  another); the casing is the root's `do_lower_case` variable and the vocab its `vocab_file` asset
  (or, for ALBERT, its `sp_model_file` SentencePiece model).
- The family comes from the variable names (`names.tf2_family`): an `AlbertEncoder` (one shared
  layer, `transformer/...`; its layer count is the length of `__call__`'s `encoder_outputs`),
  a `BertEncoder` with an `embedding_projection` (TF Hub's ELECTRA), or BERT.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2, trackable_object_graph_pb2

from bertfit.checkpoints.base import Checkpoint, OpaqueCheckpoint
from bertfit.checkpoints.formats import (
    MODULE_FILE,
    PREPROCESSING,
    REUSABLE,
    SIGNATURE_ONLY,
    TF1_SAVEDMODEL,
)
from bertfit.checkpoints.names import (
    TF2_FIRST_QUERY,
    TF2_POOLER,
    TF2_SHARED_QUERY,
    google_table,
    identify,
    tf1_family,
    tf2_encoder_scope,
    tf2_family,
    tf2_variable_table,
)
from bertfit.checkpoints.tf1 import (
    TF_DEFAULT_ACTIVATION,
    albert_layers_guess,
    as_family,
    casing_in,
    config_family,
    count_layers,
    find_config_file,
    infer_config,
    read_checkpoint_tensors,
    read_config,
    staged_sentencepiece,
    vocab_in,
)
from bertfit.errors import CheckpointError
from bertfit.model.config import BertConfig
from bertfit.model.inputs import INPUT_NAMES, normalize_inputs


@dataclasses.dataclass
class SavedVariable:
    name: str  # tf.Variable.name without ":0"
    shape: tuple[int, ...]
    trainable: bool
    key: str | None  # its key in variables/variables


@dataclasses.dataclass
class SavedModelInfo:
    """What `saved_model.pb` says, read without loading (and so without running) the model."""

    kind: str  # REUSABLE, SIGNATURE_ONLY, TF1_SAVEDMODEL or PREPROCESSING
    tf1: bool  # a TF1 SavedModel (no object graph)
    attributes: list[str]  # the root object's children: __call__, variables, ...
    num_trainable: int  # entries of the root's trainable_variables
    signatures: dict[str, dict]  # name → {"inputs": {name: dtype}, "outputs": {...}}
    variables: list[SavedVariable]
    # Model Garden's `export_tfhub` puts these on the root object: a `do_lower_case` variable
    # and the `vocab_file` asset (its file name under assets/).
    lower_case: bool | None = None
    vocab_asset: str | None = None
    # ALBERT's exports carry an `sp_model_file` asset (a SentencePiece model) instead.
    sp_model_asset: str | None = None
    # How many tensors `__call__` returns as `encoder_outputs` (one per layer), from its saved
    # output signature: the layer count of an ALBERT, whose one layer is stored once.
    num_encoder_outputs: int | None = None


def tf1_module_error(path: Path) -> CheckpointError:
    """For places that need a TF2 SavedModel (the opaque wrapper, hub.KerasLayer)."""
    return CheckpointError(
        f"{path} is a TF1 Hub module ({MODULE_FILE} + a TF1 graph), not a TF2 SavedModel. TF2 "
        "cannot fine-tune TF1-format modules: hub.KerasLayer loads it with no trainable "
        "variables. bertfit does instead: bertfit.load_encoder(path) reads the module's variables "
        "into the native encoder, which fine-tunes; or convert it once with "
        f"`bertfit convert {path} OUT --to tf-hub` to get a reusable TF2 SavedModel."
    )


def read_proto(path: Path) -> saved_model_pb2.SavedModel:
    proto = saved_model_pb2.SavedModel()
    try:
        proto.ParseFromString((path / "saved_model.pb").read_bytes())
    except Exception as e:  # protobuf raises its own DecodeError
        raise CheckpointError(
            f"{path / 'saved_model.pb'}: cannot be parsed ({e}). The file is truncated or not a "
            "SavedModel; export or download it again."
        ) from e
    if not proto.meta_graphs:
        raise CheckpointError(f"{path}: saved_model.pb holds no graph; export it again.")
    return proto


def _dtype(enum: int) -> str:
    return tf.dtypes.as_dtype(enum).name


def signatures_of(meta_graph) -> dict[str, dict]:
    return {
        name: {
            "inputs": {k: _dtype(v.dtype) for k, v in sig.inputs.items()},
            "outputs": {k: _dtype(v.dtype) for k, v in sig.outputs.items()},
        }
        for name, sig in meta_graph.signature_def.items()
        if not name.startswith("__")
    }


def inspect_savedmodel(path: Path) -> SavedModelInfo:
    meta = read_proto(path).meta_graphs[0]
    nodes = meta.object_graph_def.nodes
    signatures = signatures_of(meta)
    if not nodes:  # TF1 SavedModel
        return SavedModelInfo(TF1_SAVEDMODEL, True, [], 0, signatures, [])
    root = {c.local_name: c.node_id for c in nodes[0].children}
    trainable = root.get("trainable_variables")
    num_trainable = 0 if trainable is None else len(nodes[trainable].children)
    variables, reader, keys = _variables(path, nodes)
    outputs = {o for s in signatures.values() for o in s["outputs"]}
    all_string = any(
        s["inputs"] and set(s["inputs"].values()) == {"string"} for s in signatures.values()
    )
    if "bert_pack_inputs" in root or (all_string and {"input_word_ids", "input_mask"} <= outputs):
        kind = PREPROCESSING
    elif num_trainable and "__call__" in root:
        kind = REUSABLE
    else:
        kind = SIGNATURE_ONLY
    return SavedModelInfo(
        kind,
        False,
        sorted(root),
        num_trainable,
        signatures,
        variables,
        lower_case=_stored_lower_case(reader, keys, root.get("do_lower_case")),
        vocab_asset=_asset_name(meta, nodes, root.get("vocab_file")),
        sp_model_asset=_asset_name(meta, nodes, root.get("sp_model_file")),
        num_encoder_outputs=_num_encoder_outputs(meta, nodes, root.get("__call__")),
    )


def _num_encoder_outputs(meta, nodes, node_id: int | None) -> int | None:
    """The length of the `encoder_outputs` list the root's `__call__` returns (the same in
    each of its traced functions), read from the saved output signatures."""
    if node_id is None or nodes[node_id].WhichOneof("kind") != "function":
        return None
    functions = meta.object_graph_def.concrete_functions
    for name in nodes[node_id].function.concrete_functions:
        if name not in functions:
            continue
        outputs = functions[name].output_signature
        if outputs.WhichOneof("kind") != "dict_value":
            continue
        field = outputs.dict_value.fields.get("encoder_outputs")
        if field is not None and field.WhichOneof("kind") in ("list_value", "tuple_value"):
            values = getattr(field, field.WhichOneof("kind")).values
            return len(values) or None
    return None


def _stored_lower_case(reader, keys: dict[int, str], node_id: int | None) -> bool | None:
    """The root's `do_lower_case` variable (Model Garden's encoder exports), when it has one."""
    if reader is None or node_id is None or node_id not in keys:
        return None
    try:
        return bool(np.asarray(reader.get_tensor(keys[node_id])).reshape(-1)[0])
    except (tf.errors.OpError, ValueError, IndexError):
        return None


def _asset_name(meta, nodes, node_id: int | None) -> str | None:
    """The file name (under assets/) of the root's `vocab_file` asset."""
    if node_id is None or nodes[node_id].WhichOneof("kind") != "asset":
        return None
    index = nodes[node_id].asset.asset_file_def_index
    if index >= len(meta.asset_file_def):
        return None
    return Path(meta.asset_file_def[index].filename).name or None


def _variables(path: Path, nodes) -> tuple[list[SavedVariable], object, dict[int, str]]:
    """Every variable in the object graph with its checkpoint key (node ids match); also the
    checkpoint reader (None when unreadable) and the node id → key map."""
    keys: dict[int, str] = {}
    reader = None
    try:
        reader = tf.train.load_checkpoint(str(path / "variables" / "variables"))
        graph = trackable_object_graph_pb2.TrackableObjectGraph()
        graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
        for i, node in enumerate(graph.nodes):
            for attribute in node.attributes:
                if attribute.name == "VARIABLE_VALUE":
                    keys[i] = attribute.checkpoint_key
    except (tf.errors.OpError, ValueError):
        reader = None  # no or unreadable variables: reported when the weights are read
    found = []
    for i, node in enumerate(nodes):
        if node.WhichOneof("kind") == "variable":
            v = node.variable
            found.append(
                SavedVariable(
                    v.name.removesuffix(":0"),
                    tuple(d.size for d in v.shape.dim),
                    v.trainable,
                    keys.get(i),
                )
            )
    return found, reader, keys


def _config(
    path: Path,
    shapes: dict[str, tuple],
    scheme: str,
    scope: str,
    family: str,
    info: SavedModelInfo,
) -> tuple[BertConfig, list[str]]:
    """bertfit's `assets/bert_config.json` (or a config file beside the SavedModel, read with
    `read_config`'s naming rule); else the shapes, with the activation Model Garden used. Then
    the family the names show (`as_family`); returns the config and notes about guesses."""
    config_file = find_config_file(path / "assets", path, path.parent)
    config_family(config_file)  # refuses an ALBERT config with several layer groups
    notes: list[str] = []
    if scheme == "tf1":
        word, pooler = "bert/embeddings/word_embeddings", "bert/pooler/dense/kernel"
    else:
        word, pooler = scope + "word_embeddings/embeddings", scope + TF2_POOLER
    if config_file is not None:
        config = read_config(config_file)
    else:
        config, notes = _inferred_config(path, shapes, scheme, scope, family, info)
    return as_family(config, family, shapes[word][1], pooler in shapes), notes


def _inferred_config(path, shapes, scheme, scope, family, info) -> tuple[BertConfig, list[str]]:
    act = keras_activation(path) or TF_DEFAULT_ACTIVATION
    shared = family == "ALBERT"
    if scheme == "tf1":
        num_layers = 1 if shared else count_layers(shapes, r"bert/encoder/layer_(\d+)/")
        table = google_table(family, num_layers)
        config, notes = infer_config(shapes, table, num_layers, None, path, act)
    else:
        query = TF2_SHARED_QUERY if shared else TF2_FIRST_QUERY
        pattern = "^" + re.escape(scope) + r"transformer/layer_(\d+)/"
        num_layers = 1 if shared else count_layers(shapes, pattern)
        heads = shapes[scope + query][1]
        table = tf2_variable_table(
            num_layers, heads, scope, projection=family != "BERT", shared=shared
        )
        config, notes = infer_config(shapes, table, num_layers, heads, path, act)
    if shared:  # the one layer is applied once per output in `encoder_outputs`
        layers = info.num_encoder_outputs
        if layers is None:
            layers, note = albert_layers_guess(config.hidden_size)
            notes.append(note)
        config = dataclasses.replace(config, num_hidden_layers=layers)
    return config, notes


KERAS_METADATA = "keras_metadata.pb"  # what tf_keras's model.save(save_format="tf") adds
# tf_keras's serialized activation → Hugging Face's name. Model Garden registers its GELU (the
# tanh approximation) as "Text>gelu"; "gelu" alone is tf.keras.activations.gelu, exact by default.
KERAS_ACTIVATIONS = {
    "Text>gelu": "gelu_new",
    "gelu": "gelu",
    "relu": "relu",
    "swish": "silu",
    "silu": "silu",
    "tanh": "tanh",
}


def keras_activation(path: Path) -> str | None:
    """The transformer layers' activation as Model Garden's Keras metadata records it: the
    `inner_activation` of its encoders and `TransformerEncoderBlock`s, or a `BertEncoder`'s
    `activation` when it is Model Garden's GELU (other `activation` keys belong to Dense layers,
    the pooler's tanh among them). None when there is no metadata or it names none bertfit knows.
    """
    try:
        text = (path / KERAS_METADATA).read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return None
    for name in re.findall(r'"inner_activation":\s*"([^"]+)"', text):
        if name in KERAS_ACTIVATIONS:
            return KERAS_ACTIVATIONS[name]
    if re.search(r'"activation":\s*"Text>gelu"', text):
        return KERAS_ACTIVATIONS["Text>gelu"]
    return None


def read_savedmodel(path: Path, info: SavedModelInfo | None = None) -> Checkpoint:
    """A reusable TF2 SavedModel as a `Checkpoint` (native) or an `OpaqueCheckpoint` (wrapped)."""
    info = info or inspect_savedmodel(path)
    if info.kind == PREPROCESSING:
        raise preprocessing_error(path)
    if info.kind in (SIGNATURE_ONLY, TF1_SAVEDMODEL):
        raise signature_only_error(path, info)
    vocab = _vocab(path, info)
    by_name = {v.name: v for v in info.variables}
    scheme = identify(by_name)
    if scheme not in ("tf1", "tf2-variables"):
        return OpaqueCheckpoint(
            format=REUSABLE + " (wrapped)",
            path=path,
            config=_opaque_config(info),
            tensors={},
            table={},
            vocab_file=vocab,
            lower_case=stored_lower_case(path, info),
            info=info,
        )
    scope = tf2_encoder_scope(by_name) if scheme == "tf2-variables" else ""
    family = tf2_family(by_name, scope) if scheme == "tf2-variables" else tf1_family(by_name)
    shapes = {name: v.shape for name, v in by_name.items()}
    config, notes = _config(path, shapes, scheme, scope, family, info)
    # Model Garden's `do_lower_case` is a variable too: read above, not an encoder weight.
    key_to_name = {
        v.key: v.name for v in info.variables if v.key and not v.key.startswith("do_lower_case/")
    }
    tensors = read_checkpoint_tensors(path / "variables" / "variables", lambda k: k in key_to_name)
    tensors = {key_to_name[k]: value for k, value in tensors.items()}
    table = (
        google_table(family, config.num_hidden_layers)
        if scheme == "tf1"
        else tf2_variable_table(
            config.num_hidden_layers,
            config.num_attention_heads,
            scope,
            projection=family != "BERT",
            shared=family == "ALBERT",
        )
    )
    return Checkpoint(
        format=REUSABLE,
        path=path,
        config=config,
        tensors=tensors,
        table=table,
        vocab_file=vocab,
        lower_case=stored_lower_case(path, info),
        tokenizer_dir=_sentencepiece(path, info) if vocab is None else None,
        family=family,
        notes=notes,
    )


def _sentencepiece(path: Path, info: SavedModelInfo) -> Path | None:
    """The folder of the root's `sp_model_file` asset (Model Garden's ALBERT exports), with the
    model under the name bertfit's tokenizer loader knows (`spiece.model`)."""
    if not info.sp_model_asset or not (path / "assets" / info.sp_model_asset).is_file():
        return None
    if info.sp_model_asset == "spiece.model":
        return path / "assets"
    return staged_sentencepiece(path / "assets" / info.sp_model_asset)


def _vocab(path: Path, info: SavedModelInfo) -> Path | None:
    """The root's `vocab_file` asset (Model Garden), else a vocab.txt in or beside assets/."""
    if info.vocab_asset and (path / "assets" / info.vocab_asset).is_file():
        return path / "assets" / info.vocab_asset
    return vocab_in(path)


def stored_lower_case(path: Path, info: SavedModelInfo) -> bool | None:
    """The casing the SavedModel stores: Model Garden's `do_lower_case` variable or bertfit's
    `assets/tokenizer_config.json`; None (the vocab decides) when it stores none."""
    if info.lower_case is not None:
        return info.lower_case
    return casing_in(path / "assets", path)


def _opaque_config(info: SavedModelInfo) -> BertConfig:
    """A best-effort architecture for reports; the wrapped model does not use it."""
    shapes = sorted((v.shape for v in info.variables if len(v.shape) == 2), key=lambda s: -s[0])
    vocab, hidden = shapes[0] if shapes else (1, 1)
    return BertConfig(
        vocab_size=vocab, hidden_size=hidden, num_hidden_layers=0, num_attention_heads=1
    )


def preprocessing_error(path: Path) -> CheckpointError:
    return CheckpointError(
        f"{path} is a TF Hub-style preprocessing model (strings in; input_word_ids, input_mask "
        "and input_type_ids out), not an encoder: it has no encoder weights to load or fine-tune. "
        "Pass the encoder SavedModel (or checkpoint) instead; bertfit tokenizes in-graph itself "
        "from the encoder's vocab.txt, so the preprocessing model is not needed."
    )


def loads_frozen(info: SavedModelInfo) -> bool:
    """Whether `load_frozen` runs this SavedModel: its `serving_default` signature takes the
    encoder's three inputs (a TF1 SavedModel's too: `tf.saved_model.load` reads its graph)."""
    signature = info.signatures.get("serving_default", {})
    return set(signature.get("inputs", {})) == set(INPUT_NAMES)


def signature_only_error(path: Path, info: SavedModelInfo) -> CheckpointError:
    where = (
        f"a TF1 SavedModel (a graph with signatures {sorted(info.signatures)}, no object graph)"
        if info.tf1
        else f"a SavedModel with signatures {sorted(info.signatures)} but no trainable_variables"
    )
    frozen = (
        "use it frozen for feature extraction with "
        "bertfit.load_encoder(path, trainable=False) or "
        "bertfit.checkpoints.savedmodel.load_frozen(path)"
        if loads_frozen(info)
        else "its serving_default signature does not take input_word_ids, input_mask and "
        "input_type_ids, so bertfit cannot run it even frozen; for frozen features use "
        "hub.KerasLayer(path, signature=NAME, signature_outputs_as_dict=True) in a tf_keras model"
    )
    return CheckpointError(
        f"{path} is {where}: it exposes zero trainable variables, so fine-tuning it would "
        "train nothing (hub.KerasLayer(path, trainable=True) refuses it with a ValueError, or "
        "only logs that it has zero trainable weights). bertfit refuses it for training. "
        f"Options: {frozen}; or get the reusable SavedModel (one with trainable_variables and "
        "__call__, as TF Hub publishes) or the original checkpoint, and pass that instead."
    )


# ---- the opaque wrapper ----


def _adopt(variable: tf.Variable, trainable: bool) -> keras.Variable:
    """A Keras 3 variable backed by the SavedModel's own `tf.Variable` (same storage)."""
    wrapped = keras.Variable(
        initializer=np.zeros(variable.shape, variable.dtype.as_numpy_dtype),
        dtype=variable.dtype.name,
        trainable=trainable,
        name=re.sub(r"[^A-Za-z0-9_]", "_", variable.name.removesuffix(":0")),
    )
    wrapped._value = variable  # the loaded function reads this very resource
    return wrapped


class SavedModelEncoder(keras.layers.Layer):
    """A loaded TF2 SavedModel encoder as a Keras 3 layer; its variables train unless frozen.

    Args:
        path: the SavedModel folder.
        trainable: False for frozen feature extraction (the only mode for signature-only models).
        info: what `inspect_savedmodel` already found, so the SavedModel is not parsed twice.

    Call it like `BertEncoder`; it returns the SavedModel's output dict (`pooled_output`,
    `sequence_output`, `encoder_outputs`, ...). It runs the SavedModel's traced functions, so it
    works with `tf.GradientTape` and `jit_compile` only as far as those functions allow.
    `config` is a `BertConfig` with the output width (`hidden_size`) and vocabulary size, so
    `BertClassifier(layer, ...)` and the checks take it like a `BertEncoder`; its other
    fields are not known (`num_hidden_layers` is 0).

    Examples:
    >>> layer = SavedModelEncoder("exported/encoder")  # doctest: +SKIP
    >>> layer({"input_word_ids": ids, "input_mask": mask})  # doctest: +SKIP
    """

    def __init__(
        self, path: str | Path, trainable: bool = True, info: SavedModelInfo | None = None, **kwargs
    ):
        kwargs.setdefault("name", "saved_model_encoder")
        super().__init__(trainable=trainable, **kwargs)
        self.saved_model_path = Path(path)
        if (self.saved_model_path / MODULE_FILE).is_file():
            raise tf1_module_error(self.saved_model_path)
        self.info = info or inspect_savedmodel(self.saved_model_path)
        import tensorflow_text  # noqa: F401  (someone else's SavedModel may use its ops)

        self._loaded = tf.saved_model.load(str(self.saved_model_path))
        exposed = list(getattr(self._loaded, "trainable_variables", []) or [])
        self.num_exposed = len(exposed)
        if trainable and not exposed:
            raise signature_only_error(self.saved_model_path, self.info)
        ids = {id(v) for v in exposed}
        everything = list(getattr(self._loaded, "variables", []) or exposed)
        self._adopted = [_adopt(v, trainable and id(v) in ids) for v in everything]
        self.built = True
        self.config = dataclasses.replace(
            _opaque_config(self.info), hidden_size=self._output_width(), num_attention_heads=1
        )

    def _output_width(self) -> int:
        """The width of `pooled_output` (else `sequence_output`), from one call on 2 tokens."""
        ids = tf.constant([[2, 3]], tf.int32)
        try:
            out = self.call(
                {"input_word_ids": ids, "input_mask": tf.ones_like(ids), "input_type_ids": ids * 0}
            )
            value = out.get("pooled_output", out.get("sequence_output"))
            return int(value.shape[-1])
        except Exception:  # a model that refuses the probe keeps the guess
            return _opaque_config(self.info).hidden_size

    def call(self, inputs, training=False, pooled_only=False):
        """`pooled_only` is accepted for `BertEncoder`'s callers; the SavedModel computes all."""
        inputs = normalize_inputs(inputs)
        loaded = self._loaded
        if callable(loaded) and self.num_exposed:
            return dict(loaded({k: inputs[k] for k in INPUT_NAMES}, training=training))
        signature = loaded.signatures["serving_default"]
        return dict(signature(**{k: inputs[k] for k in INPUT_NAMES}))


def load_frozen(path: str | Path) -> SavedModelEncoder:
    """Any encoder SavedModel, signature-only included, as a frozen feature extractor."""
    return SavedModelEncoder(path, trainable=False)
