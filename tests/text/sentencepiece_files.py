"""Real tokenizer folders made offline: a sentencepiece Unigram model trained on a corpus, saved
the way each family's checkpoints ship it (the bare `.model` file with its config.json) and the
way transformers 5 saves it (`tokenizer.json` + `tokenizer_config.json` only)."""

from __future__ import annotations

import json
from pathlib import Path

# Each family's sentencepiece file, its special pieces' ids (as in the released checkpoints),
# and transformers' tokenizer class.
FAMILIES = {
    "xlm-roberta": ("sentencepiece.bpe.model", {}, "XLMRobertaTokenizer"),
    "albert": (
        "spiece.model",
        {"pad_id": 0, "unk_id": 1, "bos_id": -1, "eos_id": -1,
         "control_symbols": ["[CLS]", "[SEP]", "[MASK]"]},
        "AlbertTokenizer",
    ),
    "deberta-v2": (
        "spm.model",
        {"pad_id": 0, "pad_piece": "[PAD]", "bos_id": 1, "bos_piece": "[CLS]", "eos_id": 2,
         "eos_piece": "[SEP]", "unk_id": 3, "unk_piece": "[UNK]"},
        "DebertaV2Tokenizer",
    ),
}  # fmt: skip


def write_family(folder: Path, family: str, corpus: Path, vocab_size: int) -> tuple[Path, Path]:
    """Trains `family`'s sentencepiece model on `corpus` (one text a line) and writes
    `folder/<family>` (the bare file + config.json) and `folder/<family>-json` (what
    transformers 5's `save_pretrained` writes); returns both folders."""
    import transformers

    spm_dir, json_dir = (
        write_model_file(folder, family, corpus, vocab_size),
        folder / f"{family}-json",
    )
    tokenizer = getattr(transformers, FAMILIES[family][2]).from_pretrained(spm_dir)
    tokenizer.save_pretrained(json_dir)
    return spm_dir, json_dir


def write_model_file(folder: Path, family: str, corpus: Path, vocab_size: int) -> Path:
    """`folder/<family>`: `family`'s bare sentencepiece file trained on `corpus`, and a
    config.json that names the family, as its checkpoints ship them."""
    import sentencepiece

    file, options, _ = FAMILIES[family]
    spm_dir = folder / family
    spm_dir.mkdir(parents=True)
    sentencepiece.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(spm_dir / "m"), vocab_size=vocab_size,
        model_type="unigram", num_threads=2, minloglevel=2, **options,
    )  # fmt: skip
    (spm_dir / "m.model").rename(spm_dir / file)
    (spm_dir / "m.vocab").unlink()
    (spm_dir / "config.json").write_text(json.dumps({"model_type": family}))
    return spm_dir
