"""Reasoning in a model's reply: the ``<think>...</think>`` block that Qwen3, QwQ and the
DeepSeek-R1 distills write before their answer, split from the answer as llama.cpp and vLLM
return it (``reasoning_content`` beside ``content``).

A template that thinks names ``<think>`` in its text. Its generation prompt may already open
the block (DeepSeek-R1's ends in ``<think>\\n``), so the reply starts inside it; with thinking
turned off (Qwen3's ``enable_thinking: false``) it writes an empty block, and the reply is all
answer."""

from __future__ import annotations

__all__ = ["ReasoningSplitter", "generation_prompt", "starts_inside", "thinks"]

OPEN, CLOSE = "<think>", "</think>"
_WS = " \t\r\n"
_PROBE = "\ue000isaforge-probe\ue001"


def thinks(template: str | None) -> bool:
    """Whether a chat template writes reasoning blocks."""
    return bool(template) and OPEN in template


def generation_prompt(template: str, **variables) -> str:
    """What the template writes after a one-message conversation's user text: the end of that
    turn and the assistant's generation prompt (with `variables`, e.g. enable_thinking)."""
    from .chat import render_chat

    text = render_chat(template, [{"role": "user", "content": _PROBE}],
                       add_generation_prompt=True, **variables)
    return text.rsplit(_PROBE, 1)[-1]


def starts_inside(prompt_tail: str) -> bool:
    """Whether a prompt ending in `prompt_tail` leaves a ``<think>`` block open."""
    return prompt_tail.rfind(OPEN) > prompt_tail.rfind(CLOSE)


def _partial(text: str, marker: str) -> int:
    """The length of the longest end of `text` that begins `marker` (not all of it)."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0


class ReasoningSplitter:
    """Streaming split: ``feed(text)`` and ``finish()`` return events ("reasoning", str) and
    ("content", str). A ``<think>`` block counts where the reply begins (after whitespace), or
    from the first character when `inside` (the prompt opened it); the whitespace just inside
    the block and just after it is dropped. Only text that could still be a tag (or
    whitespace before one) is held back; a block never closed is all reasoning."""

    def __init__(self, inside: bool = False):
        self.state = "think" if inside else "start"
        self.skip_ws = inside  # whitespace that opens the block or follows it
        self.buf = ""

    def feed(self, text: str) -> list[tuple[str, str]]:
        out: list = []
        self.buf += text
        self._step(out, final=False)
        return out

    def finish(self) -> list[tuple[str, str]]:
        out: list = []
        self._step(out, final=True)
        return out

    def _step(self, out: list, final: bool) -> None:
        while self.buf:
            if self.skip_ws:
                self.buf = self.buf.lstrip(_WS)
                if not self.buf:
                    return
                self.skip_ws = False
            if self.state == "start":
                s = self.buf.lstrip(_WS)
                if s.startswith(OPEN):
                    self.buf, self.state, self.skip_ws = s[len(OPEN):], "think", True
                    continue
                if not final and OPEN.startswith(s):
                    return  # only whitespace, or the beginning of "<think>"
                self.state = "content"
            if self.state == "content":
                out.append(("content", self.buf))
                self.buf = ""
                return
            # inside the block
            j = self.buf.find(CLOSE)
            if j >= 0:
                text = self.buf[:j].rstrip(_WS)
                if text:
                    out.append(("reasoning", text))
                self.buf, self.state, self.skip_ws = self.buf[j + len(CLOSE):], "content", True
                continue
            if final:
                out.append(("reasoning", self.buf))
                self.buf = ""
                return
            keep = _partial(self.buf, CLOSE)
            body = self.buf[:len(self.buf) - keep]
            keep += len(body) - len(body.rstrip(_WS))
            if keep < len(self.buf):
                out.append(("reasoning", self.buf[:len(self.buf) - keep]))
                self.buf = self.buf[len(self.buf) - keep:]
            return
