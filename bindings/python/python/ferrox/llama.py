"""llama-cpp-python's high-level ``Llama`` API over ferrox's engine.

Each call is an OpenAI-API request (what llama-cpp-python returns is OpenAI-shaped) answered
in-process by ferrox-server's routes, so request checks, sampling defaults, chat templates,
tools, structured output and log-probabilities are exactly ``ferrox serve``'s. Fields that
would change the answer but that ferrox does not implement raise ``ValueError`` naming them;
options that cannot change an answer on a CPU engine (GPU offload, batch sizes, mmap) are
accepted and ignored.
"""

from __future__ import annotations

import json
import os
import random
import sys
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from . import _native

#: llama-cpp-python's "no seed given": a random seed.
LLAMA_DEFAULT_SEED = 0xFFFFFFFF

# llama-cpp-python constructor options that cannot change an answer here.
_HARMLESS_OPTIONS = frozenset(
    [
        "n_gpu_layers",
        "split_mode",
        "main_gpu",
        "tensor_split",
        "vocab_only",
        "use_mmap",
        "use_mlock",
        "kv_overrides",
        "n_batch",
        "n_ubatch",
        "n_threads_batch",
        "numa",
        "offload_kqv",
        "flash_attn",
        "embedding",
        "last_n_tokens_size",
        "logits_all",
        "rpc_servers",
    ]
)

# Sampling fields ferrox does not implement, with the value that leaves them off.
_OFF = {
    "typical_p": 1.0,
    "tfs_z": 1.0,
    "mirostat_mode": 0,
    "suffix": None,
    "stopping_criteria": None,
    "logits_processor": None,
    "functions": None,
    "function_call": None,
}


# llama-cpp-python's chat formats, by a marker of their turns: a `chat_format` is accepted when
# it names the format the model's own template writes (which ferrox always uses).
_CHAT_FORMAT_MARKERS = {
    "chatml": "<|im_start|>",
    "chatml-function-calling": "<|im_start|>",
    "qwen": "<|im_start|>",
    "llama-2": "[INST]",
    "mistral-instruct": "[INST]",
    "llama-3": "<|start_header_id|>",
    "gemma": "<start_of_turn>",
    "phi3": "<|assistant|>",
}


def _check_chat_format(chat_format: str, template: Optional[str]) -> None:
    marker = _CHAT_FORMAT_MARKERS.get(chat_format)
    if marker is None or marker not in (template or ""):
        raise ValueError(
            f"chat_format={chat_format!r} is not supported: ferrox uses the model's own chat "
            "template, which is not that format"
        )


def _refuse_unsupported(**given: Any) -> None:
    for name, value in given.items():
        if value != _OFF[name]:
            raise ValueError(f"{name}={value!r} is not supported by ferrox")


def _error(status: int, text: str) -> Exception:
    try:
        message = json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = text or f"status {status}"
    if 400 <= status < 500:
        return ValueError(message)
    return RuntimeError(message)


def _echo_stream(prompt: str, chunks: Iterator[Dict[str, Any]]) -> Iterator[Dict[str, Any]]:
    """`echo=True` on a stream: the prompt leads the first chunk's text."""
    first = True
    for chunk in chunks:
        if first:
            for c in chunk.get("choices", []):
                c["text"] = prompt + c.get("text", "")
            first = False
        yield chunk


class Llama:
    """A model loaded in-process.

    ``model_path`` is a GGUF file, a Hugging Face model directory or a ferrox catalog name
    (e.g. ``"qwen2.5-coder:0.5b-instruct"``, pulled into ``$FERROX_HOME/models`` on first use).
    ``n_ctx=0`` takes the model's own context length; ``n_threads=None`` all cores; ``seed``
    seeds the calls that name none (``LLAMA_DEFAULT_SEED``: random).

    ferrox options: ``no_spec`` (decode without speculative drafts; on by default, exact
    either way), ``cache_type_k`` / ``cache_type_v`` (``"f32"``, ``"f16"``, ``"bf16"``,
    ``"q8_0"``; default as ``ferrox run``).

    A ``Llama`` may be shared by threads: their calls queue and run one after another.
    """

    def __init__(
        self,
        model_path: str,
        *,
        n_ctx: int = 512,
        n_threads: Optional[int] = None,
        seed: int = LLAMA_DEFAULT_SEED,
        verbose: bool = True,
        chat_format: Optional[str] = None,
        lora_path: Optional[str] = None,
        no_spec: bool = False,
        cache_type_k: Optional[str] = None,
        cache_type_v: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        unknown = sorted(set(kwargs) - _HARMLESS_OPTIONS)
        if unknown:
            raise TypeError(f"Llama() got unexpected keyword arguments: {', '.join(unknown)}")
        if lora_path is not None:
            raise ValueError("lora_path is not supported by ferrox")
        if n_ctx < 0 or (n_threads is not None and n_threads < 0):
            raise ValueError("n_ctx and n_threads must not be negative")
        home = os.environ.get("FERROX_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "ferrox")
        self._model = _native.Model(
            os.fspath(model_path),
            home=home,
            python=sys.executable,
            n_ctx=n_ctx,
            n_threads=n_threads or 0,
            no_spec=no_spec,
            cache_type_k=cache_type_k,
            cache_type_v=cache_type_v,
        )
        if chat_format is not None:
            _check_chat_format(chat_format, self._model.chat_template())
        self.model_path = str(self._model.path)
        self.verbose = verbose
        self._rng = None if seed == LLAMA_DEFAULT_SEED else random.Random(seed)
        #: The GGUF metadata's scalar values, as text.
        self.metadata: Dict[str, str] = self._model.metadata()
        #: Draft tokens proposed and accepted during the last call (speculative decoding).
        self.speculation: Dict[str, int] = {"drafted": 0, "accepted": 0}
        if verbose:
            print(
                f"ferrox: loaded {self.model_path} (n_ctx {self.n_ctx()}, vocab {self.n_vocab()})",
                file=sys.stderr,
            )

    # -- model facts ---------------------------------------------------------------------------

    def n_ctx(self) -> int:
        """Context size in tokens."""
        return self._model.n_ctx()

    def n_vocab(self) -> int:
        """Tokens in the vocabulary."""
        return self._model.n_vocab()

    def token_bos(self) -> int:
        """The beginning-of-sequence token id (-1: none)."""
        t = self._model.token_bos()
        return -1 if t is None else t

    def token_eos(self) -> int:
        """The end-of-sequence token id (-1: none)."""
        t = self._model.token_eos()
        return -1 if t is None else t

    # -- tokens --------------------------------------------------------------------------------

    def tokenize(self, text: Union[bytes, str], add_bos: bool = True, special: bool = False) -> List[int]:
        """Token ids of ``text`` (UTF-8 bytes): BOS/EOS as the model asks when ``add_bos``;
        special-token text such as ``<|im_end|>`` becomes control tokens only when ``special``."""
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8")
        return self._model.tokenize(text, add_bos, special)

    def detokenize(
        self, tokens: Sequence[int], prev_tokens: Optional[Sequence[int]] = None, special: bool = False
    ) -> bytes:
        """The bytes of ``tokens`` (special tokens' text only when ``special``)."""
        if prev_tokens:
            raise ValueError("prev_tokens is not supported by ferrox")
        return self._model.detokenize(list(tokens), special)

    # -- requests ------------------------------------------------------------------------------

    def _body(self, fields: Dict[str, Any], sampled: bool = True) -> Dict[str, Any]:
        """The request body: the given fields (None: the server's default) and, for a
        generation, the seed."""
        body = {k: v for k, v in fields.items() if v is not None}
        body["model"] = self._model.model_id
        if sampled and "seed" not in body and self._rng is not None:
            body["seed"] = self._rng.getrandbits(31)
        return body

    def _speculation_since(self, before: Sequence[int]) -> Dict[str, int]:
        drafted, accepted = self._model.spec_counts()
        self.speculation = {"drafted": drafted - before[0], "accepted": accepted - before[1]}
        return dict(self.speculation)

    def _post(self, path: str, body: Dict[str, Any], model: Optional[str]) -> Dict[str, Any]:
        before = self._model.spec_counts()
        status, text = self._model.request(path, json.dumps(body))
        if status != 200:
            raise _error(status, text)
        out = json.loads(text)
        if model is not None:
            out["model"] = model
        if path != "/v1/embeddings":
            out["speculation"] = self._speculation_since(before)
        return out

    def _stream(self, path: str, body: Dict[str, Any], model: Optional[str]) -> Iterator[Dict[str, Any]]:
        before = self._model.spec_counts()
        events = self._model.stream(path, json.dumps(body))
        status = events.status()
        if status != 200:
            raise _error(status, events.read())
        return self._chunks(events, before, model)

    def _chunks(self, events: Any, before: Sequence[int], model: Optional[str]) -> Iterator[Dict[str, Any]]:
        try:
            for data in events:
                chunk = json.loads(data)
                if "error" in chunk:
                    raise RuntimeError(chunk["error"].get("message", "generation failed"))
                if model is not None:
                    chunk["model"] = model
                # The chunk that ends the choice carries the call's speculation counters.
                if any(c.get("finish_reason") for c in chunk.get("choices", [])):
                    chunk["speculation"] = self._speculation_since(before)
                yield chunk
        finally:
            # An abandoned or interrupted stream stops its generation.
            events.close()

    def create_completion(
        self,
        prompt: str,
        suffix: Optional[str] = None,
        max_tokens: Optional[int] = 16,
        temperature: Optional[float] = None,
        top_p: Optional[float] = None,
        min_p: Optional[float] = None,
        typical_p: float = 1.0,
        logprobs: Optional[int] = None,
        echo: bool = False,
        stop: Optional[Union[str, List[str]]] = None,
        frequency_penalty: Optional[float] = None,
        presence_penalty: Optional[float] = None,
        repeat_penalty: Optional[float] = None,
        top_k: Optional[int] = None,
        stream: bool = False,
        seed: Optional[int] = None,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: Optional[str] = None,
        stopping_criteria: Any = None,
        logits_processor: Any = None,
        grammar: Optional[str] = None,
        logit_bias: Optional[Dict[int, float]] = None,
    ) -> Union[Dict[str, Any], Iterator[Dict[str, Any]]]:
        """Continues ``prompt`` (no chat template): an OpenAI ``text_completion`` dict, or with
        ``stream=True`` an iterator of its chunks. ``max_tokens`` None or <= 0: until the end of
        generation or the context. Sampling fields left None take ferrox's defaults (those of
        llama.cpp: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05). ``grammar`` is GBNF text."""
        _refuse_unsupported(
            suffix=suffix,
            typical_p=typical_p,
            tfs_z=tfs_z,
            mirostat_mode=mirostat_mode,
            stopping_criteria=stopping_criteria,
            logits_processor=logits_processor,
        )
        if not isinstance(prompt, str):
            raise TypeError("prompt must be a string")
        if echo and logprobs is not None:
            raise ValueError("echo with logprobs is not supported by ferrox (no prompt log-probabilities)")
        body = self._body(
            {
                "prompt": prompt,
                "max_tokens": max_tokens if max_tokens and max_tokens > 0 else None,
                "temperature": temperature,
                "top_p": top_p,
                "min_p": min_p,
                "top_k": top_k,
                "logprobs": logprobs,
                "stop": stop or None,
                "frequency_penalty": frequency_penalty,
                "presence_penalty": presence_penalty,
                "repeat_penalty": repeat_penalty,
                "seed": seed,
                "grammar": grammar,
                "logit_bias": logit_bias,
                "stream": stream or None,
            }
        )
        if stream:
            chunks = self._stream("/v1/completions", body, model)
            return _echo_stream(prompt, chunks) if echo else chunks
        out = self._post("/v1/completions", body, model)
        if echo:
            for c in out["choices"]:
                c["text"] = prompt + c["text"]
        return out

    __call__ = create_completion

    def create_chat_completion(
        self,
        messages: List[Dict[str, Any]],
        functions: Any = None,
        function_call: Any = None,
        tools: Optional[List[Dict[str, Any]]] = None,
        tool_choice: Optional[Union[str, Dict[str, Any]]] = None,
        temperature: Optional[float] = None,
        top_p: Optional[float] = None,
        top_k: Optional[int] = None,
        min_p: Optional[float] = None,
        typical_p: float = 1.0,
        stream: bool = False,
        stop: Optional[Union[str, List[str]]] = None,
        seed: Optional[int] = None,
        response_format: Optional[Dict[str, Any]] = None,
        max_tokens: Optional[int] = None,
        presence_penalty: Optional[float] = None,
        frequency_penalty: Optional[float] = None,
        repeat_penalty: Optional[float] = None,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: Optional[str] = None,
        logits_processor: Any = None,
        grammar: Optional[str] = None,
        logit_bias: Optional[Dict[int, float]] = None,
        logprobs: Optional[bool] = None,
        top_logprobs: Optional[int] = None,
    ) -> Union[Dict[str, Any], Iterator[Dict[str, Any]]]:
        """Answers ``messages`` (OpenAI format) through the model's chat template: an OpenAI
        ``chat.completion`` dict, or with ``stream=True`` an iterator of ``chat.completion.chunk``
        dicts. ``tools`` / ``tool_choice`` give ``message.tool_calls``; ``response_format``
        (``json_object``, optionally with ``schema``, or ``json_schema``) constrains the answer;
        ``logprobs`` / ``top_logprobs`` as OpenAI's."""
        _refuse_unsupported(
            functions=functions,
            function_call=function_call,
            typical_p=typical_p,
            tfs_z=tfs_z,
            mirostat_mode=mirostat_mode,
            logits_processor=logits_processor,
        )
        body = self._body(
            {
                "messages": messages,
                "tools": tools,
                "tool_choice": tool_choice,
                "temperature": temperature,
                "top_p": top_p,
                "top_k": top_k,
                "min_p": min_p,
                "stop": stop or None,
                "seed": seed,
                "response_format": response_format,
                "max_tokens": max_tokens if max_tokens and max_tokens > 0 else None,
                "presence_penalty": presence_penalty,
                "frequency_penalty": frequency_penalty,
                "repeat_penalty": repeat_penalty,
                "grammar": grammar,
                "logit_bias": logit_bias,
                "logprobs": logprobs,
                "top_logprobs": top_logprobs,
                "stream": stream or None,
            }
        )
        if stream:
            return self._stream("/v1/chat/completions", body, model)
        return self._post("/v1/chat/completions", body, model)

    # -- embeddings ----------------------------------------------------------------------------

    def create_embedding(self, input: Union[str, List[str]], model: Optional[str] = None) -> Dict[str, Any]:
        """OpenAI-shaped embeddings of ``input`` (L2-normalised; pooling as ``ferrox serve``)."""
        return self._post("/v1/embeddings", self._body({"input": input}, sampled=False), model)

    def embed(
        self,
        input: Union[str, List[str]],
        normalize: bool = True,
        truncate: bool = True,
        return_count: bool = False,
    ) -> Any:
        """The embedding of ``input`` (a list of floats), or one per string of a list. ferrox's
        embeddings are L2-normalised (``normalize=False`` is refused); an input longer than the
        context raises ``ValueError`` rather than being cut."""
        if not normalize:
            raise ValueError("normalize=False is not supported: ferrox's embeddings are L2-normalised")
        out = self.create_embedding(input)
        vectors = [d["embedding"] for d in sorted(out["data"], key=lambda d: d["index"])]
        result = vectors[0] if isinstance(input, str) else vectors
        if return_count:
            return result, out["usage"]["total_tokens"]
        return result
