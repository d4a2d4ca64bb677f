"""The trainer's graded evaluation: answer the samples, grade them, write the run's sample file.

    evaluator = GradedEvaluator(settings, samples, tokenizer, files.root, max_prompt_tokens=512)
    scores = evaluator.evaluate(model, step=0, base=True)    # under the adapter's `disable_adapter()`
    scores = evaluator.evaluate(model, step=100)             # {"grader/numeric": 0.25, ...}

Each evaluation writes `<run>/eval_samples/step-<N>.jsonl` and copies it to `<run>/eval_samples.jsonl`
(the latest one, which the worker publishes; names from `lcsb_core.run_files`), one row per sample:
step, line, prompt, reference, base_answer, answer, grades ({grader name: 0.0 or 1.0}) and base_grades (the
same graders on base_answer, so a reader sees what changed without grading again). The base model's
answers come from the step-0 evaluation; when there was none (`eval_at_start` off, a resumed run), the
first evaluation generates them with the adapter disabled.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch import nn

from lcsb_core.eval.generate import generate_answers
from lcsb_core.eval.graders import grade_all
from lcsb_core.eval.samples import EvalSample
from lcsb_core.eval.settings import EvalSettings
from lcsb_core.run_files import RunFiles


class GradedEvaluator:
    """Graded evaluation of one run: `settings` (graders, max_new_tokens), its `samples`, the model's
    `tokenizer`, the run folder `run_dir`; `max_prompt_tokens` keeps a prompt's last tokens."""

    def __init__(self, settings: EvalSettings, samples: list[EvalSample], tokenizer: Any, run_dir: str | Path, *,
                 max_prompt_tokens: int | None = None) -> None:
        self.settings, self.samples, self.tokenizer = settings, samples, tokenizer
        self.files = RunFiles(run_dir)
        self.max_prompt_tokens = max_prompt_tokens
        self.prompts = [s.render(tokenizer) for s in samples]
        self.base_answers: list[str] | None = None
        self.base_grades: list[dict[str, float]] | None = None

    def answers(self, model: nn.Module, on_token: Callable[[int, int], None] | None = None) -> list[str]:
        """The model's greedy answers to the samples' prompts, as it is now (`on_token`: see
        `generate_answers`)."""
        return generate_answers(model, self.tokenizer, self.prompts, max_new_tokens=self.settings.max_new_tokens,
                                add_special_tokens=[not s.messages for s in self.samples],
                                max_prompt_tokens=self.max_prompt_tokens, on_token=on_token)

    def evaluate(self, model: nn.Module, step: int, *, base: bool = False,
                 on_token: Callable[[int, int], None] | None = None) -> dict[str, float]:
        """Answer, grade and write the samples of the evaluation after `step` optimizer steps; returns
        the mean score per grader, keyed `grader/<name>`. `base`: `model` is the base model (the caller
        disabled the adapter), whose answers later evaluations show beside theirs. `on_token(done,
        total)` after each decoding step."""
        answers = self.answers(model, on_token)
        references = [s.reference for s in self.samples]
        grades, scores = grade_all(self.settings.parsed, answers, references)
        if base:
            self.base_answers, self.base_grades = answers, grades
        elif self.base_answers is None:
            with model.disable_adapter():  # type: ignore[operator]
                self.base_answers = self.answers(model, on_token)
            self.base_grades = grade_all(self.settings.parsed, self.base_answers, references)[0]
        self._write(step, answers, grades)
        return scores

    def _write(self, step: int, answers: list[str], grades: list[dict[str, float]]) -> None:
        folder = self.files.eval_samples_dir
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"step-{step:06d}.jsonl"
        base = self.base_answers or [""] * len(answers)
        base_grades = self.base_grades or [{}] * len(answers)
        with open(path, "w") as fh:
            for sample, prompt, answer, base_answer, grade, base_grade in zip(
                    self.samples, self.prompts, answers, base, grades, base_grades, strict=True):
                fh.write(json.dumps({"step": step, "line": sample.line, "prompt": prompt,
                                     "reference": sample.reference, "base_answer": base_answer,
                                     "answer": answer, "grades": grade, "base_grades": base_grade},
                                    ensure_ascii=False) + "\n")
        shutil.copyfile(path, self.files.eval_samples)
