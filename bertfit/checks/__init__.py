"""`bertfit check` and `bertfit.check(...)`: find shape, dtype, input, data and gradient problems
before compiling.

    report = bertfit.check(config)                                 # as `bertfit train` would run
    report = bertfit.check(dataset=ds, encoder=encoder, target="tpu")   # a tf.data pipeline
    print(report.render()); report.codes

`api.py` is `check`; `data.py`, `batches.py` and `model.py` hold the checks; `findings.py` the
`Report`. Known TensorFlow/XLA errors are explained by `bertfit.translate`.
"""
