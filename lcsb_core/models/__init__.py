"""Base model loading, GGUF import and quantization."""
