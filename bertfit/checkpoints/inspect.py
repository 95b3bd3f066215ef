"""`bertfit inspect PATH`: what a checkpoint is, its architecture, vocab, casing and interface."""

from __future__ import annotations

import warnings
from pathlib import Path

from bertfit.checkpoints.base import OpaqueCheckpoint
from bertfit.checkpoints.detect import Detection, detect, read_detected
from bertfit.checkpoints.hub_module import module_signatures
from bertfit.checkpoints.load import build_encoder, build_tokenizer, checkpoint_tokenizer_kind
from bertfit.errors import CheckpointError
from bertfit.text.loading import bpe_style
from bertfit.text.wordpiece import capitalised_tokens, guess_lower_case, read_vocab

ENCODER_INPUTS = {"input_word_ids": "int32", "input_mask": "int32", "input_type_ids": "int32"}
ENCODER_OUTPUTS = {
    "pooled_output": "float32",
    "default": "float32",
    "sequence_output": "float32",
    "encoder_outputs": "list of float32",
}


def inspect_checkpoint(path: str | Path) -> dict:
    """A JSON-ready report on the checkpoint at `path`."""
    found = detect(path)
    report = {
        "path": str(path),
        "format": found.format,
        "description": found.description,
        "written_by": found.writer,
        "archive": str(found.archive) if found.archive else None,
        "fine_tunable": found.fine_tunable,
        "notes": [],
    }
    report["inputs"], report["outputs"] = _interface(found)
    try:
        checkpoint = read_detected(found)
    except CheckpointError as e:
        report["fine_tunable"] = False
        report["notes"].append(str(e))
        return report
    config = checkpoint.config
    if not isinstance(checkpoint, OpaqueCheckpoint):
        report["family"] = checkpoint.family
        if not config.has_pooler:  # its vector for a whole input is the first token's output
            report["outputs"] = {k: v for k, v in report["outputs"].items() if k != "pooled_output"}
        report["architecture"] = {
            "layers": config.num_hidden_layers,
            "hidden": config.hidden_size,
            "heads": config.num_attention_heads,
            "intermediate": config.intermediate_size,
            "vocab": config.vocab_size,
            "max_positions": config.max_sequence_length,
            "type_vocab": config.type_vocab_size,
            "activation": config.hidden_act,
        }
        report["loads_into"] = "native BertEncoder"
        try:  # the weights must fit the config: build it as train would
            encoder = build_encoder(checkpoint)
            report["parameters"] = int(sum(v.numpy().size for v in encoder.weights))
        except CheckpointError as e:
            report["fine_tunable"] = False
            report["notes"].append(f"the weights do not fit the config: {e}")
    else:
        report["loads_into"] = "SavedModelEncoder (the SavedModel wrapped whole)"
        report["trainable_variables"] = checkpoint.info.num_trainable
    report["notes"] += checkpoint.notes
    report["vocab"] = _vocab(checkpoint)
    report["tokenizer"] = checkpoint_tokenizer_kind(checkpoint)
    if report["tokenizer"] == "bpe":
        report["bpe"] = bpe_style(checkpoint.tokenizer_dir)
    if report["tokenizer"] is not None:
        _check_tokenizer(checkpoint, report)
    if report["tokenizer"] is None:
        report["fine_tunable"] = False
        report["notes"].append(
            "no tokenizer files (vocab.txt, tokenizer.json, spiece.model, vocab.json + "
            "merges.txt): bertfit cannot tokenize for this checkpoint; put the tokenizer files it "
            "was trained with beside its weights."
        )
    return report


def _check_tokenizer(checkpoint, report: dict) -> None:
    """Builds the tokenizer as train would: what it refuses or warns of goes in the notes."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            build_tokenizer(checkpoint)
        except CheckpointError as e:
            report["fine_tunable"] = False
            report["notes"].append(f"the tokenizer files cannot be used: {e}")
    report["notes"] += [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def _interface(found: Detection) -> tuple[dict, dict]:
    if found.format == "tf1-hub-module":
        sigs = module_signatures(found.root)
        default = sigs.get("tokens") or sigs.get("default") or {"inputs": {}, "outputs": {}}
        return default["inputs"], default["outputs"]
    if found.savedmodel is not None:
        sigs = found.savedmodel.signatures
        if found.format == "tf2-savedmodel":
            return ENCODER_INPUTS, ENCODER_OUTPUTS
        default = sigs.get("serving_default") or next(iter(sigs.values()), None)
        return (default["inputs"], default["outputs"]) if default else ({}, {})
    return ENCODER_INPUTS, ENCODER_OUTPUTS


def _vocab(checkpoint) -> dict:
    if checkpoint.vocab_file is None:
        return {"file": None, "size": None, "lower_case": checkpoint.lower_case}
    tokens = read_vocab(checkpoint.vocab_file)
    lower = checkpoint.lower_case
    if lower is None:
        lower = guess_lower_case(tokens)
    return {
        "file": str(checkpoint.vocab_file),
        "size": len(tokens),
        "lower_case": lower,
        "casing": "uncased" if lower else "cased",
        "tokens_with_capitals": len(capitalised_tokens(tokens)),
    }


def format_report(report: dict) -> str:
    """The report as a few readable lines."""
    lines = [
        f"{report['path']}: {report['description']}",
        f"  format:        {report['format']}",
        f"  written by:    {report['written_by']}",
    ]
    if report.get("archive"):
        lines.append(f"  archive:       {report['archive']} (extracted safely)")
    if "architecture" in report:
        a = report["architecture"]
        size = f", {report['parameters']:,} parameters" if "parameters" in report else ""
        lines.append(f"  family:        {report['family']}{size}")
        lines.append(
            f"  architecture:  {a['layers']} layers, hidden {a['hidden']}, {a['heads']} "
            f"heads, intermediate {a['intermediate']}, vocab {a['vocab']}, max positions "
            f"{a['max_positions']}, {a['activation']}"
        )
    if report.get("tokenizer"):
        style = f" ({report['bpe']})" if report.get("bpe") else ""
        lines.append(f"  tokenizer:     {report['tokenizer']}{style}")
    if report.get("vocab") and report["vocab"].get("file"):
        v = report["vocab"]
        lines.append(
            f"  vocab:         {v.get('size')} tokens ({v.get('file')}), "
            f"{v.get('casing', 'casing unknown')}"
        )
    lines.append(
        f"  fine-tunable:  {'yes' if report['fine_tunable'] else 'no'}"
        + (f" -> {report['loads_into']}" if report.get("loads_into") else "")
    )
    for side in ("inputs", "outputs"):
        items = ", ".join(f"{k} ({v})" for k, v in report[side].items()) or "-"
        lines.append(f"  {side + ':':<14} {items}")
    lines += [f"  note: {note}" for note in report["notes"]]
    return "\n".join(lines)
