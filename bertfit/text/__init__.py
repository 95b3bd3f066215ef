"""Text to model inputs, inside the TensorFlow graph: every family's tokenizer (WordPiece,
SentencePiece, byte-level BPE), read from the files checkpoints ship, and input packing."""

from bertfit.text.bpe import ByteLevelBPETokenizer
from bertfit.text.loading import load_tokenizer
from bertfit.text.packing import pack_inputs, truncation_lengths
from bertfit.text.sentencepiece import SentencePieceTokenizer
from bertfit.text.tokenizer import BertTokenizer, TokenizerConfig

__all__ = [
    "BertTokenizer",
    "ByteLevelBPETokenizer",
    "SentencePieceTokenizer",
    "TokenizerConfig",
    "load_tokenizer",
    "pack_inputs",
    "truncation_lengths",
]
