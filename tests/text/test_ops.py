"""The tokenizer's two tensorflow-text ops, loaded without importing tensorflow_text: a process
that tokenizes does not carry the other 20 op libraries, and tensorflow_text still imports and
works beside them, in either order."""

import subprocess
import sys

import pytest
import tensorflow as tf

from bertfit.text import ops

TOKENIZE = (
    "from bertfit.text.tokenizer import BertTokenizer\n"
    "tokenizer = BertTokenizer(['[PAD]', '[UNK]', '[CLS]', '[SEP]', 'cafe', '##s'])\n"
    "print(tokenizer.tokenize(['Cafés']).to_list())\n"
)
WITH_TENSORFLOW_TEXT = (
    "import tensorflow as tf, tensorflow_text as text\n"
    "print(text.normalize_utf8(['é'], 'NFD').numpy()[0])\n"
    "table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(\n"
    "    ['a', '##b'], tf.constant([0, 1], tf.int64)), -1)\n"
    "print(text.WordpieceTokenizer(table, token_out_type=tf.int32).tokenize(['ab']).to_list())\n"
)


def _run(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\n")[:-1]


def test_tokenizing_leaves_tensorflow_text_unimported():
    code = TOKENIZE + "print('tensorflow_text' in sys.modules)\n"
    assert _run("import sys\n" + code) == ["[[4, 5]]", "False"]


@pytest.mark.parametrize("first", ["bertfit", "tensorflow_text"])
def test_tensorflow_text_works_beside_them_in_either_order(first):
    both = [TOKENIZE, WITH_TENSORFLOW_TEXT]
    code = "".join(both if first == "bertfit" else reversed(both))
    expected = ["[[4, 5]]", "b'e\\xcc\\x81'", "[[0, 1]]"]
    assert sorted(_run(code)) == sorted(expected)


def test_a_table_of_other_ids_is_refused_before_the_kernel_sees_it():
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(["a"], tf.constant([0], tf.int32)), -1
    )
    with pytest.raises(TypeError, match="int64"):
        ops.wordpiece_ids(tf.constant(["a"]), table, "[UNK]", 100)
