"""How many sequences an inference worker's llama.cpp engine decodes together (issue 49):
`inference_max_sequences`, fewer where their KV cache would not fit the memory cap, and never more than
the model's batch-invariance bound (Gemma-3-270M: 7), from the real catalog configs."""

from __future__ import annotations

import pytest

from lcsb_core.models.gguf_import import ensure_model
from lcsb_service.settings import Settings
from worker.inference.serving import kv_mib_per_token, sequence_slots


def test_kv_cache_per_token_from_the_real_configs():
    # SmolLM2-135M: 30 layers x 3 KV heads x 64 x (K and V) x 2 bytes = 22.5 KiB a token
    assert kv_mib_per_token(ensure_model("SmolLM2-135M-Instruct")) == pytest.approx(30 * 3 * 64 * 2 * 2 / 2**20)
    # Gemma-3-270M (text_config): 18 layers x 1 KV head x 256 x 2 x 2 bytes = 18 KiB
    assert kv_mib_per_token(ensure_model("gemma-3-270m")) == pytest.approx(18 * 1 * 256 * 2 * 2 / 2**20)


@pytest.mark.parametrize("memory_mib, wanted, invariant, slots", [
    (4096, 4, None, 4),     # the defaults: (4096 - 512 - 100) / 2 = 1742 MiB holds 9 sequences of 180 MiB
    (4096, 16, None, 9),    # more than fit: the memory decides
    (1024, 4, None, 1),     # (1024 - 512 - 100) / 2 = 206 MiB: one sequence (never none)
    (4096, 16, 7, 7),       # Gemma's bound for answers that do not depend on their batch
    (4096, 4, 7, 4),        # under the bound: the setting
])
def test_sequence_slots(tmp_path, memory_mib, wanted, invariant, slots):
    s = Settings(data_dir=tmp_path, inference_memory_mib=memory_mib, inference_max_sequences=wanted,
                 inference_adapter_cache_mib=512)
    assert sequence_slots(s, 180.0, 100.0, invariant) == slots
