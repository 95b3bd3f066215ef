"""JSON of any nesting depth, as TF Serving reads it.

TF Serving parses request bodies with rapidjson's iterative parser (`util/json_tensor.cc`,
`kParseIterativeFlag`), so a value nested 500000 deep under a key it ignores is accepted
(`json_tensor_test.cc` DeeplyNestedWellFormed). Python's `json` recurses and stops near 1000
levels; `decode` takes over there with an explicit stack, and `excerpt` quotes such a value in
an error message without recursing either.
"""

from __future__ import annotations

import json
import re

_TOKEN = re.compile(
    r"""[ \t\n\r]*(?:
      (?P<punct>[\[\]{}:,])
    | (?P<string>"(?:[^"\\\x00-\x1f]|\\.)*")
    | (?P<number>-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)
    | (?P<word>true|false|null|NaN|-?Infinity)
    )""",
    re.VERBOSE,
)
_WORDS = {
    "true": True,
    "false": False,
    "null": None,
    "NaN": float("nan"),
    "Infinity": float("inf"),
    "-Infinity": float("-inf"),
}


class DeepJSONError(ValueError):
    """Not JSON: `msg` says why, `pos` where (as `json.JSONDecodeError`)."""

    def __init__(self, msg: str, pos: int):
        super().__init__(f"{msg} at offset: {pos}")
        self.msg = msg
        self.pos = pos


def decode(text: str, start: int = 0) -> tuple[object, int]:
    """(the JSON value that starts at `start`, where it ends), at any depth: the grammar of
    `json.JSONDecoder().raw_decode` (NaN and Infinity too), with the open arrays and objects
    on a list instead of the call stack."""
    stack: list[list] = []  # [container, the key an object's next value goes to]
    state, pos = "value", start
    while True:
        match = _TOKEN.match(text, pos)
        if match is None:
            raise DeepJSONError("Invalid value.", pos)
        kind, token, pos = match.lastgroup, match.group(match.lastgroup), match.end()
        container = stack[-1][0] if stack else None
        closes = (token == "]" and isinstance(container, list)) or (
            token == "}" and isinstance(container, dict)
        )
        if state in ("value", "first value") and token in "[{" and kind == "punct":
            stack.append([[] if token == "[" else {}, None])
            state = "first value" if token == "[" else "first key"
            continue
        if state in ("value", "first value") and kind != "punct":
            value = _string(token, match.start(kind)) if kind == "string" else _scalar(kind, token)
        elif state in ("key", "first key") and kind == "string":
            stack[-1][1], state = _string(token, match.start(kind)), "colon"
            continue
        elif state == "colon" and token == ":":
            state = "value"
            continue
        elif state == "after" and token == ",":
            state = "value" if isinstance(container, list) else "key"
            continue
        elif closes and state in ("after", "first value", "first key"):
            value = stack.pop()[0]
        else:
            raise DeepJSONError(f"Unexpected {token!r}.", match.start(kind))
        if not stack:
            return value, pos
        if isinstance(stack[-1][0], list):
            stack[-1][0].append(value)
        else:
            stack[-1][0][stack[-1][1]] = value
        state = "after"


def _string(token: str, at: int) -> str:
    try:
        return json.loads(token)
    except json.JSONDecodeError as e:
        raise DeepJSONError(e.msg, at + e.pos) from None


def _scalar(kind: str, token: str):
    if kind == "word":
        return _WORDS[token]
    return float(token) if any(c in token for c in ".eE") else int(token)


def excerpt(value, limit: int = 1000) -> str:
    """`value` in compact JSON, cut at `limit` characters, at any depth."""
    try:
        return json.dumps(value, separators=(",", ":"))[:limit]
    except RecursionError:
        pass
    parts: list[str] = []
    size, todo = 0, [value]  # values, and closing text as str wrapped in a tuple
    while todo and size < limit:
        item = todo.pop()
        if isinstance(item, tuple):
            text = item[0]
        elif isinstance(item, list):
            text = "["
            todo.append(("]",))
            for index in range(len(item) - 1, -1, -1):
                todo.append(item[index])
                if index:
                    todo.append((",",))
        elif isinstance(item, dict):
            text = "{"
            todo.append(("}",))
            for index, (key, inner) in reversed(list(enumerate(item.items()))):
                todo.append(inner)
                todo.append((json.dumps(key) + ":",))
                if index:
                    todo.append((",",))
        else:
            text = json.dumps(item)
        parts.append(text)
        size += len(text)
    return "".join(parts)[:limit]
