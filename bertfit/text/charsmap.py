"""A sentencepiece model's `precompiled_charsmap`, checked before TensorFlow's op reads it, and
the characters where a long text may be cut before the op normalizes it.

The charsmap is a little-endian uint32 (the trie's size in bytes), a Darts-clone double-array
trie of the rules' source strings, and the NUL-terminated replacement strings the trie's leaves
point into. The op trusts all of it: a damaged trie makes it fail ("Trie data size exceeds the
input blob size") or read past its buffer. `continuation_characters` walks the whole trie once
with every index checked, so a damaged file is refused here, naming what is wrong.

The walk also gives what `SentencePieceTokenizer` needs to stay linear on long texts: the op
merges a run of normalized characters into one piece by copying it again for each character
(quadratic: 115 s for 1 MB of ALBERT text). The normalizer matches the longest rule at each
position, left to right; a rule can only span a position whose character is one of its
non-first characters. Cut before any other character, the pieces normalize to the same text.
"""

from __future__ import annotations

import functools
import struct

import numpy as np

MAX_RULES_ON_A_PATH = 32  # sentencepiece's kMaxTrieResultsSize: its results buffer
MAX_KEY_BYTES = 256  # the longest rule source a charsmap may have (its own are under 40)
_BLOCK = 256  # children of a node lie in its 256-unit block


class DamagedCharsmap(ValueError):
    """The charsmap is not one sentencepiece wrote; the message says what is wrong."""


@functools.lru_cache(maxsize=8)
def continuation_characters(charsmap: bytes) -> frozenset[str]:
    """The characters that appear after the first character of some rule's source string
    (combining marks, voiced sound marks, ...); raises `DamagedCharsmap` for a damaged one.

    Examples:
    >>> continuation_characters(b"")
    frozenset()
    """
    if not charsmap:
        return frozenset()
    units, normalized = _parts(charsmap)
    ends = _string_ends(normalized)
    found: set[bytes] = set()
    seen: set[int] = set()
    # Each state: a trie position after a key prefix, that prefix's partly read character
    # (bytes so far, bytes still to come), whether its first character is complete, and the
    # most rules (leaves) passed on a way there. The trie is a DAWG: states repeat, walked once.
    base = _offset(units[:1])
    partial, pending = np.zeros(1, np.int64), np.zeros(1, np.int64)
    after_first, rules = np.zeros(1, bool), np.zeros(1, np.int64)
    labels = np.arange(1, _BLOCK, dtype=np.int64)  # texts reach the op without NUL bytes
    for _ in range(MAX_KEY_BYTES):
        if not len(base):
            return frozenset(_decode(found))
        if int(base.max()) | (_BLOCK - 1) >= len(units):
            raise DamagedCharsmap("a trie node points past the end of the trie")
        child = base[:, None] ^ labels[None, :]
        unit = units[child]
        row, column = np.nonzero((unit & 0x800000FF) == labels[None, :])
        child, unit, byte = child[row, column], unit[row, column], labels[column]
        partial, pending, complete = _read_utf8(partial[row], pending[row], byte)
        after_first, rules = after_first[row], rules[row]
        found.update(_character(value) for value in partial[complete & after_first].tolist())
        after_first = after_first | complete
        partial = np.where(complete, 0, partial)
        base = child ^ _offset(unit)
        leaf = ((unit >> 8) & 1).astype(bool)
        rules = rules + leaf
        if rules.max(initial=0) > MAX_RULES_ON_A_PATH:
            raise DamagedCharsmap(f"a key matches more than {MAX_RULES_ON_A_PATH} rules")
        _check_leaves(units, base[leaf], ends)
        state = (child << 27) | (partial << 3) | (pending << 1) | after_first
        new = np.zeros(len(state), bool)
        new[np.unique(state, return_index=True)[1]] = True
        new &= np.array([s not in seen for s in state.tolist()], bool)
        seen.update(state[new].tolist())
        base, partial, pending = base[new], partial[new], pending[new]
        after_first, rules = after_first[new], rules[new]
    raise DamagedCharsmap(f"a rule's source string is longer than {MAX_KEY_BYTES} bytes")


def _parts(charsmap: bytes) -> tuple[np.ndarray, bytes]:
    """The trie's units and the replacement strings."""
    if len(charsmap) < 4:
        raise DamagedCharsmap(f"it is {len(charsmap)} bytes, shorter than its size field")
    (size,) = struct.unpack("<I", charsmap[:4])
    if size == 0 or size % (4 * _BLOCK) or size > len(charsmap) - 4:
        raise DamagedCharsmap(
            f"its trie size field says {size} bytes, which does not fit the "
            f"{len(charsmap) - 4} bytes after it in whole blocks of {4 * _BLOCK}"
        )
    units = np.frombuffer(charsmap[4 : 4 + size], "<u4").astype(np.int64)
    return units, charsmap[4 + size :]


def _offset(unit: np.ndarray) -> np.ndarray:
    """Darts-clone's `offset()`: where a node's children start, xor-ed with their labels."""
    return (unit >> 10) << ((unit & (1 << 9)) >> 6)


def _string_ends(normalized: bytes) -> np.ndarray:
    """For each byte of the replacement strings, where its string's NUL is (-1: none)."""
    nul = np.frombuffer(normalized, np.uint8) == 0
    index = np.where(nul, np.arange(len(nul)), len(nul))
    ends = np.minimum.accumulate(index[::-1])[::-1]
    return np.where(ends < len(nul), ends, -1)


def _check_leaves(units: np.ndarray, leaf_base: np.ndarray, ends: np.ndarray) -> None:
    """A rule's value is where its replacement string starts; the string must end in a NUL."""
    if not len(leaf_base):
        return
    if int(leaf_base.max()) >= len(units):
        raise DamagedCharsmap("a rule's value lies past the end of the trie")
    values = units[leaf_base] & 0x7FFFFFFF
    if int(values.max()) >= len(ends) or (ends[values] < 0).any():
        raise DamagedCharsmap("a rule points past the end of its replacement strings")


def _character(value: int) -> bytes:
    """A character's UTF-8 bytes, read into an int."""
    return value.to_bytes(4, "big").lstrip(b"\0")


def _read_utf8(partial, pending, byte):
    """One more byte of each key's current character: (bytes so far, still to come,
    complete?). A byte that cannot come there in UTF-8 means a damaged trie."""
    lead = pending == 0
    length = np.select(
        [byte < 0x80, byte >> 5 == 6, byte >> 4 == 14, byte >> 3 == 30], [1, 2, 3, 4], 0
    )
    if (lead & (length == 0)).any() or (~lead & (byte >> 6 != 2)).any():
        raise DamagedCharsmap("a rule's source string is not UTF-8")
    pending = np.where(lead, length - 1, pending - 1)
    partial = partial << 8 | byte
    return partial, pending, pending == 0


def _decode(characters: set[bytes]) -> list[str]:
    try:
        return [character.decode("utf-8") for character in characters]
    except UnicodeDecodeError as error:
        raise DamagedCharsmap("a rule's source string is not UTF-8") from error
