"""Graded evaluation: the model answers held-out prompts greedily and graders score the answers.

`graders` (torch-free: grader specs and scoring), `settings` (`EvalSettings`, the `eval` section of a
`TrainConfig`; torch-free), `samples` (prompts and references from a chat or prompt/completion file;
torch-free), `generate` (batched greedy generation with a KV cache, leaving training state as it was),
`graded` (`GradedEvaluator`: the trainer's per-evaluation step, writing `eval_samples.jsonl`), `served`
(`ServedAnswers`: the graded answers on the serving engine, llama.cpp, as `/v1/chat/completions` answers;
`generate` is the fallback where serving uses transformers). Entry points: `GradedEvaluator`,
`ServedAnswers`, `EvalSettings`, `parse_graders`.
"""
