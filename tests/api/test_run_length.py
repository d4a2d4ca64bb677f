"""What the worker says when its dataset check leaves fewer usable examples than the upload counted:
the job's `total_steps` becomes the real count, and a setting that now needs more steps than the run has
gets a `warn` event and a `setting_not_honoured` entry in `warnings`, next to any other warning."""

from __future__ import annotations

from lcsb_core.training.config import TrainConfig
from lcsb_service.events import add_warning
from lcsb_service.models import Job
from lcsb_service.run_length import record_run_length
from tests.api.helpers import job_ok, upload_ok


def test_fewer_usable_examples_restate_the_length_and_warn(client, alice, app):
    f = upload_ok(client, alice)  # 12 examples, batch size 1: 12 steps at creation
    job = job_ok(client, alice, f["id"], hyperparameters={"batch_size": 1, "warmup_steps": 11, "n_epochs": 1},
                 method={"save_every": 12})
    assert job["progress"]["total_steps"] == 12
    db = app.state.db
    with db.session() as s:
        cfg = TrainConfig.from_dict(s.get(Job, job["id"]).train_config)
        add_warning(s, job["id"], {"code": "diverged", "message": "an earlier warning"})
    assert record_run_length(db, job["id"], cfg, train_examples=12) == []  # all fits: nothing to say
    entries = record_run_length(db, job["id"], cfg, train_examples=11)  # the tokenizer dropped one line
    message = ("method.save_every: is 12, more than the run's 11 optimizer steps (11 training examples in batches "
               "of hyperparameters.batch_size 1 for hyperparameters.n_epochs 1): it would never happen; training "
               "goes on without it (the model's tokenizer left 11 usable training examples)")
    assert entries == [{"code": "setting_not_honoured", "param": "method.save_every", "total_steps": 11,
                        "message": message}]
    got = client.get(f"/v1/fine_tuning/jobs/{job['id']}", headers=alice.headers).json()
    assert got["progress"]["total_steps"] == 11
    assert got["warnings"] == [{"code": "diverged", "message": "an earlier warning"}, entries[0]]
    events = client.get(f"/v1/fine_tuning/jobs/{job['id']}/events", headers=alice.headers).json()["data"]
    assert (events[0]["level"], events[0]["message"]) == ("warn", message)
    assert events[0]["data"] == {"code": "setting_not_honoured", "param": "method.save_every", "total_steps": 11}
