"""The fine-tuning benchmark's settings, the same for bertfit and the peer (issue 11)."""

SEQ, BATCH, LR, WARMUP, SEED, DECAY = 64, 32, 5e-5, 0.1, 42, 0.01
