"""`bertfit check`: find shape, dtype, input, data and gradient problems before compiling.

    report = bertfit.check(config)                                 # as `bertfit train` would run
    report = bertfit.check(dataset=ds, encoder=encoder, target="tpu")   # a tf.data pipeline
    print(report.render()); report.codes

`explain_errors()` turns known TensorFlow/XLA errors into plain-language `BertfitError`s.
"""

import sys
import types

from bertfit.check.findings import Finding, Report
from bertfit.translate import TranslatedError, explain_errors, translate

__all__ = ["Finding", "Report", "TranslatedError", "check", "explain_errors", "translate"]


class _CallableModule(types.ModuleType):
    """`bertfit.check(...)` runs the checks although `bertfit.check` is this package."""

    def __call__(self, *args, **kwargs) -> Report:
        from bertfit.check.api import check

        return check(*args, **kwargs)

    def __getattr__(self, name: str):
        # `check` is imported lazily: it needs bertfit.train.run, which imports explain_errors.
        if name == "check":
            from bertfit.check.api import check

            return check
        raise AttributeError(f"module 'bertfit.check' has no attribute {name!r}")


sys.modules[__name__].__class__ = _CallableModule
