"""OpenAI-shaped generation for the Python API (Model.create_chat_completion,
create_completion, and the batched Model.generate): prompts become scheduler Requests
(runtime.responses.make_request, as the server makes them) run through a Scheduler over the
model's own engine, their tokens turned into text by the server's Choice (stop strings cut,
logprobs kept), and the results shaped as the server shapes its JSON bodies and SSE chunks.

A batch holds the model (its lock) from its first event to its last; a Scheduler's rows give
each request exactly the tokens it gets alone, so a batch's results equal the prompts run one
by one (at temperature 0, or with a seed)."""

from __future__ import annotations

import queue
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from .runtime.batch import Scheduler
from .runtime.generate import DEFAULT_MAX_NEW, ContextFullError, GenerationConfig
from .runtime.responses import (
    Choice,
    chat_logprobs,
    choice_body,
    make_request,
    output_constraint,
    structured_output,
    text_logprobs,
    usage_body,
)

PREFILL_CHUNK = 256  # prompt tokens per scheduler step (the server's default)
MAX_TOP_LOGPROBS = 20  # alternatives per token, as the server allows


def budget(model, n_prompt: int, max_tokens: int | None) -> int:
    """New tokens for an n_prompt-token prompt: max_tokens (None: DEFAULT_MAX_NEW) at most,
    and what the context has room for."""
    ctx = model.config.seq_len
    if n_prompt >= ctx:
        raise ContextFullError(f"the prompt is {n_prompt} tokens; the context holds {ctx} (no "
                               "room to generate)")
    want = DEFAULT_MAX_NEW if max_tokens is None else max_tokens
    if isinstance(want, bool) or not isinstance(want, int) or want < 1:
        raise ValueError(f"max_tokens must be an integer >= 1, got {want!r}")
    return min(want, ctx - n_prompt)


def run(model, prompts: list[list[int]], max_new: list[int], sampling: dict, stop,
        logprobs: int | None = None, n: int = 1, plan=None
        ) -> Iterator[tuple[int, str, object, Choice]]:
    """(choice index, kind, text or finish reason, its Choice) as the scheduler's events come:
    ("text", piece) for each piece a token releases and ("done", finish_reason) once per
    choice. Choice k of prompt p is index p * n + k (seed + k, as the server's). `sampling`:
    make_request's keywords, checked by GenerationConfig first. `plan` (a chat's
    text/chatplan.ChatPlan) gives each choice its reply reader, as the server's."""
    stop = [stop] if isinstance(stop, str) else stop  # OpenAI's: a string or a list
    stop = GenerationConfig(temperature=sampling.get("temperature"),
                            top_p=sampling.get("top_p"), seed=sampling.get("seed"),
                            repeat_penalty=sampling.get("repeat_penalty"), stop=stop or ()).stop
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    for name in ("frequency_penalty", "presence_penalty"):  # OpenAI's range, as the server's
        v = sampling.get(name, 0.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not -2.0 <= v <= 2.0:
            raise ValueError(f"{name} must be a number between -2 and 2, got {v!r}")
    return _events(model, prompts, max_new, sampling, stop, logprobs, n, plan)


def _events(model, prompts, max_new, sampling, stop, logprobs, n, plan):
    events: queue.SimpleQueue = queue.SimpleQueue()
    with model.session.hold():
        model.session.cached = []  # the scheduler's rows overwrite the slots' caches
        sched = Scheduler(model.engine, max_queue=len(prompts) * n, prefill_chunk=PREFILL_CHUNK)
        choices, reqs = [], []
        try:
            for p, toks in enumerate(prompts):
                for k in range(n):
                    i = len(choices)
                    c = Choice(model.tokenizer, i, toks[-1], stop, logprobs)
                    c.req = make_request(model.profile, toks, max_new[p],
                                         lambda kind, v, x, i=i: events.put((i, kind, v, x)),
                                         logprobs=logprobs, seed_offset=k, **sampling)
                    c.reply = plan.reply(sampling.get("seed"), i) if plan else None
                    choices.append(c)
                    reqs.append(c.req)
            for r in reqs:
                sched.submit(r)
            left = len(reqs)
            while left:
                try:
                    i, kind, value, extra = events.get(timeout=1.0)
                except queue.Empty:
                    if not sched.alive:  # never expected: fail rather than wait forever
                        raise RuntimeError("generation failed: the scheduler stopped") from None
                    continue
                c = choices[i]
                if kind == "token":
                    piece = c.token(value, extra)
                    if piece:
                        yield i, "text", piece, c
                elif kind == "error":
                    raise RuntimeError(f"generation failed: {value}")
                else:
                    left -= 1
                    piece = c.done(value)
                    if piece:
                        yield i, "text", piece, c
                    yield i, "done", c.finish, c
        finally:
            for r in reqs:
                r.cancel()
            sched.close()
            model.session.cached = []


def _name(model) -> str:
    p = Path(model.path)
    return p.name if p.is_dir() else p.stem


def chat_completion(model, messages, *, max_tokens=None, temperature=None, top_p=None,
                    seed=None, stop=None, stream=False, logprobs=False, top_logprobs=None,
                    tools=None, tool_choice=None, response_format=None,
                    parallel_tool_calls=None, chat_template_kwargs=None, n=1,
                    frequency_penalty=0.0, presence_penalty=0.0, repeat_penalty=None,
                    grammar=None):
    plan = structured_output(tools, tool_choice, response_format,
                             template=model.chat_template,
                             parallel_tool_calls=parallel_tool_calls,
                             chat_template_kwargs=chat_template_kwargs, grammar=grammar,
                             compile=model.constraint)
    if top_logprobs is not None and not logprobs:
        raise ValueError("top_logprobs needs logprobs=True")
    if top_logprobs is not None and (isinstance(top_logprobs, bool) or not isinstance(
            top_logprobs, int) or not 0 <= top_logprobs <= MAX_TOP_LOGPROBS):
        raise ValueError(f"top_logprobs must be an integer in [0, {MAX_TOP_LOGPROBS}], got "
                         f"{top_logprobs!r}")
    lp = (top_logprobs or 0) if logprobs else None
    tokens = model.chat_tokens(messages, plan.tools, template_kwargs=plan.kwargs)
    events = run(model, [tokens], [budget(model, len(tokens), max_tokens)],
                 dict(temperature=temperature, top_p=top_p, seed=seed,
                      repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                      presence_penalty=presence_penalty, constraint=plan.compiled), stop, lp,
                 n, plan)
    head = {"id": "chatcmpl-" + uuid.uuid4().hex[:24], "object": "chat.completion",
            "created": int(time.time()), "model": _name(model), "system_fingerprint": None}
    if stream:
        return _chat_chunks(events, head, n)
    choices = _drain(events, n)
    return {**head, "choices": [choice_body(c, True) for c in choices],
            "usage": usage_body(len(tokens), choices)}


def completion(model, prompt, *, max_tokens=None, temperature=None, top_p=None, seed=None,
               stop=None, stream=False, logprobs=None, echo=False, n=1,
               frequency_penalty=0.0, presence_penalty=0.0, repeat_penalty=None,
               response_format=None, grammar=None):
    constraint = output_constraint(model.constraint, response_format, grammar)
    if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int)
                                 or not 0 <= logprobs <= MAX_TOP_LOGPROBS):
        raise ValueError(f"logprobs must be an integer in [0, {MAX_TOP_LOGPROBS}] or None, got "
                         f"{logprobs!r}")
    tokens = model.tokenize(prompt, add_special=True) if isinstance(prompt, str) else list(prompt)
    if not tokens:
        raise ValueError("the prompt encodes to no tokens")
    bad = [t for t in tokens if not 0 <= t < model.config.vocab_size]
    if bad:
        raise ValueError(f"token ids out of range [0, {model.config.vocab_size}): {bad[:5]}")
    echo_text = ""
    if echo:
        echo_text = prompt if isinstance(prompt, str) else model.detokenize(tokens)
    events = run(model, [tokens], [budget(model, len(tokens), max_tokens)],
                 dict(temperature=temperature, top_p=top_p, seed=seed,
                      repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                      presence_penalty=presence_penalty, constraint=constraint), stop,
                 logprobs, n)
    head = {"id": "cmpl-" + uuid.uuid4().hex[:24], "object": "text_completion",
            "created": int(time.time()), "model": _name(model), "system_fingerprint": None}
    if stream:
        return _text_chunks(events, head, n, echo_text)
    choices = _drain(events, n)
    return {**head, "choices": [choice_body(c, False, echo_text) for c in choices],
            "usage": usage_body(len(tokens), choices)}


def _drain(events, n: int) -> list[Choice]:
    out: dict[int, Choice] = {}
    for i, _, _, c in events:
        out[i] = c
    return [out[i] for i in range(n)]


def _chat_chunks(events, head: dict, n: int) -> Iterator[dict]:
    head = {**head, "object": "chat.completion.chunk"}
    yield {**head, "choices": [{"index": i, "delta": {"role": "assistant", "content": ""},
                                "logprobs": None, "finish_reason": None} for i in range(n)]}
    for i, kind, value, c in events:
        if c.reply is not None:  # reasoning and tool calls split off, as the server's
            deltas = c.reply.feed(value) if kind == "text" else c.reply.finish()
        else:
            deltas = [{"content": value}] if kind == "text" else []
        for d in deltas:
            lp = c.new_logprobs() if c.want_lp else None
            yield {**head, "choices": [{"index": i, "delta": d, "logprobs":
                                        None if lp is None else chat_logprobs(lp),
                                        "finish_reason": None}]}
        if kind == "done":
            if c.reply is not None and c.reply.n_calls:
                value = c.finish = "tool_calls"
            yield {**head, "choices": [{"index": i, "delta": {}, "logprobs": None,
                                        "finish_reason": value}]}


def _text_chunks(events, head: dict, n: int, echo: str) -> Iterator[dict]:
    offsets = [len(echo)] * n
    if echo:
        yield {**head, "choices": [{"index": i, "text": echo, "logprobs": None,
                                    "finish_reason": None} for i in range(n)]}
    for i, kind, value, c in events:
        if kind == "text":
            lp = c.new_logprobs() if c.want_lp else None
            yield {**head, "choices": [{"index": i, "text": value, "logprobs":
                                        None if lp is None else text_logprobs(lp, offsets[i]),
                                        "finish_reason": None}]}
            offsets[i] += len(value)
        else:
            yield {**head, "choices": [{"index": i, "text": "", "logprobs": None,
                                        "finish_reason": value}]}


def generate_many(model, prompts: list, config: GenerationConfig) -> list[str]:
    """Each prompt's continuation (text, or token ids with BOS included), all run through one
    Scheduler; `config` is complete (ModelProfile.complete) and not `echo`/`steps`."""
    toks = [model._tokens(p) for p in prompts]
    for t in toks:
        if not t:
            raise ValueError("the prompt encodes to no tokens")
        if len(t) > model.config.seq_len:
            raise ContextFullError(f"the prompt is {len(t)} tokens, longer than the context "
                                   f"({model.config.seq_len}; see --ctx)")
    seq_len = model.config.seq_len
    new = [config.new_tokens(len(t), seq_len) for t in toks]
    out = [""] * len(toks)
    live = [k for k in range(len(toks)) if new[k] > 0]
    if not live:
        return out
    sampling = dict(temperature=config.temperature, top_p=config.top_p, seed=config.seed,
                    repeat_penalty=config.repeat_penalty, stop_ids=config.stop_ids,
                    constraint=config.constraint)
    parts: dict[int, list[str]] = {k: [] for k in range(len(live))}
    for i, kind, value, _ in run(model, [toks[k] for k in live], [new[k] for k in live],
                                 sampling, config.stop):
        if kind == "text":
            parts[i].append(value)
    for j, k in enumerate(live):
        out[k] = "".join(parts[j])
    return out

