"""Sweeps and k-fold cross-validation over normal bertfit runs (`bertfit tune`).

`spec` (the grid, seeds, folds, budget), `flags` (the CLI's flags), `folds` (stratified
splits), `fold_data` (fold files, out-of-fold predictions), `sweep_dir` (the directory),
`results` (scores and the choice), `tune` (the loop), `report` (report.html). Importing the
package loads nothing heavy: `bertfit.sweeps.tune` loads TensorFlow.
"""
