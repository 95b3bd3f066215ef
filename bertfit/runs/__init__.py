"""A run as a format: what `bertfit train` leaves behind, read by everyone else.

`run_dir` (the directory's layout and readers, and a run at a URL read from a local copy),
`records` (metrics.json's epochs, evaluations and summary), `metrics` (the scores of each task),
`weights` (the checkpoint's variable names, and restoring a model from them). Training writes
runs (`bertfit.training`); inference, export, serve, report and sweeps read them through here,
so nothing that only reads a run imports training.
"""
