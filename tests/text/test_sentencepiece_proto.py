"""bertfit reads and writes sentencepiece `.model` files with classes generated from a vendored
`sentencepiece_model.proto`: the schema is sentencepiece's own, the checked-in
`sentencepiece_model_pb2.py` is generated from the checked-in `.proto`, and what bertfit writes
(the models every SentencePiece tokenizer and its SavedModels hold) loads in the real
`sentencepiece` library and tokenizes there as the original model does."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from bertfit.text import sentencepiece, sentencepiece_model_pb2
from tests.text.test_tokenizer_parity import NASTY
from tests.tiny import sentiment_rows

spm = pytest.importorskip("sentencepiece")

PROTO = Path(sentencepiece.__file__).with_name("sentencepiece_model.proto")
TEXTS = ["a great film", "Ünïcödé ﾃﾞｰﾀ e\u0301 ｆｕｌｌ width", "dull, and slow!", *NASTY[:8]]


def _file_proto(module) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(proto)
    return proto


def _declarations(proto: descriptor_pb2.FileDescriptorProto) -> set[tuple]:
    """(scope, name, number, label, type) of every field and enum value, from a descriptor."""
    kinds = descriptor_pb2.FieldDescriptorProto.Type.items()  # ("TYPE_FLOAT", 2), ...
    types = {number: name.removeprefix("TYPE_").lower() for name, number in kinds}
    labels = {1: "optional", 2: "required", 3: "repeated"}
    found = set()

    def enums(scope, enum_types):
        for enum in enum_types:
            found.update((f"{scope}{enum.name}", v.name, v.number, "", "") for v in enum.value)

    def messages(scope, message_types):
        for message in message_types:
            inner = f"{scope}{message.name}."
            for field in message.field:
                kind = field.type_name.rpartition(".")[2] or types[field.type]
                found.add((inner[:-1], field.name, field.number, labels[field.label], kind))
            enums(inner, message.enum_type)
            messages(inner, message.nested_type)

    enums("", proto.enum_type)
    messages("", proto.message_type)
    return found


def _declarations_in(text: str) -> set[tuple]:
    """The same, read from .proto text: each `message`/`enum` block, its fields and values."""
    found, scope = set(), []
    for line in re.sub(r"//[^\n]*", "", text).splitlines():
        if opened := re.match(r"\s*(message|enum) (\w+) \{", line):
            scope.append(opened[2])
        elif re.match(r"\s*\}", line):
            scope.pop()
        elif field := re.match(r"\s*(optional|repeated|required) (\w+) (\w+) = (\d+)", line):
            found.add((".".join(scope), field[3], int(field[4]), field[1], field[2]))
        elif value := re.match(r"\s*([A-Z_]+) = (\d+);", line):
            found.add((".".join(scope), value[1], int(value[2]), "", ""))
    return found


def test_the_generated_module_has_the_fields_and_enum_values_of_the_proto_file():
    """Regenerate with scripts/generate_protos.py when this fails."""
    generated = _declarations(_file_proto(sentencepiece_model_pb2))
    assert _declarations_in(PROTO.read_text("utf-8")) == generated
    assert len(generated) == 70  # 60 fields, 10 enum values


def test_the_schema_is_sentencepiece_s_own_and_both_load_in_one_process():
    """Field for field, with defaults and options, only the package renamed (so that both
    register in protobuf's default pool: same-named files or types would clash there)."""
    from sentencepiece import sentencepiece_model_pb2 as upstream

    ours = _file_proto(sentencepiece_model_pb2)
    assert (ours.name, ours.package) == (
        "bertfit/text/sentencepiece_model.proto",
        "bertfit.sentencepiece",
    )
    ours.name, ours.package = "sentencepiece_model.proto", "sentencepiece"
    for message in _all_messages(ours.message_type):
        for field in (f for f in message.field if f.HasField("type_name")):
            field.type_name = field.type_name.replace(".bertfit.sentencepiece.", ".sentencepiece.")
    assert ours == _file_proto(upstream)


def _all_messages(message_types):
    for message in message_types:
        yield message
        yield from _all_messages(message.nested_type)


@pytest.fixture(scope="module")
def original() -> bytes:
    """A Unigram model trained by sentencepiece, with its nmt_nfkc charsmap (ALBERT's kind)."""
    lines = [text for text, _ in sentiment_rows(400)] + list(NASTY) + TEXTS
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=200,
        model_type="unigram", num_threads=1, minloglevel=2, hard_vocab_limit=False,
    )  # fmt: skip
    return model.getvalue()


def test_sentencepiece_reads_the_pieces_bertfit_reads_and_writes(original):
    """The pieces model bertfit writes from a `.model` (the one its tokenizer and SavedModels
    hold) has every piece, score and type of the original, as the real library reads them."""
    written = sentencepiece._viterbi_proto(sentencepiece.parse_model_proto(original), [])
    before = spm.SentencePieceProcessor(model_proto=original)
    after = spm.SentencePieceProcessor(model_proto=written)
    assert after.get_piece_size() == before.get_piece_size() == 200

    def pieces(sp):
        return [
            (sp.id_to_piece(i), sp.get_score(i), sp.is_unknown(i), sp.is_control(i))
            for i in range(sp.get_piece_size())
        ]

    assert pieces(after) == pieces(before)


def test_sentencepiece_tokenizes_with_bertfit_s_models_as_with_the_original(original):
    """The pieces model on normalized text gives the original's ids, and the charsmap model
    normalizes as the original's normalizer (less its space handling, which bertfit's
    pre-tokenizers do)."""
    model = sentencepiece.parse_model_proto(original)
    before = spm.SentencePieceProcessor(model_proto=original)
    pieces = spm.SentencePieceProcessor(model_proto=sentencepiece._viterbi_proto(model, []))
    charsmap = model.normalizer_spec.precompiled_charsmap
    assert len(charsmap) > 100_000  # nmt_nfkc's
    characters = spm.SentencePieceProcessor(model_proto=sentencepiece._charsmap_proto(charsmap))
    for text in TEXTS:
        normalized = before.normalize(text)
        assert pieces.encode(normalized) == before.encode(text), text
        words = " ".join(characters.normalize(text).split())
        assert "\u2581" + words.replace(" ", "\u2581") == normalized, text
