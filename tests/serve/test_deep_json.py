"""`bertfit.serve.deep_json`: Python's JSON grammar at any depth, as TF Serving's iterative
parser reads request bodies."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertfit.serve import deep_json

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=60, deadline=None, database=None)
@given(value=_JSON, indent=st.sampled_from([None, 1]))
def test_decode_reads_what_json_reads(value, indent):
    text = json.dumps(value, indent=indent) + " trailing"
    assert deep_json.decode(text) == json.JSONDecoder().raw_decode(text)


@pytest.mark.parametrize(
    "text, message",
    [
        ("[1,]", "Unexpected ']'. at offset: 3"),
        ('{"a"}', "Unexpected '}'. at offset: 4"),
        ("[1 2]", "Unexpected '2'. at offset: 3"),
        ("{1: 2}", "Unexpected '1'. at offset: 1"),
        ('{"a": 1]', "Unexpected ']'. at offset: 7"),
        ("[" * 3000, "Invalid value. at offset: 3000"),
        ('["\\x"]', "Invalid \\escape: line 1 column 2 (char 1)"),
    ],
)
def test_decode_refuses_what_is_not_json(text, message):
    with pytest.raises(deep_json.DeepJSONError) as raised:
        deep_json.decode(text)
    assert str(raised.value).startswith(message.split(": line")[0])


def test_a_value_nested_100000_deep_is_read_and_quoted():
    value, end = deep_json.decode("[" * 100_000 + "1" + "]" * 100_000 + "x")
    assert end == 200_001
    assert deep_json.excerpt({"a": value, "b": 2}, 12) == '{"a":[[[[[[['
    assert deep_json.excerpt({"a": [1, {"b": "c"}]}) == '{"a":[1,{"b":"c"}]}'
