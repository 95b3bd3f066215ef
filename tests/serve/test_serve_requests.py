"""The REST app in-process: every request the model cannot take is a 400 naming its instance,
one bad request never fails the requests it shares a batch with, and no fault is a 500."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertfit.inference.graph import IdLimits
from bertfit.inference.predictor import load_classifier
from bertfit.serve.app import ModelServer
from bertfit.serve.batching import DynamicBatcher
from bertfit.serve.core import cut_example, cut_text, text_bound
from tests.serve.asgi import call, exchange, serving
from tests.tiny import sentiment_rows

PREDICT = "/v1/models/sst:predict"
TEXTS = [t for t, _ in sentiment_rows(24, seed=31)]


@pytest.fixture(scope="module")
def classifier(trained_run):
    _, result = trained_run
    return load_classifier(result.run_dir)


@pytest.fixture(scope="module")
def expected(classifier):
    return dict(zip(TEXTS, classifier.predict_proba(TEXTS), strict=True))


def _server(classifier, **options) -> ModelServer:
    return ModelServer(classifier, "sst", max_batch=64, max_wait=0.05, **options)


def _ids(word_ids, mask=None, type_ids=None) -> dict:
    return {
        "input_word_ids": word_ids,
        "input_mask": [1] * len(word_ids) if mask is None else mask,
        "input_type_ids": [0] * len(word_ids) if type_ids is None else type_ids,
    }


def test_a_lone_surrogate_fails_only_its_own_request_in_a_shared_batch(classifier, expected):
    # The hostile trial: 28 well-behaved clients and 4 sending "\ud800" at the same time.
    server = _server(classifier)
    bodies = [{"instances": [TEXTS[i % len(TEXTS)]]} for i in range(28)]
    for i in range(4):
        bodies.insert(7 * i + 3, {"instances": [TEXTS[0], "fine \ud800 text"]})

    async def scenario(app):
        return await asyncio.gather(*(call(app, PREDICT, body) for body in bodies))

    answers = serving(server, scenario)
    for body, (status, answer) in zip(bodies, answers, strict=True):
        if len(body["instances"]) == 2:
            assert status == 400
            assert "instance 1: input 'text' has a lone surrogate '\\ud800'" in answer["error"]
        else:
            assert status == 200, answer
            np.testing.assert_allclose(
                answer["predictions"][0]["probabilities"], expected[body["instances"][0]], atol=1e-5
            )
    assert server.batcher.batches < len(bodies)  # they did share batches


@pytest.mark.parametrize(
    "instances, message",
    [
        (
            [_ids([2, 5, 3]), _ids([2, 41, 3])],
            "instance 1: input 'input_word_ids' has 41 at position 1; ids must be in [0, 41)",
        ),
        ([_ids([2, 2**31, 3])], "has 2147483648 at position 1; ids must be in [0, 41)"),
        ([_ids([2, 2**64 + 5, 3])], "has 18446744073709551621 at position 1"),
        ([_ids([-1, 5, 3])], "has -1 at position 0; ids must be in [0, 41)"),
        ([_ids([-(2**31) - 1, 5, 3])], "has -2147483649 at position 0"),
        ([_ids([2] + [5] * 63 + [3])], "instance 0: 65 ids; the model takes at most 64 per row"),
        ([_ids([2, 5, 3], type_ids=[0, 2, 0])], "type ids must be in [0, 2)"),
        ([_ids([2, 5, 3], type_ids=[0, -1, 0])], "'input_type_ids' has -1 at position 1"),
        ([_ids([])], "instance 0: input 'input_word_ids' is empty"),
        ([_ids([2, 5, 3], mask=[1])], "instance 0: input_word_ids has 3, input_mask has 1"),
        ([_ids([2, 5, 3], mask=[1, 7, 1])], "input_mask values must be 0 (padding) or 1"),
        ([_ids([2, 5, 3]), _ids([2, 5, 5, 3])], "instance 1 has 4 ids but instance 0 has 3"),
        ([_ids([2, 1.5, 3])], "'input_word_ids' must be a list of integers"),
        ([_ids([2, True, 3])], "'input_word_ids' must be a list of integers"),
        ([_ids([[2, 5, 3]])], "'input_word_ids' must be a list of integers"),
    ],
)
def test_ids_the_model_cannot_take_are_400s_naming_the_instance(classifier, instances, message):
    server = _server(classifier)
    body = {"signature_name": "classify_ids", "instances": instances}
    status, answer = serving(server, lambda app: call(app, PREDICT, body))
    assert status == 400 and set(answer) == {"error"}
    assert message in answer["error"]


def test_the_longest_row_the_position_table_holds_is_answered(classifier):
    server = _server(classifier)
    body = {"signature_name": "classify_ids", "instances": [_ids([2] + [5] * 62 + [3])] * 2}
    status, answer = serving(server, lambda app: call(app, PREDICT, body))
    assert status == 200 and len(answer["predictions"]) == 2


@pytest.mark.parametrize(
    "body, message",
    [
        ({"inputs": {"text": ["a"], "txet": ["b"]}}, "unknown inputs ['txet']"),
        ({"inputs": {"text": ["ok", "\udfff"]}}, "instance 1: input 'text' has a lone surrogate"),
        ({"instances": [{"text": "a\ud800b"}]}, "at character 1"),
        ({"instances": ["a"], "signature_name": "\ud800"}, 'name: "\\ud800" not found'),
    ],
)
def test_texts_that_are_not_unicode_are_400s(classifier, body, message):
    status, answer = serving(_server(classifier), lambda app: call(app, PREDICT, body))
    assert status == 400 and message in answer["error"]


def test_what_the_model_itself_refuses_is_a_400_with_its_reason(classifier):
    # Without the limits the checks before batching would use, the graph's own asserts refuse.
    server = _server(classifier)
    server.limits = IdLimits()
    body = {"signature_name": "classify_ids", "instances": [_ids([2, 400, 3])]}
    status, answer = serving(server, lambda app: call(app, PREDICT, body))
    assert status == 400
    assert answer["error"].startswith("the model refused the request: assertion failed: ")
    assert "input_word_ids must be < 41 (the vocabulary size)" in answer["error"]


def test_each_served_text_is_tokenized_once_in_one_model_call_per_batch(
    classifier, expected, monkeypatch
):
    # The dynamic batcher's batch is the model's: it is not sorted by length and cut again,
    # which would tokenize every text twice (once to count its tokens).
    server = _server(classifier)
    module, calls = classifier.module, []

    def counted(name):
        function = getattr(module, name)

        def call_and_count(*columns):
            calls.append((name, [t.decode() for t in columns[0].numpy()]))
            return function(*columns)

        return call_and_count

    for name in ("classify_text", "token_lengths"):
        monkeypatch.setattr(module, name, counted(name))
    bodies = [{"instances": TEXTS[i : i + 2]} for i in range(0, 24, 2)]

    async def scenario(app):
        return await asyncio.gather(*(call(app, PREDICT, body) for body in bodies))

    for body, (status, answer) in zip(bodies, serving(server, scenario), strict=True):
        assert status == 200, answer
        np.testing.assert_allclose(
            [row["probabilities"] for row in answer["predictions"]],
            [expected[text] for text in body["instances"]],
            atol=1e-5,
        )
    assert [name for name, _ in calls] == ["classify_text"] * server.batcher.batches
    assert sorted(text for _, texts in calls for text in texts) == sorted(TEXTS)
    assert server.batcher.batches < len(bodies)  # they did share batches


def test_a_request_larger_than_max_batch_runs_in_calls_of_max_batch(classifier, monkeypatch):
    server = ModelServer(classifier, "sst", max_batch=5, max_wait=0.0)
    module, sizes = classifier.module, []
    classify_text = module.classify_text

    def counted(*columns):
        sizes.append(len(columns[0].numpy()))
        return classify_text(*columns)

    monkeypatch.setattr(module, "classify_text", counted)
    status, answer = serving(server, lambda app: call(app, PREDICT, {"instances": TEXTS[:12]}))
    assert status == 200 and len(answer["predictions"]) == 12
    assert sizes == [5, 5, 2]


def test_a_broken_server_answers_500_with_a_json_body(classifier):
    server = _server(classifier)

    def broken(rows):
        raise RuntimeError("the model file went away")

    server.batcher.run_batch = broken
    status, answer = serving(server, lambda app: call(app, PREDICT, {"instances": ["a"]}))
    assert status == 500
    assert answer == {"error": "internal error: RuntimeError: the model file went away"}


def batching(batcher: DynamicBatcher, work):
    """The result of `work()` (awaitable) with `batcher` started, stopped after it."""

    async def scenario():
        batcher.start()
        try:
            return await work()
        finally:
            await batcher.stop()

    return asyncio.run(scenario())


def test_a_failed_batch_is_retried_request_by_request():
    def run_batch(rows):
        if "poison" in rows:
            raise ValueError("poisoned batch")
        return [row.upper() for row in rows]

    batcher = DynamicBatcher(run_batch, max_batch=64, max_wait=0.05)
    requests = [["a", "b"], ["poison"], ["c"], ["d", "poison", "e"], ["f"]]
    results = batching(
        batcher,
        lambda: asyncio.gather(*(batcher.submit(r) for r in requests), return_exceptions=True),
    )
    assert results[0] == ["A", "B"] and results[2] == ["C"] and results[4] == ["F"]
    assert all(isinstance(results[i], ValueError) for i in (1, 3))
    assert batcher.batches == 1 + len(requests)  # the shared batch, then each request alone


def test_rows_that_queued_while_the_model_ran_go_together_when_it_ends():
    """TF Serving's batch timeout counts from the first row's arrival: rows that arrived while
    the model ran (longer than max_wait) share the next batch, which does not wait max_wait
    again once the model is free."""
    batches = []

    def run_batch(rows):
        batches.append((time.monotonic(), rows))
        time.sleep(0.5)
        return rows

    batcher = DynamicBatcher(run_batch, max_batch=64, max_wait=0.3)

    async def a_then_b_and_c():
        first = asyncio.ensure_future(batcher.submit(["a"]))
        await asyncio.sleep(0.35)  # "a" runs from 0.3 to 0.8; "b" and "c" wait from 0.35
        later = await asyncio.gather(batcher.submit(["b"]), batcher.submit(["c"]))
        assert later == [["b"], ["c"]] and await first == ["a"]

    batching(batcher, a_then_b_and_c)
    (first_started, first_rows), (next_started, next_rows) = batches
    assert (first_rows, next_rows) == (["a"], ["b", "c"])
    assert next_started - first_started < 0.65  # 0.5 (the run); waiting again would be 0.8


def test_batch_threads_run_that_many_batches_at_once_and_no_more():
    """TF Serving's num_batch_threads: the next batch starts while one runs, up to the limit."""
    lock, running, most = threading.Lock(), [0], [0]

    def run_batch(rows):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        return rows

    batcher = DynamicBatcher(run_batch, max_batch=1, max_wait=0.0, batches_at_once=2)

    answers = batching(batcher, lambda: asyncio.gather(*(batcher.submit([t]) for t in "abcde")))
    assert answers == [[text] for text in "abcde"]
    assert batcher.batches == 5 and most[0] == 2


# The fuzz: Hypothesis draws one seed per round, and a Random with that seed builds the round's
# bodies (Hypothesis' own strategies would cost far more per body). Every round sends its
# hostile bodies and valid requests at once, so they share batches.
ROUNDS, HOSTILE_PER_ROUND, VALID_PER_ROUND = 8, 40, 16
POOL = ["a", "film", " ", "good", "bad", "\ud800", "\udfff", "\x00", "\u00e9", "\U0001f600"]
POOL += ["[SEP]", "\u2028", '"', "\\", "{", "]"]
NUMBERS = [0, 1, 2, 3, 40, 41, -1, 2**31 - 1, 2**31, -(2**31), 2**63, 2**70, 0.5, 1e308]
NUMBERS += [float("nan"), float("inf"), True, False, None, "1", [1]]
KEYS = ["instances", "inputs", "signature_name", "text", "text_pair", "input_word_ids"]
KEYS += ["input_mask", "input_type_ids", "", "\ud800"]


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(POOL) for _ in range(rng.randrange(6)))


def _value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(7 if depth < 4 else 3)
    if kind == 0:
        return rng.choice(NUMBERS)
    if kind in (1, 2):
        return _text(rng)
    if kind in (3, 4):
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(KEYS): _value(rng, depth + 1) for _ in range(rng.randrange(4))}


def _id_row(rng: random.Random, length: int) -> list:
    row = [rng.randrange(41) for _ in range(length)]
    if rng.random() < 0.5 and row:
        row[rng.randrange(len(row))] = rng.choice(NUMBERS)
    return row


def _hostile(rng: random.Random) -> bytes:
    kind = rng.randrange(9)
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(40)))
    if kind == 1:
        body = json.dumps({"instances": [_text(rng) for _ in range(3)]})
        return body[: rng.randrange(len(body))].encode()
    if kind == 2:
        return json.dumps(_value(rng)).encode()
    if kind == 3:
        return ("[" * rng.choice([10, 1000, 100000])).encode()
    if kind == 4:
        return json.dumps({"instances": [_text(rng) for _ in range(rng.randrange(4))]}).encode()
    if kind == 5:
        instances = [
            {
                name: _id_row(rng, rng.choice([0, 3, 3, 3, 4, 65]))
                for name in ("input_word_ids", "input_mask", "input_type_ids")
                if rng.random() < 0.95
            }
            for _ in range(rng.randrange(1, 4))
        ]
        return json.dumps({"signature_name": "classify_ids", "instances": instances}).encode()
    if kind == 6:
        return json.dumps({"inputs": {"text": _value(rng)}}).encode()
    if kind == 7:
        body = {rng.choice(KEYS): _value(rng) for _ in range(rng.randrange(1, 4))}
        return json.dumps(body).encode()
    return json.dumps({"instances": [_value(rng) for _ in range(3)]}).encode("utf-8", "replace")


@settings(
    max_examples=ROUNDS,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(seed=st.integers(0, 2**32 - 1))
def test_hostile_bodies_get_200_or_400_and_valid_neighbours_their_answers(
    classifier, expected, seed
):
    rng = random.Random(seed)
    bodies: list[tuple[bytes, str | None]] = [
        (_hostile(rng), None) for _ in range(HOSTILE_PER_ROUND)
    ]
    for _ in range(VALID_PER_ROUND):
        text = rng.choice(TEXTS)
        bodies.insert(
            rng.randrange(len(bodies) + 1), (json.dumps({"instances": [text]}).encode(), text)
        )
    server = _server(classifier, max_request_instances=50)

    async def scenario(app):
        return await asyncio.gather(*(call(app, PREDICT, body) for body, _ in bodies))

    for (body, text), (status, answer) in zip(bodies, serving(server, scenario), strict=True):
        assert status in (200, 400), (body[:300], status, answer)
        assert isinstance(answer, dict), (body[:300], answer)
        if status == 400:
            assert set(answer) == {"error"} and answer["error"], (body[:300], answer)
        else:
            assert set(answer) in ({"predictions"}, {"outputs"}), (body[:300], answer)
        if text is not None:
            assert status == 200, (text, answer)
            np.testing.assert_allclose(
                answer["predictions"][0]["probabilities"], expected[text], atol=1e-5
            )


def test_a_body_over_max_request_bytes_is_a_413_said_before_it_is_read(classifier):
    server = _server(classifier, max_body_bytes=1000)
    body = json.dumps({"instances": ["a fine film " * 100]}).encode()

    async def scenario(app):
        declared = await exchange(app, "POST", PREDICT, body, {"Content-Length": str(len(body))})
        streamed = await call(app, PREDICT, body)  # no Content-Length: counted as it comes
        fits = await call(app, PREDICT, {"instances": ["a fine film"]})
        return declared, streamed, fits

    (status, headers, answer), streamed, fits = serving(server, scenario)
    assert status == 413 and headers["connection"] == "close"
    assert json.loads(answer)["error"] == (
        f"the request body has {len(body)} bytes; at most 1000 are accepted (send fewer or "
        "shorter instances, or start the server with a larger --max-request-bytes)"
    )
    assert streamed[0] == 413 and "larger than 1000 bytes" in streamed[1]["error"]
    assert fits[0] == 200


@pytest.mark.slow
def test_a_huge_text_is_cut_before_tokenizing_and_gets_the_same_answer(classifier):
    # max_seq_length 16: the tokenizer sees at most 64 * 16 characters of each text, and the
    # answer is the one the whole text gets (its first 16 tokens are the same).
    huge = "a fine and moving film , " * 40_000  # 1 MB
    kept = cut_text(huge, text_bound(classifier))
    assert 900 < len(kept) <= 64 * 16 and huge.startswith(kept) and huge[len(kept)] == " "
    expected = classifier.predict_proba([huge, huge[:-3] + "bad"])
    server = _server(classifier)

    async def scenario(app):
        return await call(app, PREDICT, {"instances": [huge, huge[:-3] + "bad", "fine"]})

    status, answer = serving(server, scenario)
    assert status == 200
    got = [row["probabilities"] for row in answer["predictions"][:2]]
    np.testing.assert_allclose(got, expected, atol=1e-6)

    async def classify(app):  # the texts of :classify's tf.Examples are cut the same way
        body = {"examples": [{"text": huge}, {"text": huge[:-3] + "bad"}, {"text": "fine"}]}
        return await call(app, "/v1/models/sst:classify", body)

    status, answer = serving(server, classify)
    assert status == 200
    scores = [[score for _, score in row] for row in answer["results"][:2]]
    np.testing.assert_allclose(scores, expected, atol=1e-6)


@pytest.mark.parametrize(
    "text, bound, kept",
    [
        ("one two three", 9, "one two"),  # at the last whitespace
        ("one\ttwo\nthree", 9, "one\ttwo"),
        ("abcdefgh", 4, "abcd"),  # no whitespace in the bound's second half: a hard cut
        ("ab cdefghij", 8, "ab cdefg"),
        ("short", 5, "short"),
        ("short", None, "short"),
        (b"caf\xc3\xa9 au lait", 5, b"caf\xc3\xa9"),  # characters, not bytes
    ],
)
def test_cut_text_keeps_whole_words_within_the_bound(text, bound, kept):
    assert cut_text(text, bound) == kept


def test_cut_example_cuts_each_text_feature_and_leaves_the_rest():
    example = tf.train.Example()
    example.features.feature["text"].bytes_list.value.append(("word " * 100).encode())
    example.features.feature["text_pair"].bytes_list.value.append(("café " * 100).encode())
    example.features.feature["weight"].float_list.value.append(0.5)
    cut = tf.train.Example.FromString(cut_example(example.SerializeToString(), 12))
    assert cut.features.feature["text"].bytes_list.value == [b"word word"]
    assert cut.features.feature["text_pair"].bytes_list.value == ["café café".encode()]
    assert cut.features.feature["weight"].float_list.value == [0.5]
    small = example.SerializeToString()
    assert cut_example(small, len(small)) == small  # too short to hold a longer text
    assert cut_example(b"\xff" * 50, 12) == b"\xff" * 50  # no tf.Example: the model says so
