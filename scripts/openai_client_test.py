"""The official `openai` Python client against a running `glint serve` (scripts/openai-client-test.sh
starts one on the tiny fixture model). Plain asserts; prints 'N passed, N failed'.

Usage: python scripts/openai_client_test.py BASE_URL API_KEY
"""

import json
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


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "now", "description": "The time"}},
]
# A finished tool round trip, as an agent sends it back: the assistant's call (arguments a
# JSON string) and the tool's result.
TOOL_HISTORY = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 2}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21}'},
]


def assembled_stream(**kw):
    """A streamed chat answer assembled from the client's typed chunks: content, reasoning,
    tool calls by index (id, type and name from the first delta of each), finish reason."""
    content, reasoning, calls, finish = "", "", {}, None
    for chunk in chat(stream=True, **kw):
        for c in chunk.choices:
            content += c.delta.content or ""
            reasoning += (c.delta.model_extra or {}).get("reasoning_content") or ""
            for tc in c.delta.tool_calls or []:
                if tc.index not in calls:
                    assert tc.id and tc.type == "function" and tc.function.name, tc
                    calls[tc.index] = [tc.id, tc.function.name, ""]
                else:
                    assert tc.id is None and tc.function.name is None, tc
                calls[tc.index][2] += tc.function.arguments or ""
            finish = c.finish_reason or finish
    return content, reasoning, [tuple(calls[i]) for i in sorted(calls)], finish


@test
def tools_are_accepted_and_streamed_calls_equal_the_message():
    # The tiny random model does not call tools by itself; what is checked end to end here is
    # that tools, tool history and every tool_choice are accepted, that the prompt grows by
    # the rendered tools, and that the streamed answer (tool-call deltas included) assembles
    # to the non-streamed message. The parser's outputs are pinned by the Rust tests.
    plain = chat(messages=TOOL_HISTORY, max_tokens=1)
    for choice in ["auto", "required", {"type": "function", "function": {"name": "now"}},
                   {"type": "function", "function": {"name": "get_weather"}}]:
        kw = dict(messages=TOOL_HISTORY, tools=TOOLS, tool_choice=choice, max_tokens=48,
                  extra_body={"ignore_eos": True})
        r = chat(**kw)
        assert r.usage.prompt_tokens > plain.usage.prompt_tokens + 50, (r.usage, plain.usage)
        m = r.choices[0].message
        calls = [(c.id, c.function.name, c.function.arguments) for c in m.tool_calls or []]
        for _, name, args in calls:
            assert name in ("get_weather", "now"), name
            assert isinstance(json.loads(args), dict), args
        assert r.choices[0].finish_reason in ("length", "tool_calls", "stop"), r
        content, reasoning, scalls, finish = assembled_stream(**kw)
        assert (content or None, reasoning, scalls) == (m.content or None, reasoning_of(m), calls), \
            (choice, content, scalls, m)
        assert finish == r.choices[0].finish_reason
    r = chat(messages=TOOL_HISTORY, tools=TOOLS, tool_choice="none")
    assert r.usage.prompt_tokens < plain.usage.prompt_tokens + 50  # tools not rendered
    for bad, param in [
        (dict(tools=[{"type": "function", "function": {"name": "bad name"}}]),
         "tools[0].function.name"),
        (dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}),
         "tool_choice.function.name"),
        (dict(tool_choice="required"), "tool_choice"),
    ]:
        try:
            chat(**bad)
        except openai.BadRequestError as e:
            assert e.body["param"] == param, (bad, e.body)
        else:
            raise AssertionError(f"{bad}: no error")


@test
def n_choices_penalties_and_stop_token_ids():
    r = chat(n=3, temperature=1.0, seed=7, max_tokens=8)
    assert [c.index for c in r.choices] == [0, 1, 2]
    for i, c in enumerate(r.choices):
        one = chat(temperature=1.0, seed=7 + i, max_tokens=8).choices[0]
        assert (c.message.content, reasoning_of(c.message)) == \
            (one.message.content, reasoning_of(one.message)), (i, c, one)
    content, reasoning = {}, {}
    for chunk in chat(n=3, temperature=1.0, seed=7, max_tokens=8, stream=True):
        for c in chunk.choices:
            content[c.index] = content.get(c.index, "") + (c.delta.content or "")
            reasoning[c.index] = reasoning.get(c.index, "") + \
                ((c.delta.model_extra or {}).get("reasoning_content") or "")
    for c in r.choices:
        assert (content[c.index], reasoning[c.index]) == \
            (c.message.content, reasoning_of(c.message)), (c, content, reasoning)
    p = chat(presence_penalty=1.5, frequency_penalty=1.0, max_tokens=24)
    assert p.choices[0].finish_reason in ("stop", "length")
    ids = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=12,
                                    temperature=0, extra_body={"ignore_eos": True,
                                                               "return_token_ids": True})
    toks = ids.choices[0].model_extra["token_ids"]
    cut = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=12,
                                    temperature=0, extra_body={
                                        "ignore_eos": True, "return_token_ids": True,
                                        "stop_token_ids": [toks[4]]})
    k = toks.index(toks[4])
    assert cut.choices[0].model_extra["token_ids"] == toks[:k + 1], (cut, toks)
    assert cut.choices[0].finish_reason == "stop"


@test
def bad_requests_raise_the_right_errors():
    cases = [
        (dict(n=17), openai.BadRequestError, "n"),
        (dict(presence_penalty=2.5), openai.BadRequestError, "presence_penalty"),
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
