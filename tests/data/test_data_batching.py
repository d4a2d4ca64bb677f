"""collate (dynamic padding, packing with a block-diagonal causal mask) and iter_batches."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from lcsb_core.data import (
    EncodedExample,
    TokenizedDataset,
    ValidationReport,
    collate,
    count_target_tokens,
    iter_batches,
    pack_rows,
)

PAD = 2


def _ex(ids, line, first_target=1):
    labels = [-100] * first_target + ids[first_target:]
    return EncodedExample(list(ids), labels, line)


def _examples():
    g = torch.Generator().manual_seed(0)
    lengths = [5, 7, 4, 6]
    return [_ex(torch.randint(3, 100, (n,), generator=g).tolist(), i + 1, first_target=1 + i % 2)
            for i, n in enumerate(lengths)]


def test_padding_batch_shapes_and_masks():
    ex = _examples()
    batch = collate(ex, PAD)
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    assert batch["input_ids"].shape == (4, 7) and all(t.dtype == torch.long for t in batch.values())
    assert batch["attention_mask"].sum(1).tolist() == [5, 7, 4, 6]
    assert count_target_tokens(batch["labels"]) == sum(e.num_targets for e in ex)
    with pytest.raises(ValueError, match="max_seq_len"):
        collate(ex, PAD, max_seq_len=6)
    with pytest.raises(ValueError):
        collate([], PAD)


def test_pack_rows_first_fit_in_order():
    assert pack_rows([5, 7, 4, 6], 12) == [[0, 1], [2, 3]]
    assert pack_rows([5, 7, 4, 6], 11) == [[0], [1, 2], [3]]


def _tiny_model(attn: str) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         pad_token_id=PAD, bos_token_id=1, eos_token_id=PAD)
    config._attn_implementation = attn
    return LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("attn, mask_dtype", [("sdpa", None), ("sdpa", torch.float32), ("eager", torch.float32)])
def test_packed_forward_equals_separate_forwards(attn, mask_dtype):
    model = _tiny_model(attn)
    ex = _examples()
    batch = collate(ex, PAD, pack=True, max_seq_len=12, mask_dtype=mask_dtype)
    assert batch["input_ids"].shape == (2, 12) and batch["attention_mask"].shape == (2, 1, 12, 12)
    assert batch["position_ids"][0].tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6]
    assert batch["position_ids"][1, :10].tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 4, 5]
    assert (batch["labels"][1, 10:] == -100).all()
    with torch.no_grad():
        out = model(**batch)
        packed = out.logits
        per_token = []
        for row, members in enumerate(pack_rows([len(e.input_ids) for e in ex], 12)):
            start = 0
            for i in members:
                e = ex[i]
                alone = model(input_ids=torch.tensor([e.input_ids])).logits[0]
                torch.testing.assert_close(packed[row, start:start + len(e.input_ids)], alone, atol=1e-5, rtol=1e-5)
                logp = torch.log_softmax(alone[:-1], -1)
                tgt = torch.tensor(e.labels[1:])
                keep = tgt != -100
                per_token.append(-logp[keep].gather(1, tgt[keep, None]).squeeze(1))
                start += len(e.input_ids)
    # the packed loss is the mean over every example's target tokens, none across example boundaries
    expected = torch.cat(per_token).mean()
    torch.testing.assert_close(out.loss, expected, atol=1e-5, rtol=1e-5)
    assert count_target_tokens(batch["labels"]) == torch.cat(per_token).numel()


def test_padding_forward_loss_counts_only_targets():
    model = _tiny_model("sdpa")
    ex = _examples()
    with torch.no_grad():
        loss = model(**collate(ex, PAD)).loss
        packed = model(**collate(ex, PAD, pack=True, max_seq_len=12)).loss
    torch.testing.assert_close(loss, packed, atol=1e-5, rtol=1e-5)


def test_iter_batches_deterministic_and_keeps_last_partial_batch():
    ds = TokenizedDataset([_ex([5 + i] * (2 + i % 3), i + 1) for i in range(10)], ValidationReport("x", "jsonl"))

    def lines(**kw):
        out = []
        for batch in iter_batches(ds, 4, pad_token_id=PAD, **kw):
            out.append([int(r[0]) - 4 for r in batch["input_ids"]])
        return out

    a = lines(seed=1, epoch=0)
    assert a == lines(seed=1, epoch=0)
    assert a != lines(seed=1, epoch=1) and a != lines(seed=2, epoch=0)
    assert [len(b) for b in a] == [4, 4, 2]
    assert sorted(x for b in a for x in b) == list(range(1, 11))
    assert lines(seed=1, epoch=0, shuffle=False) == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10]]
    packed = list(iter_batches(ds, 4, seed=0, epoch=0, pad_token_id=PAD, pack=True, max_seq_len=8))
    assert sum(count_target_tokens(b["labels"]) for b in packed) == ds.num_target_tokens


def test_evaluation_order_is_shortest_first_and_stable():
    """`by_length` (an evaluation's order): shortest first, equal lengths in file order; a shuffled epoch
    and a packed one ignore it."""
    ex = [_ex(list(range(3, 3 + n)), i + 1) for i, n in enumerate([5, 7, 4, 6, 4])]
    data = TokenizedDataset(ex, ValidationReport("x", "jsonl"))
    batches = list(iter_batches(data, 2, seed=0, epoch=0, pad_token_id=PAD, shuffle=False, by_length=True))
    assert [b["attention_mask"].sum(1).tolist() for b in batches] == [[4, 4], [5, 6], [7]]
    assert [b["input_ids"].shape[1] for b in batches] == [4, 6, 7]
    in_file_order = list(iter_batches(data, 2, seed=0, epoch=0, pad_token_id=PAD, shuffle=False))
    assert [sum(b["input_ids"].numel() for b in bs) for bs in (batches, in_file_order)] == [27, 30]  # with padding
    assert [b["input_ids"].tolist() for b in iter_batches(data, 2, seed=0, epoch=0, pad_token_id=PAD,
                                                           by_length=True)] == \
        [b["input_ids"].tolist() for b in iter_batches(data, 2, seed=0, epoch=0, pad_token_id=PAD)]


def _grouped_data(n: int = 400) -> TokenizedDataset:
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(2, 200, (n,), generator=g).tolist()
    return TokenizedDataset([_ex([3 + i % 90] * m, i + 1) for i, m in enumerate(lengths)],
                            ValidationReport("x", "jsonl"))


def test_group_by_length_batches_similar_lengths_and_keeps_every_example_once():
    """`group_by_length` (transformers' get_length_grouped_indices): every example once per epoch, batches
    of similar length (far less padding than a random order of the same examples), the longest example in
    the first batch, an order fixed by (seed, epoch)."""
    data = _grouped_data()

    def epoch(**kw):
        return list(iter_batches(data, 4, pad_token_id=PAD, **kw))

    grouped, shuffled = epoch(seed=0, epoch=0, group_by_length=True), epoch(seed=0, epoch=0)
    lines = sorted(int(r[0]) for b in grouped for r in b["input_ids"])  # first token: 3 + (line - 1) % 90
    assert lines == sorted(int(r[0]) for b in shuffled for r in b["input_ids"])
    assert sum(count_target_tokens(b["labels"]) for b in grouped) == data.num_target_tokens
    padded = [sum(b["input_ids"].numel() for b in bs) for bs in (grouped, shuffled)]
    real = sum(len(e.input_ids) for e in data.examples)
    assert padded[0] < 1.1 * real < padded[1]  # grouped pads under 10 %, the random order far more
    longest = max(len(e.input_ids) for e in data.examples)
    assert grouped[0]["input_ids"].shape[1] == longest
    again = epoch(seed=0, epoch=0, group_by_length=True)
    assert all(torch.equal(a["input_ids"], b["input_ids"]) for a, b in zip(grouped, again, strict=True))
    other = epoch(seed=0, epoch=1, group_by_length=True)
    assert [b["input_ids"].shape for b in other] != [b["input_ids"].shape for b in grouped]
    # an evaluation's order (not shuffled) does not group: file order stays file order
    assert [b["input_ids"].tolist() for b in epoch(seed=0, epoch=0, shuffle=False, group_by_length=True)] == \
        [b["input_ids"].tolist() for b in epoch(seed=0, epoch=0, shuffle=False)]


def test_group_by_length_refuses_packing():
    data = _grouped_data(8)
    with pytest.raises(ValueError, match="group_by_length does not apply with pack"):
        next(iter_batches(data, 4, seed=0, epoch=0, pad_token_id=PAD, pack=True, max_seq_len=256,
                          group_by_length=True))
    from lcsb_core.data.settings import DataSettings
    from lcsb_core.errors import ConfigError

    with pytest.raises(ConfigError, match="data.group_by_length"):
        DataSettings(train_file="x.jsonl", pack=True, group_by_length=True)
