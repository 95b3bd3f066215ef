"""MiniLM-L6 through bertfit equals transformers' BertModel on the same checkpoint (issue 2)."""

import numpy as np
import pytest
import tensorflow as tf

import bertfit

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def batch(rotten_tomatoes):
    from bertfit.data.rotten_tomatoes import load_rotten_tomatoes

    texts = [t for t, _ in load_rotten_tomatoes("dev")[:40]]
    texts += ["ok", "a", "the best film of the year , by far ."]  # very short ones too
    return texts


@pytest.fixture(scope="module")
def reference(minilm_dir, batch):
    torch = pytest.importorskip("torch")
    from transformers import BertModel

    encoder, tokenizer = bertfit.load_encoder("minilm-l6")
    inputs = tokenizer(batch, max_seq_length=64)
    model = BertModel.from_pretrained(minilm_dir).eval()
    with torch.inference_mode():
        out = model(
            input_ids=torch.tensor(inputs["input_word_ids"].numpy(), dtype=torch.long),
            attention_mask=torch.tensor(inputs["input_mask"].numpy(), dtype=torch.long),
            token_type_ids=torch.tensor(inputs["input_type_ids"].numpy(), dtype=torch.long),
        )
    return encoder, inputs, out.last_hidden_state.numpy(), out.pooler_output.numpy()


def _assert_close(outputs, inputs, sequence, pooled):
    real = inputs["input_mask"].numpy().astype(bool)
    assert real.sum(axis=1).min() < real.sum(axis=1).max()  # lengths really differ
    assert np.abs(outputs["sequence_output"].numpy()[real] - sequence[real]).max() <= 1e-4
    assert np.abs(outputs["pooled_output"].numpy() - pooled).max() <= 1e-4


def test_minilm_matches_transformers(reference):
    encoder, inputs, sequence, pooled = reference
    assert len(inputs["input_word_ids"]) >= 32
    _assert_close(encoder(inputs), inputs, sequence, pooled)


def test_minilm_matches_transformers_under_xla(reference):
    encoder, inputs, sequence, pooled = reference
    compiled = tf.function(lambda x: encoder(x), jit_compile=True)
    _assert_close(compiled(inputs), inputs, sequence, pooled)


def test_load_report_lists_every_weight(reference):
    encoder = reference[0]
    assert len(encoder.load_report.loaded) == len(encoder.named_variables())
    assert encoder.load_report.missing == []
