"""Drives a running `ferrox serve` with the official `anthropic` Python client, next to the
official `openai` client on the same conversation.

Usage: anthropic_client.py BASE_URL MODEL MAX_TOKENS
Prints one JSON object: the greedy answer of a multi-turn conversation with a system prompt
through /v1/messages (whole and streamed, with the stream's event types) and through
/v1/chat/completions, a stop sequence, a forced tool call, count_tokens and an error.
"""
import json
import sys

import anthropic
from openai import OpenAI

base, model, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
a = anthropic.Anthropic(base_url=base, api_key="test-key", max_retries=0, timeout=600)
o = OpenAI(base_url=base + "/v1", api_key="test-key", max_retries=0, timeout=600)
# This client release has no sampling arguments; the server takes them from the body.
greedy = {"temperature": 0}
system = "You are a concise assistant."
turns = [{"role": "user", "content": "Name a primary color."},
         {"role": "assistant", "content": "Red."},
         {"role": "user", "content": [{"type": "text", "text": "Name another one, and say why it is primary."}]}]
out = {}

r = a.messages.create(model=model, max_tokens=n, system=system, messages=turns, extra_body=greedy)
out["whole"] = "".join(b.text for b in r.content if b.type == "text")
out["whole_stop"] = r.stop_reason
out["usage"] = [r.usage.input_tokens + (r.usage.cache_read_input_tokens or 0), r.usage.output_tokens]

events = []
with a.messages.stream(model=model, max_tokens=n, system=system, messages=turns,
                       extra_body=greedy) as s:
    for ev in s:
        events.append(ev.type)
    final = s.get_final_message()
out["stream"] = "".join(b.text for b in final.content if b.type == "text")
out["stream_stop"] = final.stop_reason
out["stream_events"] = sorted(set(events))
out["stream_first_last"] = [events[0], events[-1]]

oa_msgs = [{"role": "system", "content": system}, turns[0], turns[1],
           {"role": "user", "content": turns[2]["content"][0]["text"]}]
r = o.chat.completions.create(model=model, max_tokens=n, temperature=0, messages=oa_msgs)
out["openai"] = r.choices[0].message.content
out["openai_prompt_tokens"] = r.usage.prompt_tokens
out["count_tokens"] = a.messages.count_tokens(model=model, system=system, messages=turns).input_tokens

r = a.messages.create(model=model, max_tokens=40, extra_body=greedy, stop_sequences=["5"],
                      messages=[{"role": "user", "content": "Count from 1 to 9, separated by commas."}])
out["stop_sequence"] = [r.content[0].text, r.stop_reason, r.stop_sequence]

tools = [{"name": "get_weather", "description": "Get the weather for a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}]
ask = [{"role": "user", "content": "What's the weather in Paris?"}]
r = a.messages.create(model=model, max_tokens=100, extra_body=greedy, tools=tools,
                      tool_choice={"type": "any"}, messages=ask)
out["tool"] = [[b.name, b.input] for b in r.content if b.type == "tool_use"]
out["tool_stop"] = r.stop_reason
with a.messages.stream(model=model, max_tokens=100, extra_body=greedy, tools=tools,
                       tool_choice={"type": "any"}, messages=ask) as s:
    f = s.get_final_message()
out["tool_stream"] = [[b.name, b.input] for b in f.content if b.type == "tool_use"]
# The tool's result goes back as a tool_result block: the conversation renders (its prompt
# has more tokens than the question alone).
tu = [b for b in r.content if b.type == "tool_use"][0]
follow = ask + [{"role": "assistant", "content": r.content},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tu.id,
                                              "content": "Sunny, 21 C"}]}]
out["tool_result_tokens"] = [
    a.messages.count_tokens(model=model, tools=tools, messages=ask).input_tokens,
    a.messages.count_tokens(model=model, tools=tools, messages=follow).input_tokens]

# A mid-conversation system turn and a context_management edit clearing the older tool
# result: the prompt equals the hand-built one with that result replaced by the placeholder.
def tool_turns(first_result):
    return [{"role": "user", "content": "What's the weather in Paris and in Rome?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather",
                                               "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                          "content": first_result}]},
            {"role": "system", "content": "Reminder: answer in one sentence."},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t2", "name": "get_weather",
                                               "input": {"city": "Rome"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2",
                                          "content": "Rain, 14 C"}]}]
long_result = "Sunny, 21 C. " * 20
edit = {"edits": [{"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 10},
                   "keep": {"type": "tool_uses", "value": 1}}]}
beta = {"anthropic-beta": "context-management-2025-06-27"}
count = lambda msgs, **kw: a.messages.count_tokens(model=model, tools=tools, system=system,
                                                   messages=msgs, extra_headers=beta, **kw).input_tokens
out["cm_tokens"] = [count(tool_turns(long_result), extra_body={"context_management": edit}),
                    count(tool_turns("[cleared to save context]")),
                    count(tool_turns(long_result))]
r = a.messages.create(model=model, max_tokens=8, extra_body={**greedy, "context_management": edit},
                      extra_headers=beta, tools=tools, system=system, messages=tool_turns(long_result))
u = r.usage
out["cm_usage"] = u.input_tokens + (u.cache_read_input_tokens or 0)
cm = (r.model_extra or {}).get("context_management") or getattr(r, "context_management", None)
out["cm_applied"] = cm if isinstance(cm, dict) or cm is None else cm.model_dump()

try:
    a.messages.create(model=model, max_tokens=10, messages=[{"role": "robot", "content": "x"}])
    out["error"] = None
except anthropic.BadRequestError as ex:
    out["error"] = [ex.status_code, ex.body["error"]["type"]]
print(json.dumps(out))
