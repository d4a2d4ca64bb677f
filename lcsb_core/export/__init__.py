"""Export a trained LoRA for llama.cpp and Ollama: GGUF adapter, merged GGUF files, Modelfile, README and
manifest (issue 33). Torch-free: numpy, safetensors, `gguf` and jinja2; nothing is read from a model hub.

- `formats`: format names, files, and what each cannot hold (`refusals`; pure Python, for the API).
- `adapter`: a PEFT adapter folder as numpy arrays with PEFT's per-module scale.
- `base`: the shipped base GGUF (names, llama's q/k row permutation, de-quantized tensors).
- `convert`: llama.cpp's LoRA adapter file, and merged copies of the base GGUF.
- `templates`: the job's chat template, rendered as training did, and its Ollama form.
- `bundle`: one export folder (`export_adapter`), with `Modelfile`, `README.md`, `manifest.json`.
- `run`: a run folder or checkpoint -> its export (`export_run`, for `lcsb export` and the worker).
- `fidelity`: llama.cpp against PEFT (needs torch and llama-cpp-python; tests and bench only).
"""
