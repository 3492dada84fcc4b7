//! Expected strings come from CPython 3.11 (`repr`, `json.dumps`, `time.strftime`) and from
//! Jinja2 3.1.6 (`trim_blocks`, `lstrip_blocks`, loopcontrols) rendering the same template; the
//! real GLM template is checked against `transformers` (`fixtures/glm5/chat_cases.json`) in
//! `tests/tokenizer_hf.rs`.

use super::*;

#[test]
fn float_repr_matches_python() {
    let cases = [
        (1.0, "1.0"),
        (0.1, "0.1"),
        (1e-05, "1e-05"),
        (1e16, "1e+16"),
        (123456789012345.6, "123456789012345.6"),
        (1.5e-7, "1.5e-07"),
        (2.5, "2.5"),
        (100.0, "100.0"),
        (1e22, "1e+22"),
        (0.0001, "0.0001"),
        (-3.25, "-3.25"),
    ];
    for (f, want) in cases {
        assert_eq!(python_float_repr(f), want, "{f}");
    }
}

fn render(src: &str, ctx: serde_json::Value) -> String {
    ChatTemplate::new(src, None, None)
        .unwrap()
        .render_json(&ctx)
        .unwrap()
}

#[test]
fn tojson_matches_json_dumps() {
    let d = serde_json::json!({
        "name": "get_weather",
        "description": "天气 \"q\" <b>\n",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "n": [1, 2.5, true, null], "e": {}, "l": []
    });
    let ctx = serde_json::json!({"d": d});
    assert_eq!(
        render("{{ d | tojson(ensure_ascii=False) }}", ctx.clone()),
        r#"{"name": "get_weather", "description": "天气 \"q\" <b>\n", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}, "n": [1, 2.5, true, null], "e": {}, "l": []}"#
    );
    assert_eq!(
        render("{{ d | tojson(ensure_ascii=True) }}", ctx.clone()),
        r#"{"name": "get_weather", "description": "\u5929\u6c14 \"q\" <b>\n", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}, "n": [1, 2.5, true, null], "e": {}, "l": []}"#
    );
    let pretty = "{\n  \"name\": \"get_weather\",\n  \"description\": \"天气 \\\"q\\\" <b>\\n\",\n  \"parameters\": {\n    \"type\": \"object\",\n    \"properties\": {\n      \"city\": {\n        \"type\": \"string\"\n      }\n    },\n    \"required\": [\n      \"city\"\n    ]\n  },\n  \"n\": [\n    1,\n    2.5,\n    true,\n    null\n  ],\n  \"e\": {},\n  \"l\": []\n}";
    assert_eq!(render("{{ d | tojson(indent=2) }}", ctx), pretty);
    assert_eq!(
        render(
            "{{ x | tojson(sort_keys=true, separators=[',', ':']) }}",
            serde_json::json!({"x": {"b": 1, "a": [1, 2]}})
        ),
        r#"{"a":[1,2],"b":1}"#
    );
}

#[test]
fn strftime_matches_python() {
    assert_eq!(
        strftime_utc("%Y-%m-%d %H:%M:%S %A %a %B %b %%", 1_700_000_000),
        "2023-11-14 22:13:20 Tuesday Tue November Nov %"
    );
    assert_eq!(strftime_utc("%d %b %Y", 951_782_400), "29 Feb 2000");
}

/// A GLM-5-style template exercising what HF templates rely on: trim/lstrip blocks, loop
/// controls, namespace, Python string methods, `is string`, `raise_exception`.
const TEMPLATE: &str = r#"[gMASK]<sop>
{%- set ns = namespace(last_user=-1) %}
{%- for m in messages %}
  {%- if m.role == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}
{%- endfor %}
{% for m in messages %}
{% if m.role not in ['system', 'user', 'assistant'] %}
{{ raise_exception('bad role ' + m.role) }}
{% endif %}
{% if m.role == 'assistant' and m.content is string %}
<|assistant|>
{%- if '</think>' in m.content %}<think>{{ m.content.split('</think>')[0].split('<think>')[-1].strip() }}</think>{{ m.content.split('</think>')[-1].lstrip('\n') }}
{%- else %}<think></think>{{ m.content.strip() }}{% endif %}
{% else %}
<|{{ m.role }}|>{{ m.content }}
{% endif %}
{% if loop.index0 > ns.last_user %}{% break %}{% endif %}
{% endfor %}
{% if add_generation_prompt %}<|assistant|><think>{% endif %}"#;

#[test]
fn renders_hf_style_template() {
    let t = ChatTemplate::new(TEMPLATE, Some("[gMASK]".into()), None).unwrap();
    let msgs = [
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "Hi"),
        ChatMessage::new("assistant", "<think> plan </think>\nHello!"),
        ChatMessage::new("user", "Bye"),
    ];
    assert_eq!(
        t.render(&msgs, true).unwrap(),
        "[gMASK]<sop><|system|>Be brief.\n<|user|>Hi\n<|assistant|><think>plan</think>Hello!<|user|>Bye\n<|assistant|><think>"
    );
    assert_eq!(
        t.render(&msgs[1..2], false).unwrap(),
        "[gMASK]<sop><|user|>Hi\n"
    );
    let e = t
        .render(&[ChatMessage::new("tool", "x")], false)
        .unwrap_err();
    assert!(e.to_string().contains("bad role tool"), "{e}");
}

#[test]
fn reports_compile_errors() {
    let e = ChatTemplate::new("{% if %}", None, None).unwrap_err();
    assert!(matches!(e, ChatError::Compile(_)), "{e}");
    let t = ChatTemplate::new("x", None, None).unwrap();
    assert!(matches!(
        t.render_json(&serde_json::json!([1])),
        Err(ChatError::BadContext(_))
    ));
}

#[test]
fn runaway_templates_stop_with_their_limit() {
    let looping =
        "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}";
    let t = ChatTemplate::new(looping, None, None)
        .unwrap()
        .with_limits(10_000, 1 << 20);
    assert!(matches!(
        t.render(&[], false),
        Err(ChatError::OutOfFuel { fuel: 10_000 })
    ));
    let printing = "{% for a in range(100000) %}0123456789{% endfor %}";
    let t = ChatTemplate::new(printing, None, None)
        .unwrap()
        .with_limits(u64::MAX, 1000);
    assert!(matches!(
        t.render(&[], false),
        Err(ChatError::TooLong { limit: 1000 })
    ));
    // Under the limits the same template renders in full: 100000 × 10 bytes.
    let t = ChatTemplate::new(printing, None, None).unwrap();
    assert_eq!(t.render(&[], false).unwrap().len(), 1_000_000);
}
