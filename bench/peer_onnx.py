"""The ONNX Runtime peer of `bench.inference`: a bertfit run's fine-tuned weights as a transformers
`BertForSequenceClassification`, exported to ONNX the way a team serving on CPUs does it.

    python -m bench.peer_onnx weights --run RUN --work DIR   # TensorFlow: DIR/hf-encoder, head.npz
    python -m bench.peer_onnx export --work DIR              # torch: DIR/hf, DIR/peer-onnx/*.onnx

`weights` writes the run's encoder with `bertfit.checkpoints.hf.write_hf` (a `BertModel`
directory, pooler included) and its classification head (the `[CLS]` pooler's Dense, as
`BertForSequenceClassification`'s `classifier`). `export` builds the transformers model from them
(DIR/hf, with the run's tokenizer files: what the torch peer loads), exports it with
`torch.onnx.export` (opset 17, dynamic batch and sequence, eager attention), fuses it with ONNX
Runtime's BERT optimizer (`onnxruntime.transformers.optimizer`: embeddings + layer norm,
attention, skip layer norm, bias GELU; what optimum's O2 level does) and quantizes that with
`quantize_dynamic` (int8 weights per channel, as `bertfit export --format onnx --quantize int8`
does): DIR/peer-onnx/model-fp32.onnx and model-int8.onnx. The two steps are separate processes:
TensorFlow and torch in one process slow each other down.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np

INPUTS = ["input_ids", "attention_mask", "token_type_ids"]


def write_weights(run: Path, work: Path) -> None:
    """The run's best weights as a HF `BertModel` directory plus the head's kernel and bias."""
    from bertfit.tf_startup import start_tensorflow

    start_tensorflow()
    from bertfit.checkpoints.hf import write_hf
    from bertfit.inference.predictor import load_classifier

    classifier = load_classifier(run)
    model = classifier.module.model
    if model.pooling != "cls":
        raise SystemExit(f"{run} pools with {model.pooling!r}; the transformers peer needs 'cls'")
    write_hf(model.encoder, None, work / "hf-encoder", lower_case=True)
    kernel, bias = (np.asarray(v.numpy()) for v in model.head.weights)
    np.savez(work / "head.npz", kernel=kernel, bias=bias, labels=np.array(classifier.labels))
    for name in ("vocab.txt", "tokenizer_config.json"):
        shutil.copyfile(run / "encoder" / "tokenizer" / name, work / "hf-encoder" / name)


def build_transformers_model(work: Path):
    """`BertForSequenceClassification` with the run's weights, saved to DIR/hf."""
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification, BertModel

    head = np.load(work / "head.npz")
    encoder = BertModel.from_pretrained(str(work / "hf-encoder"))
    labels = [str(label) for label in head["labels"]]
    config = encoder.config
    config.num_labels = len(labels)
    config.id2label = dict(enumerate(labels))
    config.label2id = {label: i for i, label in enumerate(labels)}
    model = BertForSequenceClassification(config).eval()
    model.bert.load_state_dict(encoder.state_dict())
    with torch.no_grad():
        model.classifier.weight.copy_(torch.from_numpy(head["kernel"].T.copy()))
        model.classifier.bias.copy_(torch.from_numpy(head["bias"]))
    model.save_pretrained(str(work / "hf"))
    AutoTokenizer.from_pretrained(str(work / "hf-encoder")).save_pretrained(str(work / "hf"))
    return model


def export_onnx(work: Path) -> None:
    import onnx
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.optimizer import optimize_model
    from transformers import BertForSequenceClassification

    build_transformers_model(work)
    # Eager attention exports the pattern ONNX Runtime's optimizer fuses into its `Attention`
    # op (SDPA's export, with IsNaN/Where around the softmax, stays unfused: 2 fusions of 4).
    model = BertForSequenceClassification.from_pretrained(
        str(work / "hf"), attn_implementation="eager"
    ).eval()
    out = work / "peer-onnx"
    out.mkdir(exist_ok=True)
    ids = torch.ones(2, 16, dtype=torch.long)
    axes = {name: {0: "batch", 1: "seq"} for name in INPUTS} | {"logits": {0: "batch"}}
    torch.onnx.export(
        model,
        (ids, torch.ones_like(ids), torch.zeros_like(ids)),
        str(out / "model-plain.onnx"),
        input_names=INPUTS,
        output_names=["logits"],
        dynamic_axes=axes,
        opset_version=17,
        dynamo=False,
    )
    config = model.config
    fused = optimize_model(
        str(out / "model-plain.onnx"),
        model_type="bert",
        num_heads=config.num_attention_heads,
        hidden_size=config.hidden_size,
    )
    fused.save_model_to_file(str(out / "model-fp32.onnx"))
    print(json.dumps({"fused_operators": fused.get_fused_operator_statistics()}))
    quantize_dynamic(
        str(out / "model-fp32.onnx"),
        str(out / "model-int8.onnx"),
        weight_type=QuantType.QInt8,
        per_channel=True,
        # The fused operators (com.microsoft domain) have no shape inference for its outputs.
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("step", choices=["weights", "export"])
    parser.add_argument("--run", type=Path)
    parser.add_argument("--work", type=Path, required=True)
    args = parser.parse_args()
    if args.step == "weights":
        write_weights(args.run, args.work)
    else:
        export_onnx(args.work)


if __name__ == "__main__":
    main()
