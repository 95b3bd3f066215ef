"""The model's one backend seam: what only Keras' TensorFlow backend has, imported only there.

Keras picks its backend once per process (`KERAS_BACKEND`), so this is decided once, at import.
On TensorFlow the seam gives the modules that speak `tf.*` directly:

- `tf_kernels`: layer norm, dropout and GELU with their gradients written out (`model/layers.py`
  says why they pay for themselves on TensorFlow);
- `ReplicaJit`: XLA-compiled replica steps under a `tf.distribute` strategy
  (`model/replica_jit.py`), the mixin under `BertClassifier` and `ChunkedClassifier`;
- `recompute_layer`: `--remat` through `tf.recompute_grad` (`model/tf_remat.py`).

On any other backend (JAX: a TPU VM or a GPU machine without TensorFlow's wheel) none of them
is imported: `tf_kernels` is None, so its callers take the `keras.ops` path, and `ReplicaJit` is
an empty mixin (the model is Keras' own). On JAX `recompute_layer` is `jax.checkpoint`'s
(`model/jax_remat.py`); on other backends None (`--remat` is not there). `model/tracking.py` is
export's, not the model's, and is imported only by the SavedModel writers.
"""

from __future__ import annotations

import keras

TENSORFLOW = keras.backend.backend() == "tensorflow"

if TENSORFLOW:
    from bertfit.model import tf_kernels
    from bertfit.model.replica_jit import ReplicaJit
    from bertfit.model.tf_remat import recompute_layer
elif keras.backend.backend() == "jax":
    from bertfit.model.jax_remat import recompute_layer

    tf_kernels = None
else:
    tf_kernels = None
    recompute_layer = None

if not TENSORFLOW:

    class ReplicaJit:
        """On a backend other than TensorFlow there is no `tf.distribute` to work around:
        `class M(ReplicaJit, keras.Model)` is `keras.Model` itself."""


__all__ = ["TENSORFLOW", "ReplicaJit", "recompute_layer", "tf_kernels"]
