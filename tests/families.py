"""Tiny random models of every family, written by transformers' own classes (`save_pretrained`:
the layout every Hugging Face checkpoint of the family has), for parity and end-to-end tests."""

from __future__ import annotations

import json
from pathlib import Path

TINY = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=48,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)

MODERNBERT = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=48,
    max_position_embeddings=128,
    local_attention=8,
    global_attn_every_n_layers=2,
    attention_dropout=0.0,
    embedding_dropout=0.0,
    mlp_dropout=0.0,
)


def _configs(transformers) -> dict:
    """family → (model class, config) of a tiny random model."""
    return {
        "bert": (
            transformers.BertModel,
            transformers.BertConfig(**TINY, max_position_embeddings=64),
        ),
        "electra": (
            transformers.ElectraModel,
            transformers.ElectraConfig(**TINY, embedding_size=16, max_position_embeddings=64),
        ),
        "distilbert": (
            transformers.DistilBertModel,
            transformers.DistilBertConfig(
                vocab_size=99,
                dim=32,
                n_layers=2,
                n_heads=4,
                hidden_dim=48,
                dropout=0.0,
                attention_dropout=0.0,
                max_position_embeddings=64,
            ),
        ),
        "albert": (
            transformers.AlbertModel,
            transformers.AlbertConfig(
                **{**TINY, "num_hidden_layers": 3},
                embedding_size=16,
                max_position_embeddings=64,
                classifier_dropout_prob=0.0,
            ),
        ),
        "roberta": (
            transformers.RobertaModel,
            transformers.RobertaConfig(
                **TINY, max_position_embeddings=66, type_vocab_size=1, pad_token_id=1
            ),
        ),
        "xlm-roberta": (
            transformers.XLMRobertaModel,
            transformers.XLMRobertaConfig(
                **TINY, max_position_embeddings=66, type_vocab_size=1, pad_token_id=1
            ),
        ),
        "deberta-v2": (
            transformers.DebertaV2Model,
            transformers.DebertaV2Config(
                **{**TINY, "num_hidden_layers": 2},
                max_position_embeddings=64,
                relative_attention=True,
                position_buckets=8,
                pos_att_type=["p2c", "c2p"],
                position_biased_input=False,
                type_vocab_size=0,
                norm_rel_ebd="layer_norm",
                share_att_key=True,
            ),
        ),
        "modernbert": (
            transformers.ModernBertModel,
            transformers.ModernBertConfig(
                **MODERNBERT,
                pad_token_id=0,
                bos_token_id=2,
                eos_token_id=3,
                cls_token_id=2,
                sep_token_id=3,
            ),
        ),
        "mpnet": (
            transformers.MPNetModel,
            transformers.MPNetConfig(**TINY, max_position_embeddings=66, pad_token_id=1),
        ),
        "gte": (
            transformers.GteModel,
            transformers.GteConfig(**TINY, max_position_embeddings=64, pad_token_id=1),
        ),
        "nomic_bert": (
            transformers.NomicBertModel,
            transformers.NomicBertConfig(**TINY, max_position_embeddings=64),
        ),
        "mmbert": (  # mmBERT: a ModernBERT with Gemma's tokenizer and special tokens
            transformers.ModernBertModel,
            transformers.ModernBertConfig(
                **MODERNBERT,
                pad_token_id=0,
                eos_token_id=1,
                bos_token_id=2,
                cls_token_id=2,
                sep_token_id=1,
            ),
        ),
        "eurobert": (
            transformers.EuroBertModel,
            transformers.EuroBertConfig(
                vocab_size=99,
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,  # grouped: two query heads a key/value head
                intermediate_size=48,
                max_position_embeddings=128,
                rope_parameters={"rope_theta": 250_000.0, "rope_type": "default"},
                pad_token_id=0,
                bos_token_id=1,
                eos_token_id=0,
                mask_token_id=2,
            ),
        ),
    }


# The architectures (mmBERT's is ModernBERT's: in `_configs` and `TOKENIZER_KINDS` only).
FAMILIES = (
    "bert",
    "electra",
    "distilbert",
    "albert",
    "roberta",
    "xlm-roberta",
    "deberta-v2",
    "modernbert",
    "mpnet",
    "gte",
    "nomic_bert",
    "eurobert",
)


def write_family_model(family: str, path: Path, seed: int = 0):
    """Writes a tiny `family` model with random weights (LayerNorms and biases too) to `path`
    with `save_pretrained`; returns the torch model, in eval mode."""
    import torch
    import transformers

    model_class, config = _configs(transformers)[family]
    torch.manual_seed(seed)
    model = model_class(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "position_ids" not in name:
                parameter.normal_(0.0, 0.2)
    model.save_pretrained(path)
    return model


# ---- whole checkpoints: a family's model and the kind of tokenizer its checkpoints ship ----

# family → (tokenizer model, special tokens as "[CLS]" (BERT's), "<s>" (RoBERTa's), ...)
TOKENIZER_KINDS = {
    "bert": ("wordpiece", "[CLS]"),
    "electra": ("wordpiece", "[CLS]"),
    "distilbert": ("wordpiece", "[CLS]"),
    "albert": ("unigram", "[CLS]"),
    "xlm-roberta": ("unigram", "<s>"),
    "deberta-v2": ("unigram", "[CLS]"),
    "roberta": ("bpe", "<s>"),
    "modernbert": ("bpe", "[CLS]"),
    "mpnet": ("wordpiece", "mpnet"),
    "gte": ("unigram", "<s>"),  # gte-multilingual-base: XLM-R's
    "nomic_bert": ("wordpiece", "[CLS]"),
    "eurobert": ("bpe", "<|begin_of_text|>"),
    "mmbert": ("byte-fallback-bpe", "<bos>"),
}


def train_tokenizer(kind: str, texts, vocab_size: int = 300, style: str = "[CLS]"):
    """A `transformers` fast tokenizer of `kind` ("wordpiece", "unigram", "bpe") trained on
    `texts` with the `tokenizers` library, with BERT's special tokens and pair template
    (`style` "[CLS]"), RoBERTa's ("<s>") or EuroBERT's ("<|begin_of_text|>": Llama 3's
    byte-level BPE, its split and special tokens, the end of text padding); style "mpnet": a
    WordPiece as MPNet's checkpoints ship it (`mpnet_tokenizer`). Kind "byte-fallback-bpe"
    (style "<bos>"): mmBERT's, `byte_fallback_bpe`."""
    if kind == "byte-fallback-bpe":
        return byte_fallback_bpe(texts, vocab_size)
    import transformers
    from tokenizers import (
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    from bertfit.text.tokenizer_json import LLAMA3_SPLIT

    if style in ("[CLS]", "mpnet"):
        specials = {
            "pad": "[PAD]",
            "unk": "[UNK]",
            "cls": "[CLS]",
            "sep": "[SEP]",
            "mask": "[MASK]",
        }
    elif style == "<s>":
        specials = {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>", "mask": "<mask>"}
    else:
        specials = {"bos": "<|begin_of_text|>", "eos": "<|end_of_text|>", "mask": "<|mask|>"}
    first = specials.get("cls", specials.get("bos"))
    last = specials.get("sep", specials.get("eos"))
    single = f"{first} $A {last}"
    pair = f"{single} {last} $B {last}" if style == "<s>" else f"{single} $B:1 {last}:1"
    if kind == "wordpiece":
        tokenizer = Tokenizer(models.WordPiece(unk_token=specials["unk"]))
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size, special_tokens=list(specials.values())
        )
    elif kind == "unigram":
        tokenizer = Tokenizer(models.Unigram())
        tokenizer.normalizer = normalizers.NFKC()
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        tokenizer.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size,
            special_tokens=list(specials.values()),
            unk_token=specials["unk"],
        )
    else:
        llama3 = style == "<|begin_of_text|>"
        tokenizer = Tokenizer(models.BPE(ignore_merges=llama3))
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        if llama3:
            tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ])  # fmt: skip
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(specials.values()),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
    tokenizer.train_from_iterator(texts, trainer)
    if style == "mpnet":
        return mpnet_tokenizer(tokenizer.get_vocab())
    tokenizer.post_processor = processors.TemplateProcessing(
        single=single,
        pair=pair,
        special_tokens=[(token, tokenizer.token_to_id(token)) for token in (first, last)],
    )
    names = {f"{k}_token": v for k, v in specials.items()}
    if style == "<|begin_of_text|>":
        names["pad_token"] = specials["eos"]  # EuroBERT pads with its end of text
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, **names)


def byte_fallback_bpe(texts, vocab_size: int = 300):
    """mmBERT's kind of tokenizer (Gemma's): a SentencePiece-style BPE over characters, spaces
    written `▁` by the normalizer, no pre-tokenizer (merges cross words), and the 256 byte
    pieces `<0x00>`...`<0xFF>` for the characters it lacks; Gemma's special tokens and ids
    first, `<bos> $A <eos>` and `<bos> $A <eos> $B:1 <eos>:1`."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers

    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
    spaces = normalizers.Replace(" ", "\u2581")
    trained = Tokenizer(models.BPE())
    trained.normalizer = spaces
    trained.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size))
    learned = trained.get_vocab()
    pieces = [*specials, *(f"<0x{b:02X}>" for b in range(256)), *sorted(learned, key=learned.get)]
    vocab = {piece: i for i, piece in enumerate(pieces)}
    merges = [tuple(pair) for pair in json.loads(trained.to_str())["model"]["merges"]]
    tokenizer = Tokenizer(
        models.BPE(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True)
    )
    tokenizer.normalizer = spaces
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    tokenizer.add_special_tokens(specials)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos> $A <eos>",
        pair="<bos> $A <eos> $B:1 <eos>:1",
        special_tokens=[(token, vocab[token]) for token in ("<bos>", "<eos>")],
    )
    names = dict(pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", unk_token="<unk>",
                 mask_token="<mask>", cls_token="<bos>", sep_token="<eos>")  # fmt: skip
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, **names)


def mpnet_tokenizer(bert_vocab: dict):
    """transformers' `MPNetTokenizer` as MPNet's checkpoints have it: fairseq's `<s> <pad> </s>
    <unk>` first, then a BERT WordPiece vocabulary (`[UNK]` its unknown token), then `<mask>`;
    RoBERTa's template around BERT's normalizer and pre-tokenizer."""
    import transformers

    tokens = ["<s>", "<pad>", "</s>", "<unk>", *sorted(bert_vocab, key=bert_vocab.get), "<mask>"]
    return transformers.MPNetTokenizer(vocab={token: i for i, token in enumerate(tokens)})


def write_family_checkpoint(family: str, path: Path, texts, seed: int = 0, trainable: bool = True):
    """A whole tiny checkpoint of `family` at `path`: its tokenizer trained on `texts` (saved
    by transformers 5: tokenizer.json, no vocab.txt) and a model sized to that vocabulary,
    with the family's own initialisation (`trainable`) or random weights everywhere."""
    import torch
    import transformers

    kind, style = TOKENIZER_KINDS[family]
    tokenizer = train_tokenizer(kind, texts, style=style)
    tokenizer.save_pretrained(path)
    model_class, config = _configs(transformers)[family]
    config.vocab_size = len(tokenizer)
    config.pad_token_id = tokenizer.pad_token_id
    torch.manual_seed(seed)
    model = model_class(config).eval()
    if not trainable:
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.normal_(0.0, 0.2)
    model.save_pretrained(path)
    return tokenizer, model
