"""Continuing from another run's adapter (`TrainConfig.init_adapter`) on the tiny model: with the
optimizer state carried, N steps then M more in a new run folder equal one run of N + M steps; with
weights only, the run starts from the adapter with a fresh optimizer; a different shape is refused."""

import pytest
import torch

from lcsb_core.errors import ConfigError
from lcsb_core.training.callbacks import TrainerCallback
from lcsb_core.training.history import read_history
from tests.core.test_trainer import config, lora_tensors, trainer


class Losses(TrainerCallback):
    def __init__(self):
        self.losses: list[float] = []

    def on_step(self, report):
        self.losses.append(report.loss)


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    """A finished run of 8 steps (cosine schedule with warmup, dropout 0.1, cyclic k=1) with a
    checkpoint after step 4, and its per-step losses."""
    losses = Losses()
    t = trainer(config(tmp_path_factory.mktemp("parent")), callbacks=[losses])
    t.train()
    return t, losses.losses


def test_continued_with_optimizer_state_equals_the_combined_run(parent, tmp_path):
    combined, combined_losses = parent
    ckpt = combined.files.checkpoint_dir(4)
    losses = Losses()
    cont = trainer(config(tmp_path, init_adapter=str(ckpt), init_optimizer_state=True), callbacks=[losses])
    summary = cont.train()
    assert cont.files.root != combined.files.root and summary["steps"] == 8
    for a, b in zip(lora_tensors(combined), lora_tensors(cont), strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=0)
    assert losses.losses == combined_losses[4:]  # same data order, learning rates and dropout masks
    assert [r["step"] for r in read_history(cont.files.history)] == [4, 5, 6, 7]
    assert read_history(cont.files.history) == read_history(combined.files.history)[4:]


def test_weights_only_starts_from_the_adapter_with_a_fresh_optimizer(parent, tmp_path):
    combined, combined_losses = parent
    ckpt = combined.files.checkpoint_dir(4)
    state = torch.load(ckpt / "trainer_state.pt", weights_only=False)["lora"]
    t = trainer(config(tmp_path / "w", init_adapter=str(ckpt), max_steps=4, eval_every=0, save_every=0))
    t.setup()
    assert t._fresh_start() == 0
    for name, p in zip(t.param_names, t.params, strict=True):
        torch.testing.assert_close(p.detach(), state[name], rtol=0, atol=0)
    assert not t.optimizer.state  # AdamW starts afresh: no moments yet

    losses, fresh = Losses(), Losses()
    trainer(config(tmp_path / "c", init_adapter=str(ckpt), max_steps=4, eval_every=0, save_every=0),
            callbacks=[losses]).train()
    trainer(config(tmp_path / "f", max_steps=4, eval_every=0, save_every=0), callbacks=[fresh]).train()
    # the first batch of a new run is the parent's first batch: the trained adapter fits it better
    assert losses.losses[0] < fresh.losses[0]
    assert losses.losses[0] < combined_losses[0]
    assert fresh.losses[0] == pytest.approx(combined_losses[0], rel=1e-6)  # same batch, same start


@pytest.mark.parametrize(("over", "field"), [
    ({"lora": {"rank": 8, "alpha": 16}}, "lora.rank"),
    ({"lora": {"alpha": 4}}, "lora.alpha"),
    ({"lora": {"target_modules": ["q_proj", "v_proj"]}}, "lora.target_modules"),
])
def test_another_lora_shape_is_refused_naming_the_field(parent, tmp_path, over, field):
    ckpt = parent[0].files.checkpoint_dir(4)
    with pytest.raises(ConfigError) as err:
        trainer(config(tmp_path, init_adapter=str(ckpt), **over)).train()
    assert err.value.field == field and "init_adapter" in str(err.value)


def test_carried_state_needs_a_checkpoint_and_steps_left(parent, tmp_path):
    t = parent[0]
    with pytest.raises(ConfigError) as err:
        trainer(config(tmp_path / "a", init_adapter=str(t.files.adapter), init_optimizer_state=True)).train()
    assert err.value.field == "init_optimizer_state" and "trainer_state.pt" in str(err.value)
    with pytest.raises(ConfigError) as err:
        trainer(config(tmp_path / "b", init_adapter=str(t.files.checkpoint_dir(4)), init_optimizer_state=True,
                       max_steps=4, eval_every=0, save_every=0)).train()
    assert err.value.field == "max_steps" and "step 4" in str(err.value)
    with pytest.raises(ConfigError) as err:
        config(tmp_path / "c", init_optimizer_state=True)
    assert err.value.field == "init_optimizer_state"
    with pytest.raises(ConfigError) as err:
        trainer(config(tmp_path / "d", init_adapter=str(tmp_path / "nothing"))).train()
    assert err.value.field == "init_adapter"
