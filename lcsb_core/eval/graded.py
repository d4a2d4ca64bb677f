"""The trainer's graded evaluation: answer the samples, grade them, write the run's sample file.

    evaluator = GradedEvaluator(settings, samples, tokenizer, files.root, max_prompt_tokens=512)
    scores = evaluator.evaluate(model, step=0, base=True)    # under the adapter's `disable_adapter()`
    scores = evaluator.evaluate(model, step=100)             # {"grader/numeric": 0.25, ...}

Each evaluation writes `<run>/eval_samples/step-<N>.jsonl` and copies it to `<run>/eval_samples.jsonl`
(the latest one, which the worker publishes; names from `lcsb_core.run_files`), one row per sample:
step, line, prompt, reference, base_answer, answer, answer_tokens (tokens generated, an end token
included), engine (which engine answered), grades ({grader name: 0.0 or 1.0}) and base_grades (the same
graders on base_answer, so a reader sees what changed without grading again).

Answers come from the serving engine when the run has one (`served`, a `ServedAnswers`: llama.cpp on the
catalog's base GGUF, the adapter saved by `save_adapter` and converted as the inference worker converts
it, every prompt decoded in one batch), so a graded answer is the served one; else (a model outside the
catalog, no llama-cpp-python, a GPU run) from transformers `generate` on the training model
(`generate_answers`), which the transformers inference engine serves within numerical noise. The base model's
answers come from the step-0 evaluation; when there was none (`eval_at_start` off, a resumed run), the
first evaluation generates them with the adapter disabled.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from torch import nn

from lcsb_core.eval.generate import generate_answers
from lcsb_core.eval.graders import grade_all
from lcsb_core.eval.samples import EvalSample
from lcsb_core.eval.settings import EvalSettings
from lcsb_core.run_files import RunFiles

TRANSFORMERS = "transformers"


class Served(Protocol):
    """What `GradedEvaluator` needs of a serving engine (`lcsb_core.eval.served.ServedAnswers`)."""

    engine_name: str

    def answers(self, samples: list[EvalSample], adapter_dir: Path | None, *, max_new_tokens: int,
                frequency_penalty: float = 0.0, presence_penalty: float = 0.0, max_prompt_tokens: int | None = None,
                on_token: Callable[[int, int], None] | None = None) -> tuple[list[str], list[int]]: ...


class GradedEvaluator:
    """Graded evaluation of one run: `settings` (graders, max_new_tokens, penalties), its `samples`, the
    model's `tokenizer`, the run folder `run_dir`; `max_prompt_tokens` keeps a prompt's last tokens.
    `served` and `save_adapter(out_dir)` (writes the model's adapter as a checkpoint does): answer on the
    serving engine; without them, on the training model with transformers."""

    def __init__(self, settings: EvalSettings, samples: list[EvalSample], tokenizer: Any, run_dir: str | Path, *,
                 max_prompt_tokens: int | None = None, served: Served | None = None,
                 save_adapter: Callable[[Path], object] | None = None) -> None:
        self.settings, self.samples, self.tokenizer = settings, samples, tokenizer
        self.files = RunFiles(run_dir)
        self.max_prompt_tokens = max_prompt_tokens
        self.served: Served | None = served if save_adapter is not None else None
        self.save_adapter: Callable[[Path], object] | None = save_adapter
        self.engine = self.served.engine_name if self.served is not None else TRANSFORMERS
        self.prompts = [s.render(tokenizer) for s in samples]
        self.base_answers: list[str] | None = None
        self.base_grades: list[dict[str, float]] | None = None

    def answers(self, model: nn.Module, on_token: Callable[[int, int], None] | None = None, *,
                base: bool = False) -> tuple[list[str], list[int]]:
        """(greedy answers, their token counts) of the model as it is now; `base`: of the base model (the
        adapter off). `on_token`: see `generate_answers`."""
        s = self.settings
        if self.served is not None and self.save_adapter is not None:
            adapter_dir = None
            if not base:
                adapter_dir = self.files.root / "eval_engine" / "adapter"
                shutil.rmtree(adapter_dir, ignore_errors=True)
                self.save_adapter(adapter_dir)
            try:
                return self.served.answers(self.samples, adapter_dir, max_new_tokens=s.max_new_tokens,
                                           frequency_penalty=s.frequency_penalty, presence_penalty=s.presence_penalty,
                                           max_prompt_tokens=self.max_prompt_tokens, on_token=on_token)
            finally:
                if adapter_dir is not None:
                    shutil.rmtree(adapter_dir, ignore_errors=True)
        if base:
            with model.disable_adapter():  # type: ignore[operator]
                return self.answers(model, on_token)
        return generate_answers(model, self.tokenizer, [smp.prompt_ids(self.tokenizer) for smp in self.samples],
                                max_new_tokens=s.max_new_tokens, frequency_penalty=s.frequency_penalty,
                                presence_penalty=s.presence_penalty, max_prompt_tokens=self.max_prompt_tokens,
                                on_token=on_token)

    def evaluate(self, model: nn.Module, step: int, *, base: bool = False,
                 on_token: Callable[[int, int], None] | None = None) -> dict[str, float]:
        """Answer, grade and write the samples of the evaluation after `step` optimizer steps; returns
        the mean score per grader, keyed `grader/<name>`. `base`: `model` is the base model (the caller
        disabled the adapter), whose answers later evaluations show beside theirs. `on_token(done,
        total)` after each decoding step."""
        answers, counts = self.answers(model, on_token, base=base and self.served is not None)
        references = [s.reference for s in self.samples]
        grades, scores = grade_all(self.settings.parsed, answers, references)
        if base:
            self.base_answers, self.base_grades = answers, grades
        elif self.base_answers is None:
            self.base_answers = self.answers(model, on_token, base=True)[0]
            self.base_grades = grade_all(self.settings.parsed, self.base_answers, references)[0]
        self._write(step, answers, counts, grades)
        return scores

    def _write(self, step: int, answers: list[str], counts: list[int], grades: list[dict[str, float]]) -> None:
        folder = self.files.eval_samples_dir
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"step-{step:06d}.jsonl"
        base = self.base_answers or [""] * len(answers)
        base_grades = self.base_grades or [{}] * len(answers)
        with open(path, "w") as fh:
            for sample, prompt, answer, count, base_answer, grade, base_grade in zip(
                    self.samples, self.prompts, answers, counts, base, grades, base_grades, strict=True):
                fh.write(json.dumps({"step": step, "line": sample.line, "prompt": prompt,
                                     "reference": sample.reference, "base_answer": base_answer,
                                     "answer": answer, "answer_tokens": count, "engine": self.engine,
                                     "grades": grade, "base_grades": base_grade},
                                    ensure_ascii=False) + "\n")
        shutil.copyfile(path, self.files.eval_samples)
