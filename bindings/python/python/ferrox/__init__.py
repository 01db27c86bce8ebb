"""ferrox: a pure-Rust CPU inference engine, in-process from Python.

``ferrox.Llama`` follows llama-cpp-python's high-level API (``Llama(model_path=...)``,
``create_completion``, ``create_chat_completion``, ``tokenize``, ``embed``...), so scripts
written for it run with only the import line changed. Requests go through the same engine and
request handling as ``ferrox serve`` (chat templates, tools, structured output, speculative
decoding), without a socket; the GIL is released while the model computes.
"""

from .llama import Llama, LLAMA_DEFAULT_SEED

__all__ = ["Llama", "LLAMA_DEFAULT_SEED"]
__version__ = "0.1.0"
