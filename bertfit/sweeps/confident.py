"""Confident learning (Northcutt, Jiang and Chuang, 2021): which given labels are likely wrong,
from out-of-fold predicted probabilities alone (numpy; single-label classification).

1. Per-class thresholds: t_j = the mean predicted probability of class j over the rows labelled
   j (how sure the model is of a class when the label is right, on average).
2. The confident joint C[i][j]: the rows labelled i whose probability of class j reaches t_j
   (the most probable such class when several do); a row that reaches no threshold is counted
   nowhere. Its off-diagonal counts rows confidently of another class than their label.
3. Calibrated, C̃[i] = C[i] / sum(C[i]) × (rows labelled i): each row sums to its label's count,
   so C̃ / n estimates the joint distribution of given and true labels, and n - trace(C̃) the
   number of wrong labels (`estimated_wrong`: cleanlab's num_label_issues with
   estimation_method="off_diagonal_calibrated"). cleanlab's default estimate instead counts the
   rows in C's off-diagonal that the model does not predict as labelled (`off_diagonal`,
   "off_diagonal"): fewer when a class's rows reach no threshold, which C̃ spreads back.
4. Flagged rows, by one of two rules:
   - "prune-by-noise-rate" (cleanlab's default): for each given i and other class j, the
     round(C̃[i][j]) rows labelled i with the largest margin p_j - p_i;
   - "confident-joint": the off-diagonal rows of C (confidently of another class).
   Either way, a row the model predicts as labelled (argmax p = its label) is never flagged, and
   every class keeps at least one row.
5. Ranked by the given label's quality, lowest first: "self-confidence" (p of the given label)
   or "normalized-margin" ((p_given - max other p + 1) / 2); both lie in [0, 1].
6. A review budget (`within_budget`) keeps only the first of the ranked rows.

The calibrated joint counts the out-of-fold model's own mistakes as wrong labels: folds right on
75% of the rows see hundreds of "wrong labels" among 3,000 rows with 150 flipped.
`wrong_labels_seen` estimates how many wrong labels the model actually sees, from the model's
doubt where it agrees with the label; the audit flags that many of the ranking by default.
"""

from __future__ import annotations

import dataclasses

import numpy as np

METHODS = ("prune-by-noise-rate", "confident-joint")
RANKINGS = ("self-confidence", "normalized-margin")
# How many of a method's rows the audit flags: as many as the folds see wrong
# (`wrong_labels_seen`), or all of them (cleanlab's set).
FLAG_RULES = ("seen", "all")
# `wrong_labels_seen` trusts a cut only with this many disagreeing rows below it: a ratio of
# fewer is mostly noise.
MIN_ROWS_BELOW_CUT = 10


@dataclasses.dataclass
class LabelIssues:
    """What confident learning found in n rows of m classes.

    thresholds: t_j [m]; confident_joint: C [m, m] counts (rows: given label, columns: the
    confident class); calibrated_joint: C̃ [m, m]; flagged: [n] bool; quality: the given
    label's quality [n] (lower: more likely wrong); suggested: argmax p [n]; ranked: the
    flagged rows' indices, lowest quality first (ties: the earlier row); off_diagonal: the
    rows confidently of another class than their label that the model does not predict as
    labelled."""

    thresholds: np.ndarray
    confident_joint: np.ndarray
    calibrated_joint: np.ndarray
    flagged: np.ndarray
    quality: np.ndarray
    suggested: np.ndarray
    ranked: np.ndarray
    off_diagonal: int

    @property
    def estimated_wrong(self) -> float:
        """The number of wrong labels the calibrated joint estimates: n - its trace."""
        return float(self.calibrated_joint.sum() - np.trace(self.calibrated_joint))


def per_class_thresholds(labels: np.ndarray, probabilities: np.ndarray) -> np.ndarray:
    """t_j: the mean probability of class j over the rows labelled j (infinite for a class
    no row has: nothing is confidently of it).

    Examples:
    >>> per_class_thresholds(np.array([0, 0, 1]), np.array([[0.9, 0.1], [0.5, 0.5], [0.2, 0.8]]))
    array([0.7, 0.8])
    """
    m = probabilities.shape[1]
    return np.array(
        [probabilities[labels == j, j].mean() if (labels == j).any() else np.inf for j in range(m)]
    )


def confident_classes(probabilities: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Each row's confident class: the most probable class whose probability reaches its
    threshold; -1 where none does."""
    reached = probabilities >= thresholds - 1e-9  # the threshold is a mean of the same floats
    masked = np.where(reached, probabilities, -np.inf)
    return np.where(reached.any(axis=1), masked.argmax(axis=1), -1)


def confident_joint(labels: np.ndarray, confident: np.ndarray, m: int) -> np.ndarray:
    """C[i][j]: rows labelled i whose confident class is j."""
    counted = confident >= 0
    joint = np.zeros((m, m), np.int64)
    np.add.at(joint, (labels[counted], confident[counted]), 1)
    return joint


def calibrate(joint: np.ndarray, label_counts: np.ndarray) -> np.ndarray:
    """C̃: each row of C scaled to sum to its label's count (a row of C with no counts keeps
    its label's rows on the diagonal: nothing says they are wrong)."""
    totals = joint.sum(axis=1, keepdims=True)
    scaled = np.where(totals > 0, joint / np.maximum(totals, 1), np.eye(len(joint)))
    return scaled * label_counts[:, None]


def label_quality(labels: np.ndarray, probabilities: np.ndarray, rank_by: str) -> np.ndarray:
    """The given label's quality in [0, 1] (`RANKINGS`); lower: more likely wrong."""
    given = probabilities[np.arange(len(labels)), labels]
    if rank_by == "self-confidence":
        return given
    if rank_by == "normalized-margin":
        others = probabilities.copy()
        others[np.arange(len(labels)), labels] = -np.inf
        return (given - others.max(axis=1) + 1) / 2
    raise ValueError(f"unknown ranking {rank_by!r}")


def find_label_issues(
    labels: np.ndarray,
    probabilities: np.ndarray,
    method: str = "prune-by-noise-rate",
    rank_by: str = "self-confidence",
) -> LabelIssues:
    """Confident learning over `labels` [n] (class ids 0..m-1) and out-of-fold
    `probabilities` [n, m] (rows sum to 1); see the module docstring.

    Examples:
    >>> p = np.array([[0.9, 0.1], [0.8, 0.2], [0.1, 0.9], [0.9, 0.1], [0.2, 0.8]])
    >>> issues = find_label_issues(np.array([0, 0, 1, 1, 1]), p)
    >>> issues.ranked.tolist(), issues.suggested[issues.ranked].tolist()
    ([3], [0])
    """
    labels = np.asarray(labels, np.int64)
    probabilities = np.asarray(probabilities, np.float64)
    n, m = probabilities.shape
    thresholds = per_class_thresholds(labels, probabilities)
    confident = confident_classes(probabilities, thresholds)
    joint = confident_joint(labels, confident, m)
    calibrated = calibrate(joint, np.bincount(labels, minlength=m).astype(np.float64))
    if method == "prune-by-noise-rate":
        flagged = _prune_by_noise_rate(labels, probabilities, calibrated)
    elif method == "confident-joint":
        flagged = (confident >= 0) & (confident != labels)
    else:
        raise ValueError(f"unknown method {method!r}")
    suggested = probabilities.argmax(axis=1)
    off_diagonal = int(np.sum((confident >= 0) & (confident != labels) & (suggested != labels)))
    flagged &= suggested != labels
    quality = label_quality(labels, probabilities, rank_by)
    _keep_one_per_class(flagged, labels, quality, m)
    rows = np.flatnonzero(flagged)
    ranked = rows[np.argsort(quality[rows], kind="stable")]
    return LabelIssues(
        thresholds, joint, calibrated, flagged, quality, suggested, ranked, off_diagonal
    )


def within_budget(
    issues: LabelIssues, top: int | None = None, max_fraction: float | None = None
) -> LabelIssues:
    """`issues` with at most `top` flagged rows and at most `max_fraction` of all rows flagged
    (rounded down), the most likely wrong kept; None: no limit.

    Examples:
    >>> p = np.array([[0.9, 0.1], [0.3, 0.7], [0.2, 0.8], [0.6, 0.4], [0.2, 0.8], [0.1, 0.9]])
    >>> issues = find_label_issues(np.array([0, 0, 0, 1, 1, 1]), p)
    >>> issues.ranked.tolist(), within_budget(issues, top=1).ranked.tolist()
    ([2, 1, 3], [2])
    >>> within_budget(issues, max_fraction=0.4).ranked.tolist()  # 40% of 6 rows: 2
    [2, 1]
    """
    limits = [len(issues.ranked)]
    if top is not None:
        limits.append(top)
    if max_fraction is not None:
        limits.append(int(max_fraction * len(issues.flagged)))
    kept = issues.ranked[: min(limits)]
    flagged = np.zeros_like(issues.flagged)
    flagged[kept] = True
    return dataclasses.replace(issues, flagged=flagged, ranked=kept)


def wrong_labels_seen(labels: np.ndarray, probabilities: np.ndarray) -> float | None:
    """How many given labels the out-of-fold model sees as wrong and is right about; None when
    too few rows disagree with their label to say (fewer than `MIN_ROWS_BELOW_CUT`).

    A wrong label the model sees through gets the probability the model gives its runner-up
    class when it is right (its doubt: 1 - max p with two classes), distributed as on the
    rows where the model agrees with the label (mostly right labels). So of V such rows,
    V × H(τ) have a
    given-label probability of at most τ, H being that doubt's distribution; the model's
    own mistakes add the rest of the D(τ) disagreeing rows at most τ. Each cut τ bounds
    V <= D(τ) / H(τ), and the estimate is the tightest bound over the cuts at the doubt's
    deciles (mixture proportion estimation: a mistake the model makes as surely as it is
    right counts; a cut at every value instead would pick the noise of the smallest counts).

    Examples:
    >>> agreeing = [[0.95, 0.05]] * 40 + [[0.85, 0.15]] * 40  # doubt 0.05 or 0.15
    >>> seen = [[0.05, 0.95]] * 10 + [[0.15, 0.85]] * 10  # as sure of class 1
    >>> unsure = [[0.4, 0.6]] * 30  # the model's own mistakes, most likely
    >>> wrong_labels_seen(np.zeros(130, np.int64), np.array(agreeing + seen + unsure))
    20.0
    """
    labels = np.asarray(labels, np.int64)
    probabilities = np.asarray(probabilities, np.float64)
    given = probabilities[np.arange(len(labels)), labels]
    agrees = probabilities.argmax(axis=1) == labels
    doubt = np.sort(np.sort(probabilities[agrees], axis=1)[:, -2])  # the runner-up's
    disagreeing = np.sort(given[~agrees])
    if not len(doubt) or len(disagreeing) < MIN_ROWS_BELOW_CUT:
        return None
    cuts = np.quantile(doubt, np.linspace(0.1, 0.9, 9))
    below = np.searchsorted(disagreeing, cuts, side="right")
    share = np.searchsorted(doubt, cuts, side="right") / len(doubt)
    usable = (below >= MIN_ROWS_BELOW_CUT) & (share > 0)
    if not usable.any():
        return None
    return float(min(np.min(below[usable] / share[usable]), len(disagreeing)))


def _prune_by_noise_rate(
    labels: np.ndarray, probabilities: np.ndarray, calibrated: np.ndarray
) -> np.ndarray:
    """For each given class i and other class j, the round(C̃[i][j]) rows labelled i with the
    largest p_j - p_i (ties: the earlier row)."""
    flagged = np.zeros(len(labels), bool)
    m = calibrated.shape[0]
    for i in range(m):
        rows = np.flatnonzero(labels == i)
        for j in range(m):
            count = int(np.rint(calibrated[i, j]))
            if i == j or count == 0:
                continue
            margin = probabilities[rows, j] - probabilities[rows, i]
            flagged[rows[np.argsort(-margin, kind="stable")[:count]]] = True
    return flagged


def _keep_one_per_class(flagged: np.ndarray, labels: np.ndarray, quality: np.ndarray, m: int):
    """Unflags the best row of a class whose every row was flagged (dropping the flagged rows
    must leave every class in the data)."""
    for j in range(m):
        rows = np.flatnonzero(labels == j)
        if len(rows) and flagged[rows].all():
            flagged[rows[np.argmax(quality[rows])]] = False
