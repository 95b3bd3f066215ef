"""Issue 46: KerasHub's backbones or bertfit's own model, per family? Each side loads the same
Hugging Face checkpoint and is compared with transformers' own outputs on a padded batch.

    python -m bench.kerashub [--batch 4] [--seq 48]

Each family is a MiniLM-L6-sized model (bench/families.py's configs) with transformers' random
initialisation, written by `save_pretrained` from its pre-training or masked-LM model (the
layout of the hub's checkpoints; RoBERTa's and XLM-R's layer-norm epsilon 1e-5, as theirs).
That model's encoder gives the reference `last_hidden_state`; bertfit reads the directory with
its loader (`read_hf` + `build_encoder`); KerasHub 0.32 reads it with
`keras_hub.models.Backbone.from_preset(directory)`, its converter from transformers'
checkpoints, where the family has one. Reported per family and side: the
largest |difference| from transformers over the real (unpadded) tokens, and whether it is
within the issue's 1e-5.

KerasHub is only a peer here (the `bench` extra), never a dependency of bertfit.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from bench.common import write_result
from bench.families import configs
from bertfit.tf_startup import start_tensorflow

TOLERANCE = 1e-5
# transformers' model type -> KerasHub's preset name for it, for the families whose
# checkpoints KerasHub 0.32 converts (keras_hub/src/utils/transformers/convert_*.py).
# ELECTRA and DeBERTa-v3 have KerasHub backbones but no converter; ModernBERT has neither.
KERAS_HUB_CONVERTS = {"bert", "distilbert", "albert", "roberta", "xlm-roberta"}


def padded_batch(batch: int, seq: int, pad_id: int, type_vocab_size: int) -> dict:
    """Token ids with rows of decreasing length (the rest padding), segment ids where the
    family has them."""
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 30000, (batch, seq)).astype("int32")
    lengths = np.linspace(seq, max(2, seq // 4), batch).astype(int)
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype("int32")
    types = np.zeros_like(ids)
    if type_vocab_size > 1:
        types[:, seq // 2 :] = 1
    return {"ids": np.where(mask == 1, ids, pad_id), "mask": mask, "types": types * mask}


def transformers_output(model, batch: dict, uses_types: bool) -> np.ndarray:
    import torch

    arguments = {
        "input_ids": torch.tensor(batch["ids"], dtype=torch.long),
        "attention_mask": torch.tensor(batch["mask"], dtype=torch.long),
    }
    if uses_types:
        arguments["token_type_ids"] = torch.tensor(batch["types"], dtype=torch.long)
    with torch.no_grad():
        return model(**arguments).last_hidden_state.numpy()


def bertfit_output(path: Path, batch: dict) -> np.ndarray:
    from bertfit.checkpoints.hf import read_hf
    from bertfit.checkpoints.load import build_encoder

    encoder = build_encoder(read_hf(path))
    features = {
        "input_word_ids": batch["ids"],
        "input_mask": batch["mask"],
        "input_type_ids": batch["types"],
    }
    return np.asarray(encoder(features)["sequence_output"])


def keras_hub_output(path: Path, batch: dict) -> np.ndarray:
    import keras_hub

    backbone = keras_hub.models.Backbone.from_preset(str(path))
    names = {spec.name for spec in backbone.inputs}
    features = {"token_ids": batch["ids"], "padding_mask": batch["mask"]}
    if "segment_ids" in names:
        features["segment_ids"] = batch["types"]
    outputs = backbone(features)
    return np.asarray(outputs["sequence_output"] if isinstance(outputs, dict) else outputs)


def compare(family: str, config, args) -> dict:
    import torch
    import transformers

    torch.manual_seed(0)
    # Saved as the hub publishes these checkpoints: from the pre-training (or masked-LM) model,
    # so the encoder's tensors carry the family's prefix (`bert.`, `roberta.`, ...) and BERT's
    # and ALBERT's the pooler, as KerasHub expects.
    if family in ("roberta", "xlm-roberta"):
        config.layer_norm_eps = 1e-5  # as roberta-base's and xlm-roberta-base's configs say
    try:
        model = transformers.AutoModelForPreTraining.from_config(config).eval()
    except ValueError:
        model = transformers.AutoModelForMaskedLM.from_config(config).eval()
    pad_id = config.pad_token_id if config.pad_token_id is not None else 0
    type_vocab_size = getattr(config, "type_vocab_size", 0) or 0
    batch = padded_batch(args.batch, args.seq, pad_id, type_vocab_size)
    real = batch["mask"].astype(bool)
    reference = transformers_output(model.base_model, batch, type_vocab_size > 0)[real]
    row = {"family": family}
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        row["bertfit_max_abs_diff"] = float(
            np.abs(bertfit_output(Path(folder), batch)[real] - reference).max()
        )
        if family in KERAS_HUB_CONVERTS:
            try:
                ours = keras_hub_output(Path(folder), batch)[real]
                row["keras_hub_max_abs_diff"] = float(np.abs(ours - reference).max())
            except Exception as error:  # a peer's failure is a finding, not a crash
                row["keras_hub_error"] = f"{type(error).__name__}: {error}"[:300]
        else:
            row["keras_hub_error"] = "no transformers converter in keras-hub 0.32"
    row["bertfit_within_tolerance"] = row["bertfit_max_abs_diff"] <= TOLERANCE
    if "keras_hub_max_abs_diff" in row:
        row["keras_hub_within_tolerance"] = row["keras_hub_max_abs_diff"] <= TOLERANCE
    return row


def table(rows: list[dict]) -> str:
    lines = [
        "| family | bertfit max abs diff | KerasHub 0.32 max abs diff |",
        "|---|---|---|",
    ]
    for row in rows:
        hub = row.get("keras_hub_max_abs_diff")
        hub_cell = f"{hub:.1e}" if hub is not None else row["keras_hub_error"]
        lines.append(f"| {row['family']} | {row['bertfit_max_abs_diff']:.1e} | {hub_cell} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=48)
    parser.add_argument("--families", default="", help="comma-separated; default all")
    args = parser.parse_args()
    start_tensorflow()
    import keras_hub
    import transformers

    wanted = [f for f in args.families.split(",") if f]
    rows = [
        compare(family, config, args)
        for family, config in configs(transformers).items()
        if not wanted or family in wanted
    ]
    print(table(rows))
    write_result(
        "kerashub",
        {
            "settings": {"batch": args.batch, "seq": args.seq, "tolerance": TOLERANCE},
            "versions": {
                "keras_hub": keras_hub.__version__,
                "transformers": transformers.__version__,
            },
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
