"""Models: the shipped base models and how one is loaded.

- `catalog` (torch-free): the shipped base models (package, GGUF and SHA-256, hub id, layers, context).
- `gguf_import`: a catalog model's GGUF, hash-checked -> a cached bf16 safetensors folder
  (`ensure_model`, `ensure_default_model`, `shipped_gguf_path`).
- `loading`: a local folder -> quantized causal LM + tokenizer (`load_base_model`, `load_tokenizer`);
  `quantization`: the one module that knows bitsandbytes.
- `modules`: where things sit in a loaded model, plain or PEFT-wrapped (`causal_lm`, `decoder_layers`,
  `autocast_for`).
- `identity` (a folder's public hub id), `shapes` (parameter counts and projection shapes from a config,
  torch-free), `tiny` (tiny random models with SmolLM2's tokenizer, for tests and benchmarks).
"""
