"""Model profiles: how a family of models is driven, chosen once when a model is loaded (no
"is this llama2.c?" checks anywhere else).

- llama2.c files (their tokenizer.bin): run.c's behaviour exactly: BOS always, temperature
  1.0, top-p 0.9, no repetition penalty, 256 positions; `isaforge run` echoes the prompt and
  prints each token's piece as run.c's safe_printf does, its loop ending only at BOS.
- chat models (GGUF, HF, .isaf with their own tokenizer and a chat template): the model
  card's sampling (SmolLM2: temperature 0.2, top-p 0.9), llama.cpp's repetition penalty 1.1
  over the last 64 tokens (without it SmolLM2-135M at 0.2 loops on a phrase for some seeds,
  in llama.cpp too), 512 new tokens, stop at the tokenizer's end-of-turn ids, BOS as the
  tokenizer says; `isaforge run` prints only the reply.
- the same tokenizers without a template: plain continuation at temperature 1.0.
"""

from __future__ import annotations

from dataclasses import dataclass

from .generate import GenerationConfig

CHAT_TEMPERATURE, CHAT_TOP_P = 0.2, 0.9
REPEAT_PENALTY = 1.1


@dataclass(frozen=True)
class ModelProfile:
    name: str  # "llama2c", "chat" or "plain"
    tokenizer: object
    temperature: float
    top_p: float
    repeat_penalty: float
    echo_prompt: bool = True  # `isaforge run` prints the prompt, then its continuation (chat
    #                           models print only the reply to it, unless --raw)
    steps: int | None = None  # default budget in positions (run.c's -n), else max_new_tokens
    runc_output: bool = False  # `isaforge run` prints token pieces as run.c does, see above

    @property
    def add_bos(self) -> bool:
        """Whether encoded text starts with BOS (llama2.c: always; else the tokenizer's)."""
        return bool(self.tokenizer.add_bos)

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """Token ids that end a reply: the tokenizer's EOS/EOT set (llama2.c: BOS, EOS); read
        from the tokenizer each time."""
        return tuple(self.tokenizer.stop_ids)

    @property
    def run_stop_ids(self) -> tuple[int, ...]:
        """Where `isaforge run`'s loop ends: run.c's only at BOS."""
        return (self.tokenizer.bos_id,) if self.runc_output else self.stop_ids

    def complete(self, config: GenerationConfig) -> GenerationConfig:
        """`config` with its unset sampling fields and stop ids from this profile."""
        c = config
        return c.replace(
            temperature=self.temperature if c.temperature is None else c.temperature,
            top_p=self.top_p if c.top_p is None else c.top_p,
            repeat_penalty=self.repeat_penalty if c.repeat_penalty is None else c.repeat_penalty,
            stop_ids=self.stop_ids if c.stop_ids is None else tuple(c.stop_ids))


def profile_for(tokenizer, chat_template: str | None) -> ModelProfile:
    """The profile of a model with this tokenizer and chat template."""
    from ..text.llama2c import Llama2cTokenizer

    if isinstance(tokenizer, Llama2cTokenizer):
        return ModelProfile("llama2c", tokenizer, 1.0, 0.9, 1.0, steps=256, runc_output=True)
    if chat_template:
        return ModelProfile("chat", tokenizer, CHAT_TEMPERATURE, CHAT_TOP_P, REPEAT_PENALTY,
                            echo_prompt=False)
    return ModelProfile("plain", tokenizer, 1.0, 0.9, REPEAT_PENALTY)
