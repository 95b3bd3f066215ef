import numpy as np

from bertfit.data.buckets import (
    JAX_TRACE_TOKENS,
    MAX_BUCKETS,
    MAX_UNTRACED_BUCKETS,
    TRACE_TOKENS,
    UNTRACED,
    candidate_lengths,
    choose_buckets,
    epoch_cost,
    padding_share,
)

# a Rotten Tomatoes-like spread: most reviews 10-45 tokens, a few up to the limit
RNG = np.random.default_rng(0)
REVIEW_LENGTHS = np.clip(RNG.gamma(6, 4.5, 10_000).astype(int) + 2, 3, 200)


def test_buckets_end_at_max_seq_length_and_are_multiples_of_eight():
    buckets = choose_buckets(REVIEW_LENGTHS, 64, batch_size=32, epochs=3)
    assert buckets[-1] == 64
    assert all(b % 8 == 0 for b in buckets)
    assert 1 < len(buckets) <= MAX_BUCKETS


def test_longer_training_affords_more_buckets_and_less_padding():
    short = choose_buckets(REVIEW_LENGTHS, 64, batch_size=32, epochs=1)
    long = choose_buckets(REVIEW_LENGTHS, 64, batch_size=32, epochs=10)
    assert len(long) >= len(short)
    assert padding_share(REVIEW_LENGTHS, long) <= padding_share(REVIEW_LENGTHS, short)


def test_a_few_examples_use_one_bucket_a_trace_costs_more_than_their_padding():
    few = np.minimum(REVIEW_LENGTHS[:50], 128)
    buckets = choose_buckets(few, 128, batch_size=32, epochs=1)
    used = set(np.searchsorted(buckets, few))
    assert len(used) == 1


def test_the_choice_is_no_worse_than_the_fixed_quarters_it_replaces():
    chosen = choose_buckets(REVIEW_LENGTHS, 128, batch_size=32, epochs=3)
    clipped = np.minimum(REVIEW_LENGTHS, 128)

    def cost(buckets):
        counts = np.bincount(np.searchsorted(buckets, clipped), minlength=len(buckets))
        return epoch_cost(counts, buckets, 32)

    assert cost(chosen) < cost([32, 64, 128])


def test_an_unused_max_length_bucket_costs_no_trace():
    # every example fits in 24: the 512 bucket is never traced, so it must not crowd out others
    lengths = np.array([10] * 5000 + [22] * 5000)
    assert choose_buckets(lengths, 512, batch_size=32, epochs=3) == [16, 24, 512]


def test_candidates_and_padding_share():
    assert candidate_lengths(40) == [16, 24, 32, 40]
    assert candidate_lengths(50) == [16, 24, 32, 40, 48, 50]
    assert padding_share(np.array([8, 16]), [16]) == 0.25


def test_when_one_trace_serves_every_bucket_finer_buckets_pad_less():
    traced = choose_buckets(REVIEW_LENGTHS, 64, batch_size=32, epochs=1)
    untraced = choose_buckets(REVIEW_LENGTHS, 64, batch_size=32, epochs=1, trace_tokens=UNTRACED)
    assert len(traced) < len(untraced) <= MAX_UNTRACED_BUCKETS
    assert untraced[0] < 16 and any(b % 8 for b in untraced)
    assert padding_share(REVIEW_LENGTHS, untraced) < padding_share(REVIEW_LENGTHS, traced) / 2


def test_jax_compiles_a_bucket_for_less_so_a_short_run_gets_finer_buckets():
    """jax.jit's bucket costs ~0.4x TensorFlow's XLA trace (JAX_TRACE_TOKENS): where a run is
    short enough for the compile to weigh, JAX gets more buckets and pads less; the
    compiler each run uses says which (`XlaChoice.trace_tokens`)."""
    from bertfit.training.xla import JAX_XLA, XlaChoice

    lengths = REVIEW_LENGTHS[:6000]
    tensorflow = choose_buckets(lengths, 64, batch_size=32, epochs=3)
    jax = choose_buckets(lengths, 64, batch_size=32, epochs=3, trace_tokens=JAX_TRACE_TOKENS)
    assert len(jax) > len(tensorflow)
    assert padding_share(lengths, jax) < padding_share(lengths, tensorflow)
    assert JAX_XLA.trace_tokens == JAX_TRACE_TOKENS < TRACE_TOKENS
    assert XlaChoice(True, False, "").trace_tokens == TRACE_TOKENS
    assert XlaChoice(False, False, "").trace_tokens == UNTRACED


def test_buckets_are_resolved_once_from_the_setting_a_resumed_run_or_the_data():
    from bertfit.data.buckets import resolve_buckets

    def resolve(setting, saved=None):
        return resolve_buckets(
            setting,
            64,
            REVIEW_LENGTHS,
            batch_size=32,
            epochs=3,
            trace_tokens=TRACE_TOKENS,
            saved=saved,
        )

    assert resolve([32, 16]).lengths == (16, 32, 64) and resolve([32, 16]).note is None
    assert resolve("none").lengths == (64,)
    assert resolve("auto", saved=(24, 64)).lengths == (24, 64)  # a resumed run keeps its own
    chosen = resolve("auto")
    assert chosen.lengths == tuple(choose_buckets(REVIEW_LENGTHS, 64, batch_size=32, epochs=3))
    assert chosen.note.startswith(f"length buckets {', '.join(map(str, chosen.lengths))} chosen")


def test_bucket_lengths_are_normalised_in_one_place_for_training_and_inference():
    """`bucket_lengths` is what the dataset, the exported graph and `--buckets` all pad to:
    sorted, each once, with max_seq_length among them (added when missing)."""
    from bertfit.data.buckets import bucket_lengths, default_buckets, fixed_buckets

    assert bucket_lengths([64, 16, 64], 128) == (16, 64, 128)
    assert bucket_lengths([], 32) == (32,)
    assert fixed_buckets([64, 16, 64], 128) == bucket_lengths([64, 16], 128)
    assert default_buckets(128) == (32, 64, 128) and default_buckets(32) == (16, 32)
    assert default_buckets(8) == (8,)  # below 16 only max_seq_length
