use super::*;
use serde_json::json;

fn tools() -> Tools {
    Tools::from_openai(&[
        json!({"type": "function", "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "metric": {"type": "boolean"},
                "zip": {"type": ["string", "null"]},
                "unit": {"enum": ["c", "f"]},
                "opts": {"type": "object"},
                "tags": {"type": "array"},
                "ratio": {"anyOf": [{"type": "number"}, {"type": "null"}]}
            }}
        }}),
        json!({"type": "function", "function": {"name": "now"}}),
    ])
    .unwrap()
}

/// Content and calls of `text` fed in one piece.
fn whole(text: &str) -> (String, Vec<ToolCall>) {
    let mut p = ToolParser::new(tools());
    let mut ev = p.push(text);
    ev.extend(p.finish());
    assemble(&ev)
}

fn call(name: &str, args: &str) -> ToolCall {
    ToolCall {
        name: name.into(),
        arguments: args.into(),
    }
}

/// Hand-written texts and what they must give: content, then (name, arguments) per call.
fn cases() -> Vec<(&'static str, &'static str, Vec<ToolCall>)> {
    vec![
        // GLM-5 / GLM-4.7: no whitespace.
        (
            "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>\
             <arg_key>days</arg_key><arg_value>2</arg_value></tool_call>",
            "",
            vec![call("get_weather", r#"{"city":"Paris","days":2}"#)],
        ),
        // GLM-4.5: newlines after the name and between pairs; text before the call.
        (
            "Let me check.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n\
             <arg_value>New York</arg_value>\n<arg_key>metric</arg_key>\n\
             <arg_value>true</arg_value>\n</tool_call>",
            "Let me check.\n",
            vec![call("get_weather", r#"{"city":"New York","metric":true}"#)],
        ),
        // Typed by the schema: a string stays the exact text (digits, spaces, quotes);
        // non-strings parse as JSON, falling back to a string; unknown keys parse as JSON.
        (
            "<tool_call>get_weather<arg_key>city</arg_key><arg_value> 42 </arg_value>\
             <arg_key>days</arg_key><arg_value> 7\n</arg_value>\
             <arg_key>zip</arg_key><arg_value>02134</arg_value>\
             <arg_key>unit</arg_key><arg_value>c</arg_value>\
             <arg_key>opts</arg_key><arg_value>{\"a\": [1, 2]}</arg_value>\
             <arg_key>tags</arg_key><arg_value>[\"x\", \"y\"]</arg_value>\
             <arg_key>ratio</arg_key><arg_value>0.5</arg_value>\
             <arg_key>metric</arg_key><arg_value>yes</arg_value>\
             <arg_key>extra</arg_key><arg_value>null</arg_value>\
             <arg_key>note</arg_key><arg_value>a \"quoted\" <b>word</b></arg_value></tool_call>",
            "",
            vec![call(
                "get_weather",
                r#"{"city":" 42 ","days":7,"zip":"02134","unit":"c","opts":{"a":[1,2]},"tags":["x","y"],"ratio":0.5,"metric":"yes","extra":null,"note":"a \"quoted\" <b>word</b>"}"#,
            )],
        ),
        // Zero arguments; two calls; text between and after.
        (
            "<tool_call>now</tool_call> and <tool_call>now\n</tool_call>done",
            " and done",
            vec![call("now", "{}"), call("now", "{}")],
        ),
        // An unknown tool: all of it is content.
        (
            "a<tool_call>delete_all<arg_key>x</arg_key><arg_value>1</arg_value></tool_call>b",
            "a<tool_call>delete_all<arg_key>x</arg_key><arg_value>1</arg_value></tool_call>b",
            vec![],
        ),
        // An unclosed call whose name never completed: content.
        ("x<tool_call>get_wea", "x<tool_call>get_wea", vec![]),
        // A stray open tag, then a real call.
        (
            "<tool_call>oops <tool_call>now</tool_call>",
            "<tool_call>oops ",
            vec![call("now", "{}")],
        ),
        // A call cut inside a value: closed with what completed, the rest is content.
        (
            "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>\
             <arg_key>days</arg_key><arg_value>3",
            "<arg_key>days</arg_key><arg_value>3",
            vec![call("get_weather", r#"{"city":"Paris"}"#)],
        ),
        // Cut inside a string value: the value keeps what arrived (it has streamed).
        (
            "<tool_call>get_weather<arg_key>days</arg_key><arg_value>3</arg_value>\
             <arg_key>city</arg_key><arg_value>Par</arg_va",
            "",
            vec![call("get_weather", r#"{"days":3,"city":"Par</arg_va"}"#)],
        ),
        // Text between the pairs breaks the call: closed, the text is content.
        (
            "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</arg_value>\
             oops</tool_call>",
            "oops</tool_call>",
            vec![call("get_weather", r#"{"city":"Rome"}"#)],
        ),
        // A key without a value.
        (
            "<tool_call>get_weather<arg_key>city</arg_key>Rome</tool_call>",
            "<arg_key>city</arg_key>Rome</tool_call>",
            vec![call("get_weather", "{}")],
        ),
        // A name past the limit: the open tag was stray.
        (
            "<tool_call>aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "<tool_call>aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            vec![],
        ),
        // Look-alikes of the tags are text.
        (
            "<tool_cal> <tool_call", "<tool_cal> <tool_call", vec![],
        ),
        // Non-ASCII everywhere.
        (
            "天气<tool_call>get_weather<arg_key>city</arg_key><arg_value>東京 🌧</arg_value></tool_call>",
            "天气",
            vec![call("get_weather", r#"{"city":"東京 🌧"}"#)],
        ),
    ]
}

#[test]
fn whole_texts_give_the_hand_written_calls() {
    for (text, content, calls) in cases() {
        let (c, k) = whole(text);
        assert_eq!(c, content, "{text:?}");
        assert_eq!(k, calls, "{text:?}");
        // Every arguments string is one JSON object.
        for k in &k {
            let v: Value = serde_json::from_str(&k.arguments).unwrap();
            assert!(v.is_object(), "{}", k.arguments);
        }
    }
}

/// Feeds `pieces` one at a time and returns the events.
fn streamed(pieces: &[&str]) -> Vec<ToolEvent> {
    let mut p = ToolParser::new(tools());
    let mut ev = Vec::new();
    for s in pieces {
        for e in p.push(s) {
            push_event(&mut ev, e);
        }
    }
    for e in p.finish() {
        push_event(&mut ev, e);
    }
    ev
}

fn char_cuts(text: &str) -> Vec<usize> {
    text.char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect()
}

#[test]
fn every_split_into_two_and_three_pieces_gives_the_same_events() {
    for (text, _, _) in cases() {
        let want = streamed(&[text]);
        let cuts = char_cuts(text);
        for &a in &cuts {
            assert_eq!(
                streamed(&[&text[..a], &text[a..]]),
                want,
                "{text:?} cut at {a}"
            );
        }
        if text.len() < 200 {
            for &a in &cuts {
                for &b in cuts.iter().filter(|&&b| b >= a) {
                    let p = [&text[..a], &text[a..b], &text[b..]];
                    assert_eq!(streamed(&p), want, "{text:?} cut at {a}, {b}");
                }
            }
        }
        // A character at a time.
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(streamed(&refs), want, "{text:?} by characters");
    }
}

#[test]
fn streaming_starts_a_call_at_its_name_and_sends_each_argument_when_it_closes() {
    let mut p = ToolParser::new(tools());
    assert_eq!(p.push("Hi <tool_"), vec![ToolEvent::Text("Hi ".into())]);
    assert_eq!(p.push("call>get_weather"), vec![]);
    // A string value streams as it arrives (a possible closing tag held back).
    assert_eq!(
        p.push("<arg_key>city</arg_key><arg_value>Pa\"r</arg_"),
        vec![
            ToolEvent::Start {
                index: 0,
                name: "get_weather".into()
            },
            ToolEvent::Args {
                index: 0,
                fragment: r#"{"city":"Pa\"r"#.into()
            }
        ]
    );
    assert_eq!(
        p.push("is</arg_value><arg_key>days"),
        vec![ToolEvent::Args {
            index: 0,
            fragment: r#"</arg_is""#.into()
        }]
    );
    // A non-string value goes out when it closes.
    assert_eq!(p.push("</arg_key><arg_value>2"), vec![]);
    assert_eq!(
        p.push("</arg_value></tool_call> ok"),
        vec![
            ToolEvent::Args {
                index: 0,
                fragment: r#","days":2}"#.into()
            },
            ToolEvent::Text(" ok".into()),
        ]
    );
    assert_eq!(p.finish(), vec![]);
    assert_eq!(p.calls(), 1);
}

#[test]
fn tool_schemas_are_validated() {
    let bad = [
        (json!([{"type": "retrieval"}]), "tools[0].type"),
        (json!([{"function": {"name": "f"}}]), "tools[0].type"),
        (json!([{"type": "function"}]), "tools[0].function"),
        (
            json!([{"type": "function", "function": {}}]),
            "tools[0].function.name",
        ),
        (
            json!([{"type": "function", "function": {"name": "a b"}}]),
            "tools[0].function.name",
        ),
        (
            json!([{"type": "function", "function": {"name": "f", "parameters": 3}}]),
            "tools[0].function.parameters",
        ),
        (
            json!([{"type": "function", "function": {"name": "f",
                   "parameters": {"properties": []}}}]),
            "tools[0].function.parameters.properties",
        ),
        (
            json!([{"type": "function", "function": {"name": "f"}},
                   {"type": "function", "function": {"name": "f"}}]),
            "tools[1].function.name",
        ),
        (json!([7]), "tools[0]"),
    ];
    for (v, param) in bad {
        let e = Tools::from_openai(v.as_array().unwrap()).unwrap_err();
        assert_eq!(e.param.as_deref(), Some(param), "{v}: {}", e.message);
    }
    let e = Tools::from_anthropic(&[json!({"name": "f"})]).unwrap_err();
    assert_eq!(e.param.as_deref(), Some("tools[0].input_schema"));
    let t = Tools::from_anthropic(&[json!({"name": "f", "input_schema":
        {"type": "object", "properties": {"q": {"type": "string"}}}})])
    .unwrap();
    assert_eq!(t.get("f").unwrap().kind("q"), ParamKind::Str);
}

#[test]
fn a_long_value_streamed_in_small_pieces_is_one_argument() {
    // 20k characters (multi-byte ones included) a few bytes at a time: the closing tag is
    // found however the pieces fall, and the value is exact.
    let value: String = (0..4000)
        .map(|i| ["ab", "é", "<", "/arg", "東"][i % 5])
        .collect();
    let text = format!(
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>{value}</arg_value></tool_call>\
         <tool_call>get_weather<arg_key>city</arg_key><arg_value>x</arg_value></tool_call>"
    );
    let chars: Vec<char> = text.chars().collect();
    let pieces: Vec<String> = chars.chunks(3).map(|c| c.iter().collect()).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let (content, calls) = assemble(&streamed(&refs));
    assert_eq!(content, "");
    let args: Value = serde_json::from_str(&calls[0].arguments).unwrap();
    assert_eq!(args["city"], value.as_str());
    assert_eq!(calls[1].arguments, r#"{"city":"x"}"#);
    assert_eq!(streamed(&refs), streamed(&[&text]));
}
