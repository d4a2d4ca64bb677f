"""The `eval` section of a `TrainConfig` (the job spec's `method.eval`): graded evaluation settings.
Torch-free; the API schema reads the bounds and defaults from here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lcsb_core.errors import ConfigError
from lcsb_core.eval.graders import Grader, parse_graders, spec_of

N_SAMPLES_RANGE = (1, 512)        # [min, max] prompts answered per evaluation
MAX_NEW_TOKENS_RANGE = (1, 512)   # [min, max] tokens generated per answer
PENALTY_RANGE = (-2.0, 2.0)       # OpenAI's frequency_penalty / presence_penalty range
DEFAULT_N_SAMPLES = 64
DEFAULT_MAX_NEW_TOKENS = 128
# Tokens (prompt + new, padded) per `generate` call: its KV cache's size (`lcsb_core.eval.generate`;
# the memory estimate's `generation_tokens`). On CPU, fewer and larger batches make it affordable;
# SmolLM2 keeps 46 KB of fp32 KV cache per token (30 layers x K,V x 3 heads x 64), 375 MB at this budget.
GENERATION_TOKENS = 8192


@dataclass
class EvalSettings:
    """Graded evaluation: the model answers the first `n_samples` prompts of `eval_file` (or, when it is
    None, of the validation file) greedily, at most `max_new_tokens` tokens each, and every grader of
    `graders` (specs as `lcsb_core.eval.graders.parse_graders` reads them; parsed once, here) scores the
    answers against the references. A chat line's prompt is its conversation up to the last assistant
    turn and its reference that turn; a prompt/completion line's are its prompt and completion; a text
    corpus has no references and is refused (by `TrainConfig.check_honoured` and the service).
    `frequency_penalty` and `presence_penalty` (OpenAI's, in `PENALTY_RANGE`, default 0: plain greedy)
    apply to the graded answers as they do to a served answer (`inference.SamplingParams`)."""

    graders: tuple[dict[str, Any], ...] = ()
    n_samples: int = DEFAULT_N_SAMPLES
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    eval_file: str | None = None
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0

    def __post_init__(self) -> None:
        parsed = parse_graders(list(self.graders), "eval.graders")
        self._parsed = parsed  # not a dataclass field: `dataclasses.asdict` keeps to the plain specs
        self.graders = tuple(spec_of(g) for g in parsed)
        for name, value, (low, high) in (("eval.n_samples", self.n_samples, N_SAMPLES_RANGE),
                                         ("eval.max_new_tokens", self.max_new_tokens, MAX_NEW_TOKENS_RANGE)):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ConfigError(name, f"must be an integer in [{low}, {high}], got {value!r}")
        for key, penalty in (("eval.frequency_penalty", self.frequency_penalty),
                             ("eval.presence_penalty", self.presence_penalty)):
            if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or \
                    not PENALTY_RANGE[0] <= penalty <= PENALTY_RANGE[1]:
                raise ConfigError(key, f"must be a number in [{PENALTY_RANGE[0]:g}, {PENALTY_RANGE[1]:g}], "
                                       f"got {penalty!r}")
        if self.eval_file is not None and not (isinstance(self.eval_file, str) and self.eval_file):
            raise ConfigError("eval.eval_file", "must be a file path (or left out to use the validation file)")

    def generation_tokens(self, max_prompt_tokens: int) -> int:
        """The most tokens one `generate` call holds (its KV cache): `GENERATION_TOKENS`, or one row of
        `max_prompt_tokens` + `max_new_tokens` when that is longer (a call holds one row at least)."""
        return max(GENERATION_TOKENS, max_prompt_tokens + self.max_new_tokens)

    @property
    def parsed(self) -> tuple[Grader, ...]:
        """The graders, parsed once (a regex compiled) when the settings were built."""
        return self._parsed
