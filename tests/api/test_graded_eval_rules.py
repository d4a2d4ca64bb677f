"""`method.eval` (graded evaluation) at job creation: the resolved settings on the job, and 400s naming
the field for a regex that does not compile, an unsupported string_check operation, a text corpus as
the source of references, a missing validation file, and out-of-range or mistyped values."""

from __future__ import annotations

import pytest

from tests.api.helpers import assert_error, create_job, job_ok, upload_ok

TEXT = "".join(f"Line {i} of a plain corpus about numbers and words.\n" for i in range(40)).encode()


def test_graded_eval_is_resolved_on_the_job(client, alice):
    valid = upload_ok(client, alice)["id"]
    job = job_ok(client, alice, validation_file=valid, method={"eval": {"graders": [
        {"type": "numeric"}, {"type": "string_check", "name": "has_answer", "operation": "ilike"},
        {"type": "regex", "pattern": r"####\s*\d+"}], "n_samples": 8}})
    assert job["method"]["eval"] == {"graders": [
        {"type": "numeric", "name": "numeric"},
        {"type": "contains", "name": "has_answer", "case_sensitive": False},
        {"type": "regex", "name": "regex", "pattern": r"####\s*\d+"}],
        "n_samples": 8, "max_new_tokens": 128, "eval_file": None,
        "frequency_penalty": 0.0, "presence_penalty": 0.0}
    plain = job_ok(client, alice, validation_file=valid)
    assert "eval" not in plain["method"]


@pytest.mark.parametrize("grader, param, fragment", [
    ({"type": "regex", "pattern": "(unclosed"}, "method.eval.graders[0].pattern", "does not compile"),
    ({"type": "string_check", "operation": "ne"}, "method.eval.graders[0].operation", "'ne' is not supported"),
    ({"type": "numeric", "pattern": "x"}, "method.eval.graders[0].pattern", "not an option of a numeric grader"),
])
def test_bad_graders_are_400_naming_the_field(client, alice, grader, param, fragment):
    f = upload_ok(client, alice)
    err = assert_error(create_job(client, alice, f["id"], validation_file=upload_ok(client, alice)["id"],
                                  method={"eval": {"graders": [grader]}}), 400, "invalid_hyperparameters", param)
    assert err["message"].startswith(f"{param}: ") and fragment in err["message"]


@pytest.mark.parametrize("eval_body, param", [
    ({"graders": []}, "method.eval.graders"),
    ({"graders": [{"type": "bleu"}]}, "method.eval.graders.0.type"),
    ({"graders": [{"type": "numeric"}], "n_samples": 513}, "method.eval.n_samples"),
    ({"graders": [{"type": "numeric"}], "n_samples": "8"}, "method.eval.n_samples"),
    ({"graders": [{"type": "numeric"}], "max_new_tokens": 0}, "method.eval.max_new_tokens"),
    ({"graders": [{"type": "numeric"}], "frequency_penalty": 2.5}, "method.eval.frequency_penalty"),
    ({"graders": [{"type": "numeric"}], "presence_penalty": -3}, "method.eval.presence_penalty"),
])
def test_schema_bounds(client, alice, eval_body, param):
    f = upload_ok(client, alice)
    r = create_job(client, alice, f["id"], validation_file=upload_ok(client, alice)["id"], method={"eval": eval_body})
    assert r.status_code == 400, r.text
    assert param in r.text


def test_graded_eval_needs_a_validation_file(client, alice):
    f = upload_ok(client, alice)
    err = assert_error(create_job(client, alice, f["id"], method={"eval": {"graders": [{"type": "numeric"}]}}),
                       400, "invalid_hyperparameters", "method.eval")
    assert "validation_file" in err["message"]


def test_a_text_corpus_has_no_references(client, alice):
    f = upload_ok(client, alice)
    corpus = upload_ok(client, alice, TEXT, filename="corpus.txt")["id"]
    graders = {"graders": [{"type": "numeric"}]}
    err = assert_error(create_job(client, alice, f["id"], validation_file=corpus, method={"eval": graders}),
                       400, "invalid_file", "method.eval")
    assert "text corpus" in err["message"] and corpus in err["message"]
    err = assert_error(create_job(client, alice, f["id"], validation_file=upload_ok(client, alice)["id"],
                                  method={"eval": {**graders, "eval_file": corpus}}),
                       400, "invalid_file", "method.eval.eval_file")
    # a chat eval_file gives the references beside a text validation file
    chat = upload_ok(client, alice)["id"]
    job = job_ok(client, alice, f["id"], validation_file=corpus, method={"eval": {**graders, "eval_file": chat}})
    assert job["method"]["eval"]["eval_file"] == chat
    assert_error(create_job(client, alice, f["id"], validation_file=corpus,
                            method={"eval": {**graders, "eval_file": "file-nope"}}),
                 400, "file_not_found", "method.eval.eval_file")
