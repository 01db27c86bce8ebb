"""llama-cpp-python's README examples (high-level API: completion, chat, JSON mode, JSON schema,
function calling, streaming, embeddings), verbatim but for the import line and the model path.
They run in one fresh interpreter, as a user's script would."""

from conftest import python_script

EXAMPLES = r'''
from ferrox import Llama  # was: from llama_cpp import Llama
import ferrox as llama_cpp  # was: import llama_cpp

llm = Llama(
      model_path=MODEL_PATH,
      # n_gpu_layers=-1, # Uncomment to use GPU acceleration
      # seed=1337, # Uncomment to set a specific seed
      # n_ctx=2048, # Uncomment to increase the context window
)
output = llm(
      "Q: Name the planets in the solar system? A: ", # Prompt
      max_tokens=32, # Generate up to 32 tokens, set to None to generate up to the end of the context window
      stop=["Q:", "\n"], # Stop generating just before the model would generate a new question
      echo=True # Echo the prompt back in the output
) # Generate a completion, can also call create_completion
print(output)
assert output["choices"][0]["text"].startswith("Q: Name the planets")

llm = Llama(model_path=MODEL_PATH, chat_format="chatml")
out = llm.create_chat_completion(
      messages = [
          {"role": "system", "content": "You are an assistant who perfectly describes images."},
          {
              "role": "user",
              "content": "Describe this image in detail please."
          }
      ]
)
print(out)
assert out["choices"][0]["message"]["content"]

out = llm.create_chat_completion(
    messages=[
        {
            "role": "system",
            "content": "You are a helpful assistant that outputs in JSON.",
        },
        {"role": "user", "content": "Who won the world series in 2020"},
    ],
    response_format={
        "type": "json_object",
    },
    temperature=0.7,
)
import json
json.loads(out["choices"][0]["message"]["content"])

out = llm.create_chat_completion(
    messages=[
        {
            "role": "system",
            "content": "You are a helpful assistant that outputs in JSON.",
        },
        {"role": "user", "content": "Who won the world series in 2020"},
    ],
    response_format={
        "type": "json_object",
        "schema": {
            "type": "object",
            "properties": {"team_name": {"type": "string"}},
            "required": ["team_name"],
        },
    },
    temperature=0.7,
)
assert "team_name" in json.loads(out["choices"][0]["message"]["content"])

llm = Llama(model_path=MODEL_PATH, chat_format="chatml-function-calling")
out = llm.create_chat_completion(
      messages = [
        {
          "role": "system",
          "content": "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, detailed, and polite answers to the user's questions. The assistant calls functions with appropriate input when necessary"

        },
        {
          "role": "user",
          "content": "Extract Jason is 25 years old"
        }
      ],
      tools=[{
        "type": "function",
        "function": {
          "name": "UserDetail",
          "parameters": {
            "type": "object",
            "title": "UserDetail",
            "properties": {
              "name": {
                "title": "Name",
                "type": "string"
              },
              "age": {
                "title": "Age",
                "type": "integer"
              }
            },
            "required": [ "name", "age" ]
          }
        }
      }],
      tool_choice={
        "type": "function",
        "function": {
          "name": "UserDetail"
        }
      }
)
call = out["choices"][0]["message"]["tool_calls"][0]["function"]
assert call["name"] == "UserDetail" and set(json.loads(call["arguments"])) == {"name", "age"}

for chunk in llm.create_chat_completion(
    messages=[{"role": "user", "content": "Say hello."}], max_tokens=16, stream=True
):
    delta = chunk["choices"][0]["delta"]
    if "content" in delta:
        print(delta["content"], end="", flush=True)
print()

llm = llama_cpp.Llama(model_path=MODEL_PATH, embedding=True)

embeddings = llm.create_embedding("Hello, world!")

# or create multiple embeddings at once

embeddings = llm.create_embedding(["Hello, world!", "Goodbye, world!"])
assert len(embeddings["data"]) == 2
print("examples ok")
'''


def test_readme_examples_run(model_path):
    code = f"MODEL_PATH = {model_path!r}\n" + EXAMPLES
    r = python_script(code, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.rstrip().endswith("examples ok"), r.stdout[-2000:]
