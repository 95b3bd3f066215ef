"""Known TF/XLA/Keras errors provoked for real, then explained by `explain_errors`."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import keras
import pytest
import tensorflow as tf

from bertfit.errors import BertfitError
from bertfit.translate import TranslatedError, explain_errors


def provoke(fn) -> TranslatedError:
    with pytest.raises(TranslatedError) as caught:
        with explain_errors():
            fn()
    error = caught.value
    assert isinstance(error, BertfitError) and error.__cause__ is error.original
    return error


def test_dynamic_concatenation_under_jit():
    @tf.function(jit_compile=True)
    def step(x):
        return tf.concat([x, tf.boolean_mask(x, x[:, 0] > 0)[None, :, 0]], axis=0)

    error = provoke(lambda: step(tf.constant([[1, 2, 3], [1, 0, 0]])))
    assert error.code == "xla-dynamic-concat"
    assert "size depends on the data" in str(error) and "drop_remainder=True" in str(error)


def test_ragged_op_in_the_compiled_step():
    @tf.function(jit_compile=True)
    def step(x):
        return tf.RaggedTensor.from_tensor(x, padding=0).to_tensor()

    error = provoke(lambda: step(tf.constant([[1, 1, 0], [1, 0, 0]])))
    assert error.code == "xla-unsupported-op"
    assert "RaggedTensorToTensor" in str(error) and "pad them in the input pipeline" in str(error)


def test_strings_in_the_compiled_step():
    step = tf.function(lambda texts: tf.strings.length(texts), jit_compile=True)
    error = provoke(lambda: step(tf.constant(["a fine film"])))
    assert error.code == "xla-string-input" and "tokenize outside" in str(error)


def test_keras2_layer_in_a_keras3_model():
    tf_keras = pytest.importorskip("tf_keras")
    error = provoke(lambda: keras.Sequential([tf_keras.layers.Dense(2)]))
    assert error.code == "keras-mixed-versions"
    assert "Keras 2 (tf_keras" in str(error) and "bertfit.load_encoder" in str(error)


def test_saved_function_called_with_the_wrong_signature(tmp_path):
    class Scorer(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
        def __call__(self, ids):
            return ids + 1

    tf.saved_model.save(Scorer(), str(tmp_path))
    loaded = tf.saved_model.load(str(tmp_path))
    error = provoke(lambda: loaded(tf.constant([[1.0, 2.0]])))
    assert error.code == "signature-mismatch"
    assert "match none of its signatures" in str(error) and "bertfit inspect" in str(error)


def test_placeholder_without_a_value():
    def run_graph():
        with tf.Graph().as_default():
            ids = tf.compat.v1.placeholder(tf.int32, [None], name="input_ids")
            with tf.compat.v1.Session() as session:
                session.run(ids * 2)

    error = provoke(run_graph)
    assert error.code == "graph-placeholder" and "'input_ids'" in str(error)


def test_unknown_errors_pass_through_untouched():
    with pytest.raises(ZeroDivisionError):
        with explain_errors():
            1 / 0  # noqa: B018


STRATEGY_SCRIPT = textwrap.dedent("""
    import keras, tensorflow as tf
    from bertfit.translate import TranslatedError, explain_errors
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        weights = keras.Variable(tf.ones([2]))
    optimizer = keras.optimizers.AdamW(1e-3)  # outside the scope: slots made on first apply

    def replica_step():
        optimizer.apply([tf.ones([2])], [weights])

    try:
        with explain_errors():
            tf.function(lambda: strategy.run(replica_step))()
    except TranslatedError as e:
        print("CODE", e.code, "|", e)
    with tf.device("/cpu:1"):
        other = tf.Variable(1.0)

    @tf.function(jit_compile=True)
    def step():
        with tf.device("/cpu:0"):
            return other * 2

    try:
        with explain_errors():
            step()
    except TranslatedError as e:
        print("CODE", e.code, "|", e)
""")


@pytest.mark.distributed
def test_strategy_scope_errors_in_a_subprocess():
    out = subprocess.run(
        [sys.executable, "-c", STRATEGY_SCRIPT], capture_output=True, text=True, timeout=300
    ).stdout
    lines = [line for line in out.splitlines() if line.startswith("CODE")]
    assert len(lines) == 2, out
    assert lines[0].startswith("CODE strategy-mixed") and "strategy.scope()" in lines[0]
    assert lines[1].startswith("CODE strategy-resource-device") and "CPU:1" in lines[1]


def test_inputs_longer_than_the_position_table_are_refused_with_and_without_xla():
    import tensorflow as tf

    from bertfit.errors import InputFormatError
    from bertfit.translate import translate
    from tests.tiny import TINY_CONFIG, tiny_encoder, tiny_inputs

    encoder = tiny_encoder()
    long = tiny_inputs(batch=2, seq=TINY_CONFIG.max_position_embeddings + 16)
    specs = {k: tf.TensorSpec([None, None], tf.int32) for k in long}
    for jit in (False, True):
        static = tf.function(lambda x: encoder(x)["sequence_output"], jit_compile=jit)
        with pytest.raises(InputFormatError, match="80 tokens long but this encoder has 64"):
            static(long)
        dynamic = tf.function(
            lambda x: encoder(x)["sequence_output"], jit_compile=jit, input_signature=[specs]
        )
        with pytest.raises(tf.errors.InvalidArgumentError) as caught:  # never clamped
            dynamic(long)
        explained = translate(caught.value)
        assert explained.code == "input-longer-than-positions" and "64 rows" in str(explained)


def _raised(error: BaseException) -> TranslatedError:
    def fail():
        raise error

    return provoke(fail)


def test_keras_jit_fit_under_mirrored_is_explained_as_one_xla_cluster_over_replicas():
    """The message Keras' compile(jit_compile=True) + fit under MirroredStrategy over two CPUs
    raises in TF 2.21 (as seen when reproducing issue 10), not provoked here: it needs a
    poisoned two-device process."""
    message = (
        "Trying to access resource dense/kernel/replica_1_4 (defined @ keras/src/backend/"
        "tensorflow/core.py:43) located in device /job:localhost/replica:0/task:0/device:CPU:1 "
        "from device /job:localhost/replica:0/task:0/device:CPU:0"
    )
    error = _raised(tf.errors.InvalidArgumentError(None, None, message))
    assert error.code == "strategy-replica-under-one-xla"
    assert "ReplicaJitModel" in str(error) and "outside strategy.scope" not in str(error)
    plain = _raised(
        tf.errors.InvalidArgumentError(None, None, message.replace("replica_1_4", "kernel_7"))
    )
    assert plain.code == "strategy-resource-device"


def test_an_uninitialised_variable_under_xla_names_preprocessing_in_the_model():
    message = (
        "RET_CHECK failure (tensorflow/compiler/jit/xla_launch_util.cc:245) "
        "variable.var()->is_initialized Trying to read an uninitialized variable"
    )
    error = _raised(tf.errors.InternalError(None, None, message))
    assert error.code == "xla-uninitialized-variable"
    assert "tf.data pipeline" in str(error)
