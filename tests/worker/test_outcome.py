"""Error codes (`worker.training.outcome`): each failure kind maps to its public code; internal errors keep
their text out of the public message."""

from __future__ import annotations

import pytest

from lcsb_core.errors import ConfigError, DataError, DivergenceError, LCSBError, ModelLoadError
from worker.training.outcome import INTERNAL_MESSAGE, Outcome, classify, read_outcome, write_outcome


class OutOfMemoryError(RuntimeError):  # what torch.cuda.OutOfMemoryError is called
    pass


@pytest.mark.parametrize("exc, code, param", [
    (DataError("line 3: bad role"), "invalid_file", "training_file"),
    (DivergenceError("loss became nan at step 4"), "nan_loss", None),
    (MemoryError(), "oom", None),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:118] DefaultCPUAllocator: can't allocate memory: you tried to "
                  "allocate 6442450944 bytes"), "oom", None),
    (OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "oom", None),
    (ModelLoadError("the base model 'x' is not installed on this worker"), "internal_error", None),
    (ConfigError("lora.rank", "must be an integer"), "internal_error", None),
    (KeyError("/srv/secret/path"), "internal_error", None),
])
def test_codes(exc, code, param):
    out = classify(exc, cap_mib=2048, peak_mib=2047.5, steps=3)
    assert (out.status, out.code, out.param, out.steps) == ("failed", code, param, 3)
    assert "Traceback" not in out.message


def test_oom_message_names_cap_and_peak():
    out = classify(MemoryError(), cap_mib=2048, peak_mib=1900.2)
    assert "memory cap of 2048 MiB (measured peak 1900 MiB)" in out.message and out.peak_memory_mib == 1900.2


def test_unknown_errors_keep_their_text_in_the_detail_only():
    out = classify(KeyError("/srv/secret/path"))
    assert out.message == INTERNAL_MESSAGE and "/srv/secret/path" in out.detail and "KeyError" in out.detail
    known = classify(ModelLoadError("install it"))
    assert known.message == "install it"


def test_outcome_file_round_trip(tmp_path):
    path = tmp_path / "outcome.json"
    assert read_outcome(path) is None
    write_outcome(path, Outcome("succeeded", steps=6, summary={"steps": 6, "trained_tokens": 700}))
    back = read_outcome(path)
    assert back.status == "succeeded" and back.summary["trained_tokens"] == 700
    path.write_text("{half")
    assert read_outcome(path) is None


def test_classify_reads_the_error_code_and_field():
    class OtherDataError(LCSBError):  # any core error with the public code invalid_file
        code = "invalid_file"

    out = classify(OtherDataError("line 2: empty completion"))
    assert (out.code, out.param, out.message) == ("invalid_file", "training_file", "line 2: empty completion")
    err = DataError("line 5: bad role")
    err.field = "validation_file"
    assert classify(err).param == "validation_file"
    assert classify(ConfigError("lora.rank", "must be an integer")).message == "lora.rank: must be an integer"
