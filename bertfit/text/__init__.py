"""Text to model inputs: every family's tokenizer (WordPiece, SentencePiece, byte-level BPE), read
from the files checkpoints ship, and input packing; inside the TensorFlow graph (`load_tokenizer`),
or on the host without TensorFlow (`bertfit.text.host`).

The names below are imported on first use, so the TensorFlow-free modules of this package
(`host`, `loading`, `wordpiece`, `lengths`, ...) import where TensorFlow cannot.
"""

import importlib

# public name -> the module that defines it
_EXPORTS = {
    "BertTokenizer": "bertfit.text.tokenizer",
    "ByteLevelBPETokenizer": "bertfit.text.bpe",
    "HostTokenizer": "bertfit.text.host",
    "SentencePieceTokenizer": "bertfit.text.sentencepiece",
    "TokenizerConfig": "bertfit.text.wordpiece",
    "load_host_tokenizer": "bertfit.text.host",
    "load_tokenizer": "bertfit.text.loading",
    "pack_inputs": "bertfit.text.packing",
    "truncation_lengths": "bertfit.text.packing",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'bertfit.text' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
