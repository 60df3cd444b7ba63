"""OpenAI's response shapes, shared by the server (serve.app) and the Python API
(Model.create_chat_completion / create_completion): a choice's text built from sampled tokens
(stop strings cut, logprobs kept), the logprobs objects, the Request a set of sampling fields
makes under a model's profile, and structured_output, the plan of tools, tool_choice and
response_format (text/chatplan.py and text/structured.py, which the server also calls)."""

from __future__ import annotations

from ..text.chatplan import ChatPlan, StructuredOutputError, chat_plan
from ..text.stream import StopMatcher, StreamDecoder
from ..text.structured import compiled
from .batch import Request

__all__ = ["Choice", "StructuredOutputError", "chat_logprobs", "choice_body", "make_request",
           "output_constraint", "structured_output", "text_logprobs", "usage_body"]


def structured_output(tools=None, tool_choice=None, response_format=None, *,
                      template: str | None = None, parallel_tool_calls=None,
                      chat_template_kwargs=None, grammar=None, compile=None) -> ChatPlan:
    """The plan of a chat request's output beyond plain text, by the functions the server
    calls (text/chatplan.chat_plan, text/structured.requested): the tools the template is
    offered (None: none, or tool_choice "none"), its kwargs, a reader splitting each reply
    into content, reasoning and tool calls, and (`compile(kind, spec)` given: a model's
    constraint) `plan.compiled`, the grammar the reply runs under: response_format,
    grammar, or a forced tool call. A bad argument raises StructuredOutputError naming it."""
    if tools is not None and not (isinstance(tools, list)
                                  and all(isinstance(t, dict) for t in tools)):
        raise StructuredOutputError("tools", "'tools' must be a list of objects")
    body = {"tool_choice": tool_choice, "parallel_tool_calls": parallel_tool_calls,
            "chat_template_kwargs": chat_template_kwargs, "response_format": response_format,
            "grammar": grammar}
    plan = chat_plan(body, tools or None, template)
    plan.compiled = None if compile is None else compiled(compile, body, plan)
    return plan


def output_constraint(compile, response_format=None, grammar=None):
    """A completion's grammar (response_format or grammar, as the server reads them), made by
    compile(kind, spec), or None; StructuredOutputError names a bad argument."""
    return compiled(compile, {"response_format": response_format, "grammar": grammar})


def make_request(profile, tokens: list[int], max_new: int, emit, *, temperature=None,
                 top_p=None, seed=None, repeat_penalty=None, frequency_penalty: float = 0.0,
                 presence_penalty: float = 0.0, ignore_eos: bool = False, logprobs=None,
                 seed_offset: int = 0, stop_ids=None, top_k: int = 0,
                 min_p: float = 0.0, typical_p: float = 1.0, logit_bias=None,
                 constraint=None) -> Request:
    """The scheduler Request of one choice: unset sampling fields from the model's profile
    (the model card's), choice k's seed = seed + k, stop at `stop_ids` (None: the
    profile's); top_k, min_p, typical_p None: off (the Python API does not set them)."""
    stop_ids = tuple(profile.stop_ids) if stop_ids is None else tuple(stop_ids)
    seed = None if seed is None else seed + seed_offset
    return Request(
        tokens=tokens, max_new=max_new, emit=emit,
        temperature=profile.temperature if temperature is None else temperature,
        top_p=profile.top_p if top_p is None else top_p,
        seed=seed if seed is None or seed > 0 else seed + 2 ** 32,  # run.c: <= 0 is "clock"
        repeat_penalty=profile.repeat_penalty if repeat_penalty is None else repeat_penalty,
        frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
        top_k=0 if top_k is None else top_k, min_p=0.0 if min_p is None else min_p,
        typical_p=1.0 if typical_p is None else typical_p, logit_bias=logit_bias,
        stop_ids=() if ignore_eos else stop_ids, logprobs=logprobs, constraint=constraint)


class Choice:
    """One choice's text: tokens in, text pieces out (stop strings cut), logprobs kept."""

    def __init__(self, tokenizer, index: int, prev: int, stop, logprobs: int | None):
        self.tok = tokenizer
        self.index = index
        self.dec = StreamDecoder(self.tok, prev)
        self.stop = StopMatcher(stop)
        self.prev = prev
        self.want_lp = logprobs is not None
        self.lp: list[dict] = []  # per token: token text, logprob, top
        self.lp_sent = 0
        self.text: list[str] = []
        self.tokens = 0
        self.finish: str | None = None
        self.req = None
        self.reply = None  # text/chatplan.Reply: reasoning and tool calls split from the text

    def _piece(self, t: int) -> str:
        return self.tok.text_bytes(self.prev, t).decode("utf-8", "replace")

    def token(self, t: int, lp) -> str:
        """The text this token releases ("" while held back; nothing after a stop string:
        the tokens the scheduler ran before it saw the cancellation are not counted)."""
        if self.stop.stopped:
            return ""
        self.tokens += 1
        if self.want_lp and lp is not None:
            chosen, top = lp
            self.lp.append({"token": self._piece(t), "logprob": chosen,
                            "top": [(self._piece(i), v) for i, v in top]})
        self.prev = t
        out, stopped = self.stop.feed(self.dec.feed(t))
        if stopped:
            self.finish = "stop"
            self.req.cancel()
        self.text.append(out)
        return out

    def done(self, reason: str) -> str:
        """The held-back tail at the end (none after a stop string)."""
        if self.finish is None:
            self.finish = "stop" if reason == "stop" else "length"
        if self.stop.stopped:
            return ""
        out, stopped = self.stop.feed(self.dec.flush())
        if stopped:
            self.finish = "stop"
        else:
            out += self.stop.flush()
        self.text.append(out)
        return out

    def new_logprobs(self) -> list[dict]:
        out, self.lp_sent = self.lp[self.lp_sent:], len(self.lp)
        return out


def chat_logprobs(entries: list[dict]) -> dict:
    def one(tok: str, lp: float) -> dict:
        return {"token": tok, "logprob": lp, "bytes": list(tok.encode("utf-8"))}
    return {"content": [{**one(e["token"], e["logprob"]),
                         "top_logprobs": [one(t, v) for t, v in e["top"]]} for e in entries]}


def text_logprobs(entries: list[dict], offset: int) -> dict:
    offsets, pos = [], offset
    for e in entries:
        offsets.append(pos)
        pos += len(e["token"])
    return {"tokens": [e["token"] for e in entries],
            "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [dict(e["top"]) for e in entries], "text_offset": offsets}


def choice_body(c: Choice, chat: bool, echo: str = "") -> dict:
    """A finished choice as an entry of a reply body's `choices`: chat's message (with what its
    `reply` reader splits off: reasoning, tool calls), or a completion's text after the echoed
    prompt (`echo`), with its logprobs and finish_reason."""
    text = "".join(c.text)
    if chat:
        msg = {"role": "assistant", "content": text}
        if c.reply is not None:  # reasoning and tool calls split from the text
            c.reply.feed(text)
            c.reply.finish()
            msg.update(c.reply.message())
        return {"index": c.index, "message": msg,
                "logprobs": chat_logprobs(c.lp) if c.want_lp else None,
                "finish_reason": "tool_calls" if "tool_calls" in msg else c.finish}
    return {"index": c.index, "text": echo + text,
            "logprobs": text_logprobs(c.lp, len(echo)) if c.want_lp else None,
            "finish_reason": c.finish}


def usage_body(n_prompt: int, choices) -> dict:
    """OpenAI's usage: the prompt's tokens and every choice's generated ones."""
    done = sum(c.tokens for c in choices)
    return {"prompt_tokens": n_prompt, "completion_tokens": done,
            "total_tokens": n_prompt + done}
