"""Clients and servers for OpenAI-compatible endpoints (vLLM, SGLang, ``transformers serve``, ours)."""
