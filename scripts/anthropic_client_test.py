"""The official `anthropic` Python client against a running `glint serve`'s /v1/messages
(scripts/anthropic-client-test.sh starts one on the tiny fixture model). Greedy requests, so a
streamed answer must equal the non-streamed one. Plain asserts; prints 'N passed, N failed'.

Usage: python scripts/anthropic_client_test.py BASE_URL API_KEY
"""

import sys
import traceback
import urllib.request
import json

import anthropic

BASE, KEY = sys.argv[1], sys.argv[2]
client = anthropic.Anthropic(base_url=BASE, api_key=KEY, max_retries=0, timeout=60)
# The served id, from the OpenAI-style model list (the Anthropic client has no call for it).
with urllib.request.urlopen(urllib.request.Request(
        f"{BASE}/v1/models", headers={"Authorization": f"Bearer {KEY}"})) as r:
    MODEL = json.load(r)["data"][0]["id"]
TESTS = []


def test(f):
    TESTS.append(f)
    return f


def create(**kw):
    args = dict(model=MODEL, max_tokens=24, temperature=0,
                messages=[{"role": "user", "content": "Write a long story."}])
    args.update(kw)
    return client.messages.create(**args)


def stream(**kw):
    """The streamed message: the SDK's own assembly (get_final_message) and the text and
    thinking deltas concatenated by hand, per block index."""
    args = dict(model=MODEL, max_tokens=24, temperature=0,
                messages=[{"role": "user", "content": "Write a long story."}])
    args.update(kw)
    deltas, kinds = {}, {}
    with client.messages.stream(**args) as s:
        for ev in s:
            if ev.type == "content_block_start":
                kinds[ev.index] = ev.content_block.type
                deltas[ev.index] = ""
            elif ev.type == "content_block_delta":
                d = ev.delta
                if d.type == "input_json_delta":
                    deltas[ev.index] += d.partial_json
                else:
                    deltas[ev.index] += d.text if d.type == "text_delta" else d.thinking
        final = s.get_final_message()
    by_hand = []
    for i in sorted(deltas):
        if kinds[i] == "tool_use":
            b = final.content[i]
            by_hand.append(("tool_use", b.name, json.loads(deltas[i] or "{}")))
        else:
            by_hand.append((kinds[i], deltas[i]))
    return final, by_hand


def blocks(m):
    def one(b):
        if b.type == "tool_use":
            return (b.type, b.name, b.input)
        return (b.type, b.text if b.type == "text" else b.thinking)
    return [one(b) for b in m.content]


@test
def message_has_text_blocks_stop_reason_and_usage():
    m = create()
    assert m.type == "message" and m.role == "assistant" and m.model == MODEL, m
    assert m.id.startswith("msg_")
    assert m.stop_reason in ("end_turn", "max_tokens"), m.stop_reason
    assert m.usage.input_tokens > 0 and 0 < m.usage.output_tokens <= 24, m.usage
    assert all(b.type == "text" for b in m.content), m.content  # thinking is off by default
    assert m.content, m


@test
def streaming_equals_non_streaming():
    m = create(system="You are terse.")
    final, by_hand = stream(system="You are terse.")
    assert blocks(final) == blocks(m) == by_hand, (blocks(final), blocks(m), by_hand)
    assert final.stop_reason == m.stop_reason
    assert final.usage.output_tokens == m.usage.output_tokens
    assert final.usage.input_tokens == m.usage.input_tokens


@test
def thinking_blocks_streamed_and_not():
    kw = dict(max_tokens=40, thinking={"type": "enabled", "budget_tokens": 1024})
    m = create(**kw)
    assert m.content and m.content[0].type == "thinking", m.content
    assert m.content[0].thinking and m.content[0].signature == ""
    final, by_hand = stream(**kw)
    assert blocks(final) == blocks(m) == by_hand, (blocks(final), blocks(m), by_hand)
    # Off: no thinking block.
    off = create(thinking={"type": "disabled"})
    assert all(b.type == "text" for b in off.content), off.content


@test
def multi_turn_and_text_blocks():
    m = create(messages=[
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "What is 2+2?"},
    ])
    assert m.content and m.usage.input_tokens > 5


@test
def stop_sequences_end_the_message():
    m = create(max_tokens=40)
    text = "".join(b.text for b in m.content if b.type == "text")
    assert len(text) >= 12, text
    stop = text[len(text) // 2:len(text) // 2 + 3]
    cut = create(max_tokens=40, stop_sequences=[stop])
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop, cut
    got = "".join(b.text for b in cut.content if b.type == "text")
    assert got == text[:text.index(stop)], (got, text)
    final, _ = stream(max_tokens=40, stop_sequences=[stop])
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == stop
    assert blocks(final) == blocks(cut)


TOOLS = [{"name": "get_weather", "description": "Current weather for a city",
          "input_schema": {"type": "object", "properties": {
              "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}]
HISTORY = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "21 C"}]},
]


@test
def tools_and_tool_history_stream_as_the_message():
    # The tiny random model does not call tools by itself: checked here are that tools, the
    # tool_use / tool_result history and every tool_choice are accepted, that the tools are
    # rendered into the prompt, and that the streamed message (tool_use input from
    # input_json_delta included) equals the non-streamed one. The Rust tests pin the parser.
    plain = create(messages=HISTORY, max_tokens=1)
    for choice in [{"type": "auto"}, {"type": "any"}, {"type": "tool", "name": "get_weather"}]:
        kw = dict(messages=HISTORY, tools=TOOLS, tool_choice=choice, max_tokens=48)
        m = create(**kw)
        assert m.usage.input_tokens > plain.usage.input_tokens + 50, (m.usage, plain.usage)
        for b in m.content:
            if b.type == "tool_use":
                assert b.name == "get_weather" and isinstance(b.input, dict), b
                assert m.stop_reason in ("tool_use", "max_tokens"), m
        final, by_hand = stream(**kw)
        assert blocks(final) == blocks(m) == by_hand, (choice, blocks(final), blocks(m), by_hand)
        assert final.stop_reason == m.stop_reason
    none = create(messages=HISTORY, tools=TOOLS, tool_choice={"type": "none"}, max_tokens=1)
    assert none.usage.input_tokens == plain.usage.input_tokens
    try:
        create(tools=[{"name": "x"}])  # no input_schema
    except anthropic.BadRequestError as e:
        assert "input_schema" in e.body["error"]["message"], e.body
    else:
        raise AssertionError("a tool without input_schema was accepted")


@test
def errors_raise_the_clients_exceptions():
    for kw, err in [
        (dict(model="claude-nonexistent"), anthropic.NotFoundError),
        (dict(max_tokens=10**7), anthropic.BadRequestError),
        (dict(messages=[]), anthropic.BadRequestError),
        (dict(messages=[{"role": "wizard", "content": "x"}]), anthropic.BadRequestError),
        (dict(temperature=1.5), anthropic.BadRequestError),
    ]:
        try:
            create(**kw)
        except err as e:
            assert e.body["type"] == "error", e.body
        else:
            raise AssertionError(f"{kw}: no error")
    bad = anthropic.Anthropic(base_url=BASE, api_key="wrong", max_retries=0)
    try:
        bad.messages.create(model=MODEL, max_tokens=4,
                            messages=[{"role": "user", "content": "x"}])
    except anthropic.AuthenticationError:
        pass
    else:
        raise AssertionError("a wrong key was accepted")
    create()  # still serving


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
