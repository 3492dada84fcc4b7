"""The official `openai` Python client against a running `glint serve` (scripts/openai-client-test.sh
starts one on the tiny fixture model). Plain asserts; prints 'N passed, N failed'.

Usage: python scripts/openai_client_test.py BASE_URL API_KEY
"""

import sys
import traceback

import openai

BASE, KEY = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=BASE, api_key=KEY, max_retries=0, timeout=60)
MODEL = None
TESTS = []


def test(f):
    TESTS.append(f)
    return f


def chat(**kw):
    args = dict(model=MODEL, messages=[{"role": "user", "content": "Hello, who are you?"}],
                temperature=0, max_tokens=24)
    args.update(kw)
    return client.chat.completions.create(**args)


def reasoning_of(message):
    return (message.model_extra or {}).get("reasoning_content") or ""


@test
def models_lists_the_served_model():
    global MODEL
    models = client.models.list().data
    assert len(models) == 1, models
    MODEL = models[0].id


@test
def chat_stream_equals_non_stream_and_usage_counts():
    r = chat()
    m = r.choices[0].message
    assert m.role == "assistant"
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    content, reasoning, usage, finish = "", "", None, None
    for chunk in chat(stream=True, stream_options={"include_usage": True}):
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            content += c.delta.content or ""
            reasoning += (c.delta.model_extra or {}).get("reasoning_content") or ""
            finish = c.finish_reason or finish
    assert (content, reasoning) == (m.content, reasoning_of(m)), (content, reasoning, m)
    assert finish == r.choices[0].finish_reason
    assert usage is not None and usage.completion_tokens == r.usage.completion_tokens


@test
def greedy_is_repeatable_and_thinking_can_be_disabled():
    a, b = chat(), chat()
    assert a.choices[0].message == b.choices[0].message
    r = chat(extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert r.usage.prompt_tokens == a.usage.prompt_tokens  # <think> and </think> are one token each


@test
def completions_stream_equals_non_stream_and_stop_cuts():
    args = dict(model=MODEL, prompt="The dog was asleep.", temperature=0, max_tokens=40,
                extra_body={"ignore_eos": True})
    r = client.completions.create(**args)
    text = r.choices[0].text
    streamed = "".join(c.choices[0].text for c in client.completions.create(stream=True, **args) if c.choices)
    assert streamed == text, (streamed, text)
    assert len(text) >= 12, text
    stop = text[len(text) // 2: len(text) // 2 + 3]
    s = client.completions.create(stop=[stop], **args)
    assert s.choices[0].text == text[: text.index(stop)], (s.choices[0].text, stop)
    assert s.choices[0].finish_reason == "stop"


@test
def sampling_with_a_seed_repeats():
    kw = dict(temperature=1.2, top_p=0.9, seed=7, max_tokens=16)
    assert chat(**kw).choices[0].message == chat(**kw).choices[0].message


@test
def logprobs_parse_and_greedy_picks_the_top_1():
    import math
    r = chat(logprobs=True, top_logprobs=3, max_tokens=8, extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens, (len(content), r.usage)
    for e in content:
        assert e.logprob <= 0 and len(e.top_logprobs) == 3, e
        assert e.token == e.top_logprobs[0].token and e.logprob == e.top_logprobs[0].logprob, e
        assert sum(math.exp(t.logprob) for t in e.top_logprobs) <= 1 + 1e-6
    streamed = []
    for chunk in chat(logprobs=True, top_logprobs=3, max_tokens=8, stream=True,
                      extra_body={"ignore_eos": True}):
        for c in chunk.choices:
            if c.logprobs is not None and c.logprobs.content:
                streamed.extend(c.logprobs.content)
    assert streamed == content, (streamed, content)
    c = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=6,
                                  temperature=0, logprobs=2, extra_body={"ignore_eos": True})
    lp = c.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 6, lp
    assert all(x <= 0 for x in lp.token_logprobs)


@test
def bad_requests_raise_the_right_errors():
    cases = [
        (dict(n=2), openai.BadRequestError, "n"),
        (dict(temperature=-1), openai.BadRequestError, "temperature"),
        (dict(max_tokens=10**6), openai.BadRequestError, "max_tokens"),
        (dict(messages=[{"role": "wizard", "content": "x"}]), openai.BadRequestError, "messages[0].role"),
        (dict(messages=[]), openai.BadRequestError, "messages"),
        (dict(model="gpt-4"), openai.NotFoundError, "model"),
    ]
    for kw, err, param in cases:
        try:
            chat(**kw)
        except err as e:
            assert e.body["param"] == param, (kw, e.body)
        else:
            raise AssertionError(f"{kw}: no error")
    bad = openai.OpenAI(base_url=BASE, api_key="wrong", max_retries=0)
    try:
        bad.models.list()
    except openai.AuthenticationError:
        pass
    else:
        raise AssertionError("a wrong key was accepted")
    chat()  # still serving


passed = failed = 0
for t in TESTS:
    try:
        t()
        passed += 1
        print(f"ok   {t.__name__}")
    except Exception:
        failed += 1
        print(f"FAIL {t.__name__}")
        traceback.print_exc()
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
