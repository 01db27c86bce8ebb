//! `/v1/responses` on the fake backend: output items and the streaming event sequence, tool
//! calls (namespaced too) and their round trip through `previous_response_id`, reasoning items
//! and their `encrypted_content`, structured output, refusals naming the field, and the
//! bounded store's 404 after eviction (the official clients and Codex against a real model are
//! in ferrox-cli's tests).

mod common;
use common::*;

use ferrox_server::http::StoreLimits;
use ferrox_server::Options;
use serde_json::{json, Value};

/// The SSE events of a body: (event name, data).
fn sse(r: &Resp) -> Vec<(String, Value)> {
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let (name, data) = e.split_once('\n').unwrap_or_else(|| panic!("{e:?}"));
            let name = name.strip_prefix("event: ").expect("an event name");
            let data = data.strip_prefix("data: ").expect("data");
            (name.to_string(), serde_json::from_str(data).unwrap())
        })
        .collect()
}

/// The `delta` texts of the events named `name`, joined.
fn deltas(evs: &[(String, Value)], name: &str) -> String {
    evs.iter()
        .filter(|(n, _)| n == name)
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect()
}

async fn respond(a: &str, body: Value) -> Value {
    let mut body = body;
    body["model"] = json!("fake-model");
    let r = post(a, "/v1/responses", body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

fn streamed(body: &Value) -> Value {
    let mut b = body.clone();
    b["model"] = json!("fake-model");
    b["stream"] = json!(true);
    b
}

#[tokio::test]
async fn whole_and_streamed_agree_with_the_documented_events() {
    let a = server(1, 4, None).await;
    let body = json!({"input": "hi", "max_output_tokens": 3, "temperature": 0});
    let w = respond(&a, body.clone()).await;
    assert_eq!(w["object"], "response");
    assert_eq!(w["status"], "incomplete");
    assert_eq!(w["incomplete_details"]["reason"], "max_output_tokens");
    let item = &w["output"][0];
    assert_eq!(item["type"], "message");
    assert_eq!(item["role"], "assistant");
    assert_eq!(item["content"][0]["type"], "output_text");
    assert_eq!(item["content"][0]["text"], "w0 w1 w2 ");
    let u = &w["usage"];
    assert_eq!(
        (u["input_tokens"].clone(), u["output_tokens"].clone()),
        (json!(2), json!(3))
    );
    assert_eq!(u["total_tokens"], 5);
    assert_eq!(u["input_tokens_details"]["cached_tokens"], 0);
    assert_eq!(u["output_tokens_details"]["reasoning_tokens"], 0);

    let evs = sse(&post(&a, "/v1/responses", streamed(&body)).await);
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.incomplete",
        ]
    );
    for (i, (name, data)) in evs.iter().enumerate() {
        assert_eq!(data["type"], json!(name));
        assert_eq!(data["sequence_number"], json!(i));
    }
    assert_eq!(evs[0].1["response"]["status"], "in_progress");
    let text = deltas(&evs, "response.output_text.delta");
    assert_eq!(text, "w0 w1 w2 ");
    assert_eq!(evs[7].1["text"], "w0 w1 w2 ");
    let last = &evs.last().unwrap().1["response"];
    assert_eq!(last["output"][0]["content"], item["content"]);
    assert_eq!(last["usage"], w["usage"]);
}

fn weather_tool() -> Value {
    json!({"type": "function", "name": "get_weather", "description": "Weather of a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}})
}

#[tokio::test]
async fn a_function_call_round_trips_through_previous_response_id() {
    let a = server(1, 4, None).await;
    let first = respond(
        &a,
        json!({"input": "weather?", "tools": [weather_tool()], "max_output_tokens": 3}),
    )
    .await;
    assert_eq!(first["output"][0]["content"][0]["text"], "Checking.\n");
    let call = &first["output"][1];
    assert_eq!(call["type"], "function_call");
    assert_eq!(call["name"], "get_weather");
    assert_eq!(call["status"], "completed");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"city": "Paris"}));
    // The next turn sees the whole conversation: "weather?" + "Checking.\n" + "sunny" and
    // the fake's " tools" marker (one byte a token).
    let second = respond(
        &a,
        json!({"previous_response_id": first["id"], "tools": [weather_tool()],
               "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}],
               "max_output_tokens": 1}),
    )
    .await;
    assert_eq!(second["usage"]["input_tokens"], 8 + 10 + 5 + 6);
    assert_eq!(second["previous_response_id"], first["id"]);
    // The same history handed back whole (store: false, as Codex does) is the same prompt.
    let mut items = vec![json!({"role": "user", "content": "weather?"})];
    items.extend(first["output"].as_array().unwrap().iter().cloned());
    items.push(
        json!({"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}),
    );
    let again = respond(
        &a,
        json!({"input": items, "tools": [weather_tool()], "store": false, "max_output_tokens": 1}),
    )
    .await;
    assert_eq!(
        again["usage"]["input_tokens"],
        second["usage"]["input_tokens"]
    );

    let body = json!({"input": "weather?", "tools": [weather_tool()], "max_output_tokens": 3});
    let evs = sse(&post(&a, "/v1/responses", streamed(&body)).await);
    let args: Vec<&Value> = evs
        .iter()
        .filter(|(n, _)| n == "response.function_call_arguments.delta")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(args.len(), 1);
    let done = evs
        .iter()
        .find(|(n, d)| n == "response.output_item.done" && d["item"]["type"] == "function_call")
        .unwrap();
    assert_eq!(done.1["output_index"], 1);
    assert_eq!(args[0]["delta"], done.1["item"]["arguments"]);
    assert_eq!(evs.last().unwrap().0, "response.incomplete");
}

#[tokio::test]
async fn namespaced_functions_are_offered_and_named() {
    let a = server(1, 4, None).await;
    let ns = json!({"type": "namespace", "name": "geo", "description": "places",
                    "tools": [weather_tool()]});
    let r = respond(
        &a,
        json!({"input": "weather?", "tools": [ns], "max_output_tokens": 3}),
    )
    .await;
    assert_eq!(r["output"][1]["name"], "get_weather");
    assert_eq!(r["output"][1]["namespace"], "geo");
}

#[tokio::test]
async fn reasoning_items_carry_summary_and_round_trip_encrypted() {
    let a = server(1, 4, None).await;
    let body = json!({"input": "think", "max_output_tokens": 5,
                      "reasoning": {"effort": "low", "summary": "auto"},
                      "include": ["reasoning.encrypted_content"]});
    let w = respond(&a, body.clone()).await;
    let rs = &w["output"][0];
    assert_eq!(rs["type"], "reasoning");
    assert_eq!(rs["summary"][0]["text"], "pondering");
    assert_eq!(rs["content"][0]["text"], "pondering");
    assert!(
        w["usage"]["output_tokens_details"]["reasoning_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert_eq!(w["output"][1]["content"][0]["text"], "w3 w4 ");
    let evs = sse(&post(&a, "/v1/responses", streamed(&body)).await);
    let summary = deltas(&evs, "response.reasoning_summary_text.delta");
    assert_eq!(summary, "pondering");
    // Handed back, the reasoning is the assistant turn's again; a foreign one is refused.
    let mut back = rs.clone();
    let mut input = vec![json!({"role": "user", "content": "hi"}), back.clone()];
    input.push(json!({"role": "user", "content": "and?"}));
    respond(
        &a,
        json!({"input": input, "store": false, "max_output_tokens": 1}),
    )
    .await;
    back["encrypted_content"] = json!("gAAAAABfake");
    let r = post(
        &a,
        "/v1/responses",
        json!({"model": "fake-model", "input": [back]}),
    )
    .await;
    r.assert_names(400, "encrypted_content");
}

#[tokio::test]
async fn json_schema_format_goes_through_the_grammar() {
    let a = server(1, 4, None).await;
    let format = json!({"type": "json_schema", "name": "t", "strict": true,
                        "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}});
    let r = respond(&a, json!({"input": "hi", "text": {"format": format}})).await;
    let text = r["output"][0]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("{\"grammar\": \"Json"), "{text}");
    assert_eq!(r["text"]["format"]["type"], "json_schema");
}

#[tokio::test]
async fn refusals_name_the_field() {
    let a = server(1, 4, None).await;
    let cases = [
        (json!({"conversation": "c1"}), 400, "conversation"),
        (
            json!({"include": ["message.output_text.logprobs"]}),
            400,
            "message.output_text.logprobs",
        ),
        (
            json!({"tools": [{"type": "web_search"}]}),
            400,
            "web_search",
        ),
        (json!({"background": true}), 400, "background"),
        (json!({"truncation": "auto"}), 400, "truncation"),
        (json!({"text": {"verbosity": "low"}}), 400, "verbosity"),
        (json!({"reasoning": {"effort": "extreme"}}), 400, "extreme"),
        (
            json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}),
            400,
            "input_image",
        ),
        (
            json!({"input": [{"type": "item_reference", "id": "x"}]}),
            400,
            "item_reference",
        ),
        (json!({"input": []}), 400, "input"),
        (json!({"model": "other"}), 404, "other"),
        (
            json!({"previous_response_id": "resp-nope"}),
            404,
            "resp-nope",
        ),
    ];
    for (extra, status, needle) in cases {
        let mut b = json!({"model": "fake-model", "input": "hi"});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        let r = post(&a, "/v1/responses", b).await;
        assert_eq!(r.status, status, "{extra}: {}", r.body);
        let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(msg.contains(needle), "{extra}: {msg}");
    }
    // Harmless bookkeeping Codex sends is accepted.
    respond(
        &a,
        json!({"input": "hi", "prompt_cache_key": "k", "client_metadata": {"a": "b"},
               "parallel_tool_calls": true, "tool_choice": "auto", "max_output_tokens": 1}),
    )
    .await;
}

#[tokio::test]
async fn the_bounded_store_evicts_the_oldest_with_a_clear_404() {
    let options = Options {
        response_store: StoreLimits {
            responses: 2,
            bytes: 1 << 20,
        },
        ..Options::default()
    };
    let a = server_with(1, 4, options).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let r = respond(&a, json!({"input": "hi", "max_output_tokens": 1})).await;
        ids.push(r["id"].as_str().unwrap().to_string());
    }
    let got = get(&a, &format!("/v1/responses/{}", ids[2])).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.json()["id"], json!(ids[2]));
    let gone = get(&a, &format!("/v1/responses/{}", ids[0])).await;
    assert_eq!(gone.status, 404);
    let r = post(
        &a,
        "/v1/responses",
        json!({"model": "fake-model", "input": "hi", "previous_response_id": ids[0]}),
    )
    .await;
    assert_eq!(r.status, 404);
    let e = &r.json()["error"];
    assert_eq!(e["param"], "previous_response_id");
    assert!(e["message"].as_str().unwrap().contains("evicted"), "{e}");
    // store: false keeps nothing.
    let r = respond(
        &a,
        json!({"input": "hi", "store": false, "max_output_tokens": 1}),
    )
    .await;
    assert_eq!(r["store"], false);
    let id = r["id"].as_str().unwrap();
    assert_eq!(get(&a, &format!("/v1/responses/{id}")).await.status, 404);
}
