use super::*;
use gpuplane_crds::{SmokeExpect, SmokeTool};

fn tools_req() -> SmokeRequest {
    SmokeRequest {
        name: "tools".into(),
        prompt: "What is the weather in Paris?".into(),
        tools: vec![SmokeTool {
            name: "get_weather".into(),
            description: "current weather".into(),
            parameters: vec!["city".into()],
        }],
        max_tokens: 256,
        expect: SmokeExpect {
            tool_call: Some("get_weather".into()),
            reasoning: Some(true),
            ..Default::default()
        },
    }
}

#[test]
fn the_request_offers_the_tools_as_sglang_expects_them() {
    let v: Value = serde_json::from_str(&request_body("qwen", &tools_req())).unwrap();
    assert_eq!(v["model"], "qwen");
    assert_eq!(v["tools"][0]["function"]["name"], "get_weather");
    assert_eq!(
        v["tools"][0]["function"]["parameters"]["required"][0],
        "city"
    );
    assert_eq!(v["tool_choice"], "auto");
}

#[test]
fn a_parsed_tool_call_with_reasoning_passes() {
    let body = r#"{"choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"reasoning_content":"The user wants weather.","tool_calls":[{"id":"call_1","index":0,"type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]}}]}"#;
    assert_eq!(judge(&tools_req(), 200, body), Ok(()));
}

#[test]
fn no_tool_call_and_no_reasoning_are_both_named() {
    let body = r#"{"choices":[{"message":{"role":"assistant","content":"<tool_call>get_weather</tool_call>"}}]}"#;
    let e = judge(&tools_req(), 200, body).unwrap_err();
    assert!(e.starts_with("tools: "), "{e}");
    assert!(
        e.contains("no reasoning_content") && e.contains("no tool call, expected get_weather"),
        "{e}"
    );
}

#[test]
fn content_expectations_and_http_failures() {
    let mut r = tools_req();
    r.expect = SmokeExpect {
        answer_contains: Some("391".into()),
        ..Default::default()
    };
    assert_eq!(
        judge(
            &r,
            200,
            r#"{"choices":[{"message":{"content":"17*23 = 391"}}]}"#
        ),
        Ok(())
    );
    let e = judge(&r, 200, r#"{"choices":[{"message":{"content":"390"}}]}"#).unwrap_err();
    assert!(e.contains("does not contain \"391\""), "{e}");
    assert!(judge(&r, 503, "overloaded")
        .unwrap_err()
        .contains("HTTP 503"));
    for junk in [
        "",
        "[]",
        "{\"choices\": 3}",
        "{\"choices\":[{\"message\":{\"tool_calls\":7}}]}",
    ] {
        assert!(judge(&tools_req(), 200, junk).is_err(), "{junk}");
    }
}
