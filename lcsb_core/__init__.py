"""LCSB trainer core: Layer-Cyclic Selective Backpropagation (arXiv 2602.13073) on LoRA + 4-bit bases."""

__version__ = "0.1.0"
