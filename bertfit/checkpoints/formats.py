"""The names of the TensorFlow checkpoint formats that `detect` tells apart and their readers
(`savedmodel`, `hub_module`) produce: here, apart from both, so that detecting imports no
TensorFlow."""

# What `savedmodel.inspect_savedmodel` finds a SavedModel to be
REUSABLE, SIGNATURE_ONLY = "tf2-savedmodel", "tf2-savedmodel-signature"
TF1_SAVEDMODEL = "tf1-savedmodel-signature"  # a TF1 SavedModel: signatures, no object graph
PREPROCESSING = "preprocessing"

MODULE_FILE = "tfhub_module.pb"  # marks a TF1 Hub module
