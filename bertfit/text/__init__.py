"""Text to model inputs: in-graph WordPiece tokenization and BERT input packing."""

from bertfit.text.packing import pack_inputs, truncation_lengths
from bertfit.text.tokenizer import BertTokenizer, TokenizerConfig

__all__ = ["BertTokenizer", "TokenizerConfig", "pack_inputs", "truncation_lengths"]
