"""The checkpoint's own tokenizer on the host, without TensorFlow: for `--backend jax` where
`import tensorflow` fails (a TPU VM or GPU box with JAX alone, issue 55).

`HostTokenizer` gives what the in-graph tokenizer of the same folder gives (`load_tokenizer`):
the same ids, special ids, packed inputs and long-document windows, as NumPy int32 arrays. Both
read the folder through `bertfit.text.loading.read_tokenizer_files` (which file, casing and the
`--lower-case` override, special tokens, pair template, XLM-R's fairseq ids), so they agree on
the settings; then

- the ids come from Hugging Face's `tokenizers` (the Rust crate behind transformers' fast
  tokenizers), which bertfit's in-graph tokenizers reproduce id for id (all of Rotten
  Tomatoes, every family's tokenizer: tests/text/test_host_tokenizer.py). Where the in-graph
  ones knowingly differ from it, so does this one from them: characters of Unicode versions
  newer than the Rust crate's tables, and SentencePiece segmentations of exactly equal score
  (see `bertfit.text.tokenizer` and `bertfit.text.sentencepiece`). Files the in-graph
  tokenizers refuse are refused here with the same message where the refusal is a reading of
  the files (a model type, a Unigram byte fallback, a BPE dropout); a normalizer or pre-tokenizer
  step `tokenizers` runs but the graph does not is tokenized here and refused there.
- packing and windows are `bertfit.text.host_packing`'s, the graph's rules in NumPy.

A sentencepiece `.model` file is not run by the `sentencepiece` library: that tokenizes as
transformers' slow tokenizers do, which differ from the fast ones (and from bertfit's) on
spaces, special tokens written in text, and ALBERT's casing and accents. It is read into the
tokenizer.json transformers 5 builds from it, which `tokenizers` runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bertfit.errors import CheckpointError, InputFormatError, MissingDependencyError
from bertfit.text import host_packing, tokenizer_json, wordpiece
from bertfit.text.lengths import WindowSpec
from bertfit.text.loading import TokenizerFiles, named_errors, read_tokenizer_files
from bertfit.text.ragged import RaggedIds
from bertfit.text.vocab_map import renumbering, write_vocab_map
from bertfit.text.wordpiece import TokenizerConfig


class HostTokenizer:
    """A checkpoint's tokenizer run by `tokenizers` on the host: ids, packed model inputs and
    long-document windows as NumPy int32 arrays, equal to those of its in-graph tokenizer.

    Build it with `load_host_tokenizer(folder)` (as `load_tokenizer`),
    `bertfit.checkpoints.load.build_host_tokenizer(checkpoint)` (as `build_tokenizer`), or
    `HostTokenizer.from_files(files)`.

    Args:
        tokenizer: a `tokenizers.Tokenizer` that gives the ids (its own template, truncation
            and padding are not used).
        kind: "wordpiece", "sentencepiece" or "bpe".
        vocab_size: the number of ids.
        packing: `cls_token`, `sep_token`, `pad_token` (None where a BPE has none), WordPiece's
            `unk_token`, and the template's `pair_separators` and `second_type_id`.
        new_ids: a pruned vocabulary's new id of each of `tokenizer`'s ids
            (`bertfit.text.vocab_map.renumbering`), or None.

    Examples:
    >>> from bertfit.checkpoints.registry import resolve
    >>> tokenizer = load_host_tokenizer(resolve("minilm-l6"))
    >>> tokenizer.kind, tokenizer.tokenize(["Hello, world!"])
    ('wordpiece', [[7592, 1010, 2088, 999]])
    >>> inputs = tokenizer(["a great film"], ["dull"], max_seq_length=8)
    >>> inputs["input_word_ids"].tolist(), inputs["input_type_ids"].tolist()
    ([[101, 1037, 2307, 2143, 102, 10634, 102, 0]], [[0, 0, 0, 0, 0, 1, 1, 0]])
    """

    def __init__(
        self,
        tokenizer,
        *,
        kind: str,
        vocab_size: int,
        packing: dict,
        files: TokenizerFiles | None = None,
        new_ids: np.ndarray | None = None,
    ):
        self._tokenizer = tokenizer
        self._new_ids = new_ids
        self.kind = kind
        self.vocab_size = vocab_size
        self._packing = dict(packing)
        self._files = files

    @classmethod
    def from_files(cls, files: TokenizerFiles) -> HostTokenizer:
        """The host tokenizer of what `read_tokenizer_files` (or `tokenizer_files` of a
        checkpoint) read.

        Raises:
            CheckpointError: the files describe no tokenizer `tokenizers` builds, or its
                special tokens are not in its vocabulary.
            MissingDependencyError: `tokenizers` is not installed.
        """
        tokenizers = _tokenizers()

        def build() -> HostTokenizer:
            if files.kind == "wordpiece":
                config = files.config
                names = ("cls_token", "sep_token", "pad_token", "unk_token", "pair_separators",
                         "second_type_id")  # fmt: skip
                packing = {name: getattr(config, name) for name in names}
                tokenizer = wordpiece_tokenizer(files.vocab, config)
                if files.kept is None:
                    size, new_ids = len(files.vocab), None
                else:  # a pruned vocabulary (`bertfit.text.vocab_map`)
                    unk_id = tokenizer.token_to_id(config.unk_token)
                    size = len(files.kept)
                    new_ids = renumbering(files.kept, len(files.vocab), unk_id)
                return cls(
                    tokenizer,
                    kind="wordpiece",
                    vocab_size=size,
                    packing=packing,
                    files=files,
                    new_ids=new_ids,
                )
            tokenizer = _panics_as_errors(tokenizers.Tokenizer.from_str, json.dumps(files.spec))
            tokenizer.no_padding()  # a tokenizer.json's own padding and truncation would
            tokenizer.no_truncation()  # pad or cut the ids of every batch it tokenizes
            size = max(tokenizer.get_vocab(with_added_tokens=True).values()) + 1
            return cls(
                tokenizer, kind=files.kind, vocab_size=size, packing=files.packing, files=files
            )

        built = named_errors(files.file, build, Exception)  # `tokenizers` raises Exception
        named_errors(files.file, built._check_special_tokens)
        return built

    @property
    def special_ids(self) -> dict[str, int]:
        """The ids and template `pack` packs with; the in-graph tokenizer's `special_ids`."""
        ids = {
            f"{name}_id": self._id(self._packing.get(f"{name}_token"), name)
            for name in ("cls", "sep", "pad")
        }
        template = ("pair_separators", "second_type_id")
        return {**ids, **{key: self._packing[key] for key in template if key in self._packing}}

    @property
    def special_token_ids(self) -> list[int]:
        """The ids of the special tokens the vocabulary has: a WordPiece's unknown, [CLS],
        [SEP], padding and mask tokens (the in-graph `BertTokenizer.special_token_ids`),
        another kind's packing tokens. What a pruned vocabulary keeps
        (`bertfit.text.vocab_map.kept_ids`)."""
        if self.kind == "wordpiece":
            tokens = self._files.config.special_tokens
        else:
            tokens = [t for name, t in self._packing.items() if name.endswith("_token")]
        ids = [self._tokenizer.token_to_id(t) for t in tokens if t is not None]
        ids = [i for i in ids if i is not None]
        return ids if self._new_ids is None else [int(self._new_ids[i]) for i in ids]

    def tokenize(self, texts: str | Sequence[str] | np.ndarray) -> list[list[int]] | list[int]:
        """Token ids of each text, without special tokens.

        Args:
            texts: a string, or a list, tuple or 1-D array of strings (`bytes` are read as
                UTF-8, a bad byte as U+FFFD).

        Returns:
            A list of ids a text; one list for a single string.
        """
        batch, single = _as_texts(texts, "texts")
        ids = self._ids(batch)
        return ids[0] if single else ids

    def tokenize_all(self, texts: Sequence[str], chunk: int = 2048) -> RaggedIds:
        """The ids of many texts (a data file's), `chunk` at a time (each chunk on every core
        `tokenizers` uses), in order, as NumPy arrays (`RaggedIds`)."""
        batch, single = _as_texts(texts, "texts")
        if single:
            raise InputFormatError("tokenize_all takes a batch of texts; wrap one in a list.")
        parts = [
            RaggedIds.from_rows(self._ids(batch[start : start + chunk]))
            for start in range(0, len(batch), chunk)
        ]
        return RaggedIds.concat(parts)

    def __call__(
        self, texts, text_pairs=None, max_seq_length: int = 128, padding: str = "max_length"
    ) -> dict[str, np.ndarray]:
        """Tokenizes and packs `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]` with the
        checkpoint's own tokens and template, truncating like Hugging Face.

        Args:
            texts: a string, or a list, tuple or 1-D array of strings.
            text_pairs: second segments, one per text, or `None`.
            max_seq_length: the packed length, special tokens included.
            padding: `"max_length"` pads to `max_seq_length`; `"longest"` to the longest row.

        Returns:
            int32 `input_word_ids`, `input_mask`, `input_type_ids`, each `[batch, length]`
            (`[length]` for a single string).
        """
        batch, single = _as_texts(texts, "texts")
        ids_b = None
        if text_pairs is not None:
            pairs, single_b = _as_texts(text_pairs, "text_pairs")
            if single_b != single:
                raise InputFormatError("texts and text_pairs must both be strings or both lists.")
            ids_b = self._ids(pairs)
        inputs = self.pack(self._ids(batch), ids_b, max_seq_length=max_seq_length, padding=padding)
        return {name: value[0] for name, value in inputs.items()} if single else inputs

    def pack(
        self, ids_a, ids_b=None, max_seq_length: int = 128, padding: str = "max_length"
    ) -> dict[str, np.ndarray]:
        """Packs ids from `tokenize` into model inputs; see `host_packing.pack_ids`."""
        return host_packing.pack_ids(
            ids_a, ids_b, max_seq_length=max_seq_length, padding=padding, **self.special_ids
        )

    def windows(
        self, texts: Sequence[str], spec: WindowSpec, max_chunks: int | None = None
    ) -> dict[str, np.ndarray]:
        """Tokenizes each text once and cuts it into packed windows (`--long-documents
        chunk`), as `bertfit.text.windows.tokenize_windows` does; see
        `host_packing.window_ids` for the arrays."""
        batch, single = _as_texts(texts, "texts")
        if single:
            raise InputFormatError("windows takes a batch of texts; wrap a single text in a list.")
        return host_packing.window_ids(
            self._ids(batch), spec, max_chunks=max_chunks, **self.special_ids
        )

    def save(self, directory: str | os.PathLike) -> None:
        """Writes the files it was built from (with `--lower-case` and the template applied)
        into `directory`, from which `load_host_tokenizer` and the in-graph `load_tokenizer`
        rebuild it: a WordPiece's `vocab.txt` and `tokenizer_config.json` as the in-graph
        tokenizer's `save` writes them; a SentencePiece's or BPE's `tokenizer.json` with its
        template and padding token (`tokenizer_json.with_template`)."""
        files = self._files
        if files is None:
            raise CheckpointError(
                "this HostTokenizer was made without its files (HostTokenizer.from_files "
                "keeps them); build it with load_host_tokenizer to save it."
            )
        if files.kind == "wordpiece":
            wordpiece.save(directory, files.vocab, files.config)
            if files.kept is not None:
                write_vocab_map(directory, files.kept)
            return
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        specials = {k: v for k, v in self._packing.items() if k.endswith("_token") and v}
        ids = {token: self._tokenizer.token_to_id(token) for token in specials.values()}
        spec = tokenizer_json.with_template(files.spec, self._packing, ids)
        (folder / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), "utf-8")
        (folder / "tokenizer_config.json").write_text(json.dumps(specials, indent=2), "utf-8")

    def packing_tokenizer(self, max_seq_length: int):
        """A `tokenizers.Tokenizer` whose `encode_batch` (of texts, or of (text, pair) tuples)
        gives the ids, mask and type ids `self(texts, pairs, max_seq_length,
        padding="longest")` gives: this tokenizer with the checkpoint's template as a
        post-processor, Hugging Face's `longest_first` truncation to `max_seq_length` and
        padding to the longest row. `bertfit export --format onnx` writes it as tokenizer.json.

        Raises:
            CheckpointError: the tokenizer has no [CLS]/[SEP] template or padding token, or
                a pruned vocabulary (a tokenizer.json cannot renumber ids after WordPiece).
        """
        if self._new_ids is not None:
            raise CheckpointError(
                "a pruned vocabulary (vocab_map.npy, bertfit distill --prune-vocab) renumbers "
                "ids after WordPiece, which a tokenizer.json cannot say; pack with the whole "
                "vocabulary's tokenizer (the folder without vocab_map.npy) and renumber the ids "
                "in the model, as bertfit's exports do."
            )
        ids = self.special_ids  # the CheckpointError where there is no template or padding
        tokens = {self._packing[f"{n}_token"]: ids[f"{n}_id"] for n in ("cls", "sep", "pad")}
        spec = json.loads(self._tokenizer.to_str())
        spec = tokenizer_json.with_template(spec, self._packing, tokens)
        packed = _tokenizers().Tokenizer.from_str(json.dumps(spec))
        packed.enable_truncation(max_length=max_seq_length, strategy="longest_first")
        return packed

    def _ids(self, texts: list[str]) -> list[list[int]]:
        encodings = self._tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        if self._new_ids is None:
            return [encoding.ids for encoding in encodings]
        return [self._new_ids[encoding.ids].tolist() for encoding in encodings]

    def _id(self, token: str | None, name: str) -> int:
        if token is None:
            raise CheckpointError(
                f"This tokenizer has no {name} token: its tokenizer.json has no [CLS]/[SEP] "
                "template (post_processor) or padding token, so it cannot pack inputs. Use "
                "tokenize(), or a checkpoint whose tokenizer files name its special tokens."
            )
        token_id = self._tokenizer.token_to_id(token)
        return token_id if self._new_ids is None else int(self._new_ids[token_id])

    def _check_special_tokens(self) -> None:
        """The special tokens are named (a BPE's may not be: it cannot pack) and in the
        vocabulary, as the in-graph tokenizers require when they are built."""
        named = {name: t for name, t in self._packing.items() if name.endswith("_token")}
        unnamed = [name for name, t in named.items() if t is None and self.kind != "bpe"]
        absent = [
            t for t in named.values() if t is not None and self._tokenizer.token_to_id(t) is None
        ]
        if unnamed:
            raise CheckpointError(
                f"its files name no {' or '.join(unnamed)} (a [CLS] a [SEP] template and a "
                "padding token); use the tokenizer files shipped with the model."
            )
        if absent:
            raise CheckpointError(
                f"the vocabulary has no {absent}, which its special tokens name; use the "
                "tokenizer files shipped with the model."
            )


def load_host_tokenizer(
    folder: str | os.PathLike,
    *,
    lower_case: bool | None = None,
    strip_accents: bool | None = None,
    model_type: str | None = None,
) -> HostTokenizer:
    """The host tokenizer of a checkpoint (or run) folder; the arguments are `load_tokenizer`'s.

    Raises:
        CheckpointError: the folder has none of the tokenizer files, or they are malformed.
        MissingDependencyError: `tokenizers` is not installed.
    """
    files = read_tokenizer_files(
        folder, lower_case=lower_case, strip_accents=strip_accents, model_type=model_type
    )
    return HostTokenizer.from_files(files)


def wordpiece_tokenizer(vocab: Sequence[str], config: TokenizerConfig):
    """A `tokenizers.Tokenizer` that tokenizes as `BertTokenizer(vocab, **config)` does: BERT's
    normalizer and pre-tokenizer with `config`'s casing, WordPiece with `##` pieces and its
    unknown token, the special tokens of the vocabulary kept whole in text; no template."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    ids = {token: i for i, token in enumerate(vocab)}  # a repeated token: its last id
    model = models.WordPiece(
        ids, unk_token=config.unk_token, max_input_chars_per_word=config.max_chars_per_word
    )
    tokenizer = Tokenizer(model)
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=config.tokenize_chinese_chars,
        strip_accents=config.strip_accents,
        lowercase=config.lower_case,
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.add_special_tokens([token for token in config.special_tokens if token in ids])
    return tokenizer


def _panics_as_errors(call, *args):
    """`call(*args)`, with a panic of the Rust crate (pyo3's `PanicException`, which derives
    from `BaseException`: a damaged charsmap, ...) raised as the `ValueError` it is."""
    try:
        return call(*args)
    except BaseException as error:
        if type(error).__name__ != "PanicException":
            raise
        raise ValueError(str(error)) from None


def _tokenizers():
    try:
        import tokenizers
    except ModuleNotFoundError:
        raise MissingDependencyError(
            "tokenizing on the host needs Hugging Face's tokenizers: pip install "
            "'bertfit[jax]' (or pip install tokenizers)."
        ) from None
    return tokenizers


def _as_texts(texts, name: str) -> tuple[list[str], bool]:
    """The texts as a list of `str`, and whether they were a single string."""
    if isinstance(texts, (str, bytes)):
        return [_text(texts)], True
    if isinstance(texts, np.ndarray) and (texts.ndim != 1 or texts.dtype.kind not in "USO"):
        raise InputFormatError(
            f"{name} must be a string or a 1-D batch of strings, got a {texts.dtype} array of "
            f"shape {texts.shape}; pass raw text: the tokenizer makes the ids."
        )
    if not isinstance(texts, (list, tuple, np.ndarray)):
        raise InputFormatError(
            f"{name} must be strings (a str, or a list or 1-D array of str), got "
            f"{type(texts).__name__}."
        )
    batch = []
    for i, text in enumerate(texts):
        if not isinstance(text, (str, bytes)):
            raise InputFormatError(
                f"{name}[{i}] is {type(text).__name__} {text!r:.40}; pass raw text: the "
                "tokenizer makes the ids."
            )
        batch.append(_text(text))
    return batch, False


def _text(text: str | bytes) -> str:
    return text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text
