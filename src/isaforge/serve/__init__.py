"""`isaforge serve`: an OpenAI-compatible HTTP server over one model, decoding concurrent
requests together (runtime/batch.py: N sequence slots, continuous batching).

Built on Starlette (routing, requests, JSON) served by uvicorn (HTTP/1.1, graceful shutdown
on SIGINT/SIGTERM), both small and well kept, installed with the optional extra
``pip install 'isaforge[serve]'``; the streaming responses are server-sent events written
directly (one ``data:`` line per chunk, ``data: [DONE]`` last), as OpenAI's clients read them.
Structured output (``response_format``, ``grammar``, ``tool_choice`` "required" or a named
function; structured.py) needs the ``grammar`` extra.

    from isaforge.serve import Backend, create_app
    app = create_app(Backend("model.gguf", parallel=8))   # any ASGI server can run it
"""

from __future__ import annotations

__all__ = ["Backend", "create_app"]


def __getattr__(name):  # the HTTP parts import only when used
    if name == "Backend":
        from .backend import Backend

        return Backend
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(name)
