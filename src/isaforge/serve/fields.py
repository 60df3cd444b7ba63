"""The request fields each endpoint knows. A field outside these lists is refused (400 naming
it) unless the server runs with --lenient: a client that sends a field this server does not
implement learns so, rather than getting a reply that silently ignored it.

Known is not the same as honoured: IGNORED fields are accepted and change nothing (they
describe the caller or ask for storage, routing or caching this server does not do, and none
alters what is sampled); protocol.UNSUPPORTED refuses some known fields by value."""

from __future__ import annotations

# both endpoints: OpenAI's sampling and streaming fields, and llama.cpp's extensions
COMMON = frozenset({
    "model", "max_tokens", "temperature", "top_p", "seed", "stop", "stream", "stream_options",
    "logprobs", "n", "frequency_penalty", "presence_penalty", "logit_bias",
    "repeat_penalty", "ignore_eos", "top_k", "min_p", "typical_p",  # llama.cpp's
    "response_format", "grammar",  # constrained output, checked where it is handled
})
CHAT = COMMON | {"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice",
                 "parallel_tool_calls", "chat_template_kwargs", "modalities", "audio"}
COMPLETIONS = COMMON | {"prompt", "echo", "best_of", "suffix"}

IGNORED = frozenset({
    "user",  # the end user's id, for the provider's abuse monitoring
    "safety_identifier",  # its successor
    "metadata",  # tags for stored completions
    "store",  # whether the provider keeps the completion: this server keeps nothing
    "service_tier",  # the provider's processing tier
    "prompt_cache_key",  # the provider's cache routing: slots reuse prefixes by themselves
    "prediction",  # predicted output, a latency hint: the reply is the same without it
    "cache_prompt",  # llama.cpp's prefix reuse switch: always on here
})
STREAM_OPTIONS = frozenset({"include_usage"})
STREAM_OPTIONS_IGNORED = frozenset({"include_obfuscation"})  # padding against side channels


def unknown(body: dict, chat: bool) -> list[str]:
    """The body's field names neither known to the endpoint nor ignored, in body order. A
    field set to null asks for nothing (clients that send every field they model write null
    for the unset ones), so it is never refused."""
    known = CHAT if chat else COMPLETIONS
    return [k for k, v in body.items() if k not in known and k not in IGNORED and v is not None]


def unknown_stream_options(so: dict) -> list[str]:
    return [k for k, v in so.items() if k not in STREAM_OPTIONS and
            k not in STREAM_OPTIONS_IGNORED and v is not None]
