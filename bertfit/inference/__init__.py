"""A trained classifier at work: `predictor` loads one (a run or an export) around its graph
(`graph`), `outputs` says what its logits mean, `run` evaluates and predicts files, and
`predictions_file` writes `bertfit predict`'s output. `bertfit export` and `bertfit serve` are
built on it."""
