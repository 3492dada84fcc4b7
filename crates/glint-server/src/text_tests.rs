use super::*;

/// Runs `pipeline` over `bytes` cut into the given pieces; returns (output, stopped).
fn run(mut p: TextPipeline, pieces: &[&[u8]]) -> (Split, bool) {
    let mut out = Split::default();
    for piece in pieces {
        let (s, stopped) = p.push(piece);
        out.append(s);
        if stopped {
            return (out, true);
        }
    }
    out.append(p.finish());
    (out, false)
}

/// Every way of cutting `text` into two and three byte pieces gives the one-piece answer.
fn check_all_cuts(make: impl Fn() -> TextPipeline, text: &str) -> (Split, bool) {
    let b = text.as_bytes();
    let whole = run(make(), &[b]);
    for i in 0..=b.len() {
        assert_eq!(
            run(make(), &[&b[..i], &b[i..]]),
            whole,
            "cut at {i}: {text:?}"
        );
        for j in i..=b.len() {
            assert_eq!(
                run(make(), &[&b[..i], &b[i..j], &b[j..]]),
                whole,
                "cuts at {i},{j}: {text:?}"
            );
        }
    }
    // One byte at a time.
    let bytes: Vec<&[u8]> = b.chunks(1).collect();
    assert_eq!(run(make(), &bytes), whole, "bytewise: {text:?}");
    whole
}

fn split(reasoning: &str, content: &str) -> Split {
    Split {
        reasoning: reasoning.into(),
        content: content.into(),
        ..Split::default()
    }
}

#[test]
fn reasoning_split_is_independent_of_token_boundaries() {
    let chat = || TextPipeline::new(vec![], Some(ReasoningSplitter::new(true)));
    assert_eq!(
        check_all_cuts(chat, "plan é步</think>answer <t"),
        (split("plan é步", "answer <t"), false)
    );
    // The model opens its own block after a prompt that did not.
    let open = || TextPipeline::new(vec![], Some(ReasoningSplitter::new(false)));
    assert_eq!(
        check_all_cuts(open, "a<think>b</think>c</thin"),
        (split("b", "ac</thin"), false)
    );
    // No closing tag: everything stays reasoning (the tag never came).
    assert_eq!(
        check_all_cuts(chat, "only thoughts"),
        (split("only thoughts", ""), false)
    );
}

#[test]
fn stop_strings_cut_output_wherever_tokens_split_them() {
    let p = || TextPipeline::new(vec!["STOP".into(), "世界".into()], None);
    assert_eq!(check_all_cuts(p, "abcSTOPdef"), (split("", "abc"), true));
    assert_eq!(check_all_cuts(p, "abcST"), (split("", "abcST"), false));
    assert_eq!(check_all_cuts(p, "x世界y"), (split("", "x"), true));
    assert_eq!(check_all_cuts(p, "SSTOP"), (split("", "S"), true));
    // The stop string completed first wins, whatever the token boundaries; of two completed
    // at the same place, the longer.
    let q = || TextPipeline::new(vec!["bc".into(), "abcd".into()], None);
    assert_eq!(check_all_cuts(q, "xabcd"), (split("", "xa"), true));
    let q = || TextPipeline::new(vec!["bc".into(), "abc".into()], None);
    assert_eq!(check_all_cuts(q, "xabcd"), (split("", "x"), true));
    // Stop strings and reasoning together.
    let r = || TextPipeline::new(vec!["END".into()], Some(ReasoningSplitter::new(true)));
    assert_eq!(check_all_cuts(r, "r</think>cEND!"), (split("r", "c"), true));
}

#[test]
fn invalid_utf8_becomes_replacement_characters() {
    let p = || TextPipeline::new(vec![], None);
    assert_eq!(
        run(p(), &[b"a\xff", b"b"]),
        (split("", "a\u{fffd}b"), false)
    );
    // A character cut off at the end of generation.
    assert_eq!(run(p(), &[b"a\xe4\xb8"]), (split("", "a\u{fffd}"), false));
}

#[test]
fn prompt_state_decides_where_generation_starts() {
    assert!(ReasoningSplitter::prompt_opens_reasoning(
        "<|assistant|><think>"
    ));
    assert!(!ReasoningSplitter::prompt_opens_reasoning(
        "<|assistant|></think>"
    ));
    assert!(!ReasoningSplitter::prompt_opens_reasoning(
        "<think>x</think>y<|assistant|>"
    ));
    assert!(!ReasoningSplitter::prompt_opens_reasoning("plain"));
}

#[test]
fn tool_calls_through_the_whole_pipeline_are_independent_of_byte_boundaries() {
    use crate::tools::{assemble, ToolCall, ToolParser, Tools};
    let tools = || {
        Tools::from_openai(&[serde_json::json!({"type": "function", "function": {
            "name": "f", "parameters": {"type": "object",
                "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}}}})])
        .unwrap()
    };
    let make = |stops: Vec<String>| {
        move || {
            TextPipeline::new(
                stops.clone(),
                Some(ReasoningSplitter::new(true).ending_at(crate::tools::CALL_OPEN)),
            )
            .with_tools(ToolParser::new(tools()))
        }
    };
    // Calls are parsed in the answer; a character split across bytes (é, 東) is held back
    // whole.
    let text = "think é</think>Ok 東<tool_call>f<arg_key>q</arg_key>\
                <arg_value>a b</arg_value><arg_key>n</arg_key><arg_value>5</arg_value>\
                </tool_call> end";
    let (s, stopped) = check_all_cuts(make(vec![]), text);
    assert!(!stopped);
    assert_eq!(s.reasoning, "think é");
    assert_eq!(s.content, "Ok 東 end");
    let (content, calls) = assemble(&s.events);
    assert_eq!(content, s.content);
    assert_eq!(
        calls,
        vec![ToolCall {
            name: "f".into(),
            arguments: r#"{"q":"a b","n":5}"#.into()
        }]
    );
    // A stop string inside a call ends the answer there: the call is closed with the
    // arguments complete so far, the unfinished text is content.
    let (s, stopped) = check_all_cuts(make(vec!["<arg_key>n".into()]), text);
    assert!(stopped);
    let (content, calls) = assemble(&s.events);
    assert_eq!(content, "Ok 東");
    assert_eq!(calls[0].arguments, r#"{"q":"a b"}"#);
    // A call from inside the reasoning (no `</think>`) ends the reasoning: it is a call.
    let text = "hmm <tool_call>f<arg_key>n</arg_key><arg_value>1</arg_value></tool_call>";
    let (s, _) = check_all_cuts(make(vec![]), text);
    assert_eq!(s.reasoning, "hmm ");
    let (content, calls) = assemble(&s.events);
    assert_eq!(content, "");
    assert_eq!(calls[0].arguments, r#"{"n":1}"#);
    // Without tools a `<tool_call>` in the reasoning is reasoning text.
    let plain = || TextPipeline::new(vec![], Some(ReasoningSplitter::new(true)));
    let (s, _) = check_all_cuts(plain, text);
    assert_eq!(s.reasoning, text);
}
