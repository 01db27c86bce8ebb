"""Structured output from a running `ferrox serve`, through the official OpenAI Python client.

Usage: structured_client.py BASE_URL MODEL
Sends 20 strict `response_format: json_schema` chats (nested objects, enums, arrays, numbers
with bounds, required fields, $ref, anyOf, patterns), greedy, and validates every answer with
the `jsonschema` package; then one streamed schema answer, a `json_object` answer, a GBNF
`grammar` answer (llama-server's field, through the client's `extra_body`) and a schema the
server must refuse; last, the server's draft acceptance ratio and grammar mask counters
(`/metrics`). Prints one JSON
object with every text and verdict.
"""
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import urllib.request

import jsonschema
from openai import OpenAI

base, model = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=base, api_key="test-key", max_retries=0, timeout=600)
MAX_TOKENS = 160


def obj(props, **extra):
    """A strict-mode object: every property required, nothing else allowed."""
    return {"type": "object", "properties": props, "required": list(props),
            "additionalProperties": False, **extra}


S = {"type": "string", "maxLength": 40}
SCHEMAS = [
    ("person", "Describe Ada Lovelace: her name and the age she died at.",
     obj({"name": S, "age": {"type": "integer", "minimum": 0, "maximum": 150}})),
    ("color", "What color is the sky on a clear day?",
     obj({"color": {"type": "string", "enum": ["red", "green", "blue"]}})),
    ("address", "Give a made-up US person with a home address.",
     obj({"name": S, "address": obj({"street": S, "city": S,
                                     "zip": {"type": "string", "pattern": "^[0-9]{5}$"}})})),
    ("tags", "Give tags for a blog post about Rust performance.",
     obj({"tags": {"type": "array", "items": {"type": "string", "maxLength": 20},
                   "minItems": 1, "maxItems": 5}})),
    ("weather", "Report today's weather in Paris.",
     obj({"temperature_c": {"type": "number", "minimum": -50, "maximum": 60},
          "humidity": {"type": "integer", "minimum": 0, "maximum": 100}})),
    ("prime", "Is 17 a prime number?",
     obj({"number": {"type": "integer"}, "is_prime": {"type": "boolean"}})),
    ("cart", "List a small grocery order.",
     obj({"items": {"type": "array", "maxItems": 3, "items": obj({
         "name": S, "qty": {"type": "integer", "minimum": 1, "maximum": 100}})}})),
    ("book", "Describe the novel Dune.",
     obj({"book": obj({"title": S, "author": obj({"first": S, "last": S}),
                       "year": {"type": "integer", "minimum": 1400, "maximum": 2030}})})),
    ("languages", "Which programming languages are good for systems programming?",
     obj({"languages": {"type": "array", "maxItems": 3,
                        "items": {"enum": ["python", "rust", "go", "java", "c"]}}})),
    ("answer", "What is six times seven?",
     obj({"result": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 20}]}})),
    ("nullable", "Give the full name of Martin Luther King Jr. split into parts.",
     obj({"first": S, "middle": {"type": ["string", "null"], "maxLength": 20}, "last": S})),
    ("const", "Acknowledge the request.",
     obj({"version": {"const": "1.0"}, "ok": {"type": "boolean"}})),
    ("price", "How much does a cup of coffee cost in Berlin?",
     obj({"price": {"type": "number", "exclusiveMinimum": 0, "maximum": 1000},
          "currency": {"enum": ["USD", "EUR", "GBP"]}})),
    ("points", "Give the corners of a unit square's diagonal.",
     {**obj({"from": {"$ref": "#/$defs/point"}, "to": {"$ref": "#/$defs/point"}}),
      "$defs": {"point": obj({"x": {"type": "integer", "minimum": -10, "maximum": 10},
                              "y": {"type": "integer", "minimum": -10, "maximum": 10}})}}),
    ("scores", "Rate three movies from 0 to 10.",
     obj({"scores": {"type": "array", "minItems": 3, "maxItems": 3,
                     "items": {"type": "integer", "minimum": 0, "maximum": 10}}})),
    ("date", "When did Apollo 11 land on the Moon?",
     obj({"event": S, "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}})),
    ("company", "Describe a small startup.",
     obj({"company": obj({"name": S, "ceo": obj({"name": S, "age": {
         "type": "integer", "minimum": 18, "maximum": 99}}),
         "employees": {"type": "integer", "minimum": 1, "maximum": 10000}})})),
    ("http", "What does a web server answer for a missing page?",
     obj({"status": {"enum": ["ok", "error"]}, "code": {"enum": [200, 404, 500]}})),
    ("task", "Create a to-do item for writing unit tests.",
     obj({"title": S, "priority": {"enum": ["low", "medium", "high"]}, "done": {"type": "boolean"},
          "estimate_hours": {"type": "number", "minimum": 0, "maximum": 100}})),
    ("matrix", "Write the 2x2 identity matrix.",
     obj({"matrix": {"type": "array", "minItems": 2, "maxItems": 2, "items": {
         "type": "array", "minItems": 2, "maxItems": 2,
         "items": {"type": "integer", "minimum": -9, "maximum": 9}}}})),
]


def messages(question):
    return [{"role": "system", "content": "You answer with JSON only."},
            {"role": "user", "content": question}]


def ask(case):
    name, question, schema = case
    t = time.time()
    r = client.chat.completions.create(
        model=model, messages=messages(question), max_tokens=MAX_TOKENS, temperature=0,
        response_format={"type": "json_schema",
                         "json_schema": {"name": name, "schema": schema, "strict": True}})
    text = r.choices[0].message.content
    try:
        jsonschema.Draft202012Validator(schema).validate(json.loads(text))
        error = None
    except Exception as e:  # json.JSONDecodeError or jsonschema.ValidationError
        error = f"{type(e).__name__}: {e}"[:300]
    return {"name": name, "text": text, "error": error, "finish": r.choices[0].finish_reason,
            "tokens": r.usage.completion_tokens, "secs": round(time.time() - t, 2)}


out = {}
with ThreadPoolExecutor(2) as pool:
    out["schemas"] = list(pool.map(ask, SCHEMAS))

# Streamed: the same text as the whole answer.
name, question, schema = SCHEMAS[2]
out["stream"] = "".join(
    c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=model, messages=messages(question), max_tokens=MAX_TOKENS, temperature=0,
        stream=True, response_format={"type": "json_schema", "json_schema": {
            "name": name, "schema": schema, "strict": True}}) if c.choices)

r = client.chat.completions.create(
    model=model, messages=messages("Describe a cat as a JSON object."), max_tokens=MAX_TOKENS,
    temperature=0, response_format={"type": "json_object"})
out["json_object"] = r.choices[0].message.content

gbnf = 'root ::= "The answer is " ("yes" | "no") "." [ ]? [A-Z] [a-z ]{0,30} "."\n'
r = client.chat.completions.create(
    model=model, messages=[{"role": "user", "content": "Is water wet?"}], max_tokens=40,
    temperature=0, extra_body={"grammar": gbnf})
out["gbnf"] = r.choices[0].message.content

try:
    client.chat.completions.create(
        model=model, messages=messages("hi"), max_tokens=8,
        response_format={"type": "json_schema", "json_schema": {
            "name": "bad", "schema": {"type": "object", "properties": {"a": {"type": "strnig"}}},
            "strict": True}})
    out["bad_schema"] = "accepted"
except Exception as e:  # the client raises BadRequestError
    body = getattr(e, "body", None) or {}
    out["bad_schema"] = {"class": type(e).__name__, "param": body.get("param"),
                         "message": body.get("message")}

# Whether drafts were verified at all (0 with --no-spec).
req = urllib.request.Request(base.removesuffix("/v1") + "/metrics",
                             headers={"Authorization": "Bearer test-key"})
metrics = urllib.request.urlopen(req, timeout=60).read().decode()
values = dict(line.split() for line in metrics.splitlines() if line.startswith("ferrox_"))
out["acceptance"] = float(values["ferrox_speculative_acceptance_ratio"])
out["masks"] = int(values["ferrox_grammar_masks_total"])
out["mask_seconds"] = float(values["ferrox_grammar_mask_seconds_total"])

print(json.dumps(out))
