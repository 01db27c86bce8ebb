//! ferrox-server: the OpenAI-compatible HTTP server.
