"""Request errors that say what is wrong: a JSON body that is not JSON, not sent as JSON, empty, not an
object or nested too deeply answers one shape (400, `invalid_request_error`, code `invalid_request_body`,
`param` null) with a message naming the fault (line and column for a syntax error); an unknown query
parameter on any /v1 route is refused naming it; learning rate and LoRA alpha are bounded to a range
that can train."""

from __future__ import annotations

import json

import pytest

from lcsb_core.errors import ConfigError
from lcsb_core.training.config import LEARNING_RATE_RANGE, LORA_ALPHA_RANGE, LoraSettings, OptimSettings
from tests.api.helpers import SMOL, assert_error, job_ok, upload_ok

BODY_ROUTES = ["/v1/fine_tuning/jobs", "/v1/fine_tuning/jobs/estimate"]
BODY_SHAPE = {"type": "invalid_request_error", "code": "invalid_request_body", "param": None}
JSON = {"Content-Type": "application/json"}
SYNTAX = [
    '{"model": "x",\n  "training_file": }',
    '{"model": "x" "training_file": "file-1"}',
    '{\n\n   "model": \'x\'}',
    '{"model": "x",}',
    '{"hyperparameters": {"n_epochs": 1e}}',
    '{"model": "x"}\n{"model": "y"}',
]


def post(client, tenant, route: str, content: bytes | str, headers: dict | None = None):
    return client.post(route, content=content, headers={**tenant.headers, **(headers or {})})


def body_error(response) -> str:
    """The message of a whole-body error, after checking its one shape."""
    err = assert_error(response, 400)
    assert {k: err[k] for k in BODY_SHAPE} == BODY_SHAPE, err
    assert "b'" not in err["message"] and "\\x" not in err["message"], err  # no Python bytes repr
    return err["message"]


@pytest.mark.parametrize("route", BODY_ROUTES)
@pytest.mark.parametrize("doc", SYNTAX)
def test_invalid_json_names_line_and_column(client, alice, route, doc):
    with pytest.raises(json.JSONDecodeError) as parsed:
        json.loads(doc)
    want = parsed.value
    message = body_error(post(client, alice, route, doc, JSON))
    assert message == f"the request body is not valid JSON: {want.msg} at line {want.lineno} column {want.colno}"


@pytest.mark.parametrize("route", BODY_ROUTES)
@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "text/plain", None])
def test_json_without_its_content_type_says_to_send_the_header(client, alice, route, content_type):
    body = json.dumps({"model": SMOL, "training_file": "file-abc"})
    headers = {"Content-Type": content_type} if content_type else {}
    message = body_error(post(client, alice, route, body, headers))
    sent = f"Content-Type: {content_type}" if content_type else "no Content-Type"
    assert message.startswith(f"the request body was sent with {sent}, so it was not read as JSON; send it with "
                              "the header 'Content-Type: application/json'"), message
    assert body not in message and "found bytes" not in message


@pytest.mark.parametrize("route", BODY_ROUTES)
@pytest.mark.parametrize("doc, found", [("null", "null"), ("[]", "array"), ('"model"', "string"), ("7", "number"),
                                        ("true", "boolean")])
def test_a_body_that_is_not_an_object(client, alice, route, doc, found):
    assert body_error(post(client, alice, route, doc, JSON)) == f"the request body must be a JSON object, found {found}"


@pytest.mark.parametrize("route", BODY_ROUTES)
@pytest.mark.parametrize("doc", ["[" * 100_000 + "]" * 100_000, '{"a":' * 100_000 + "1" + "}" * 100_000,
                                 '{"metadata": ' + "[" * 50_000 + "]" * 50_000 + "}"])
def test_deep_nesting_has_the_same_shape(client, alice, route, doc):
    assert body_error(post(client, alice, route, doc, JSON)).startswith(
        "the request body is nested too deeply to parse")


@pytest.mark.parametrize("route", BODY_ROUTES)
def test_empty_and_undecodable_bodies(client, alice, route):
    assert body_error(post(client, alice, route, b"", JSON)).startswith("the request body is empty: send a JSON object")
    assert body_error(post(client, alice, route, b'{"model": "\xff"}', JSON)).startswith(
        "the request body is not valid JSON: it is not UTF-8 text (invalid start byte at byte 11)")


def test_field_errors_keep_their_param(client, alice):
    """Only whole-body errors lose the param: a wrong field still names it."""
    err = assert_error(post(client, alice, BODY_ROUTES[0], json.dumps({"model": SMOL}), JSON), 400,
                       "missing_required_parameter", "training_file")
    assert err["message"].startswith("training_file: ")


def _path_values(client, alice) -> dict[str, str]:
    job = job_ok(client, alice)
    return {"file_id": upload_ok(client, alice)["id"], "fine_tuning_job_id": job["id"], "model": SMOL,
            "checkpoint_id": "ftckpt-none", "name": "metrics.csv", "export_id": "export-none"}


def v1_get_operations(app) -> list[tuple[str, set[str]]]:
    """(path, declared query names) of every GET operation under /v1 (from the OpenAPI schema); the
    event stream last, as it never ends when the request is accepted."""
    ops = [(path, {p["name"] for p in item["get"].get("parameters", []) if p["in"] == "query"})
           for path, item in app.openapi()["paths"].items() if path.startswith("/v1") and "get" in item]
    assert len(ops) >= 10
    return sorted(ops, key=lambda op: op[0].endswith("/stream"))


def test_unknown_query_parameters_are_refused_on_every_route(app, client, alice):
    values = _path_values(client, alice)
    for path, declared in v1_get_operations(app):
        url = path.format(**values)
        for query in ("status=succeeded", "order=asc&Status=x", "limit=5&bogus=1"):
            name = next(q.split("=")[0] for q in query.split("&") if q.split("=")[0] not in declared)
            err = assert_error(client.get(f"{url}?{query}", headers=alice.headers), 400, "unknown_parameter", name)
            assert err["message"].startswith(f"unknown query parameter {name!r}; GET {path} takes "), err


def test_declared_and_filter_parameters_still_work(client, alice):
    job_ok(client, alice, metadata={"team": "a"})
    jobs = client.get("/v1/fine_tuning/jobs?limit=5&metadata[team]=a", headers=alice.headers)
    assert jobs.status_code == 200 and len(jobs.json()["data"]) == 1
    assert client.get("/v1/fine_tuning/jobs?metadata=null", headers=alice.headers).status_code == 200
    assert_error(client.get("/v1/fine_tuning/jobs?metadatax=1", headers=alice.headers), 400, param="metadatax")
    files = client.get("/v1/files?order=asc&purpose=fine-tune&limit=2", headers=alice.headers)
    assert files.status_code == 200 and files.json()["object"] == "list"


LR, LORA = "hyperparameters.learning_rate", "method.lora.alpha"
BOUNDS = [
    ({"hyperparameters": {"learning_rate": 1e-300}}, LR, "greater than or equal to 0.0000001"),
    ({"hyperparameters": {"learning_rate": 0.0}}, LR, "greater than or equal to 0.0000001"),
    ({"hyperparameters": {"learning_rate": 1.0}}, LR, "less than 1"),
    ({"hyperparameters": {"learning_rate_multiplier": 1e-300}}, f"{LR}_multiplier",
     "'auto' or greater than or equal to 0.001"),
    ({"method": {"type": "supervised", "lora": {"alpha": 1e-300}}}, LORA, "greater than or equal to 0.001"),
    ({"method": {"type": "supervised", "lora": {"alpha": 4097.0}}}, LORA, "less than or equal to 4096"),
]


@pytest.mark.parametrize("body, param, bound", BOUNDS)
def test_training_values_outside_a_range_that_can_train(client, alice, body, param, bound):
    file_id = upload_ok(client, alice)["id"]
    r = client.post(BODY_ROUTES[1], headers=alice.headers, json={"model": SMOL, "training_file": file_id, **body})
    err = assert_error(r, 400, "invalid_value", param)
    assert err["message"].startswith(f"{param}: ") and f"Input should be {bound}" in err["message"], err
    value = json.dumps(next(iter(next(iter(body.values())).values())) if "lora" not in param
                       else body["method"]["lora"]["alpha"])
    assert err["message"].endswith(f", found number {value}"), err


@pytest.mark.parametrize("body", [{"hyperparameters": {"learning_rate": LEARNING_RATE_RANGE[0]}},
                                  {"hyperparameters": {"learning_rate_multiplier": 1e-3}},
                                  {"method": {"type": "supervised", "lora": {"alpha": LORA_ALPHA_RANGE[0]}}},
                                  {"method": {"type": "supervised", "lora": {"alpha": LORA_ALPHA_RANGE[1]}}}])
def test_the_ends_of_the_ranges_are_accepted(client, alice, body):
    file_id = upload_ok(client, alice)["id"]
    r = client.post(BODY_ROUTES[1], headers=alice.headers, json={"model": SMOL, "training_file": file_id, **body})
    assert r.status_code == 200, r.text


def test_the_core_refuses_the_same_ranges():
    with pytest.raises(ConfigError, match=r"must be in \[1e-07, 1\), got 1e-300") as lr:
        OptimSettings(learning_rate=1e-300)
    with pytest.raises(ConfigError, match=r"must be in \[0.001, 4096\], got 1e-300") as alpha:
        LoraSettings(alpha=1e-300)
    assert (lr.value.field, alpha.value.field) == ("optim.learning_rate", "lora.alpha")


@pytest.mark.parametrize("route", BODY_ROUTES)
@pytest.mark.parametrize(("doc", "key"), [
    ('{"model": "MODEL", "training_file": "file-1", "seed": 1, "seed": 2}', "seed"),
    ('{"model": "MODEL", "training_file": "file-1", "hyperparameters": {"n_epochs": 1, "batch_size": 4, '
     '"max_steps": 2}, "hyperparameters": {"n_epochs": 1}}', "hyperparameters"),
    ('{"model": "MODEL", "training_file": "file-1", "method": {"lora": {"rank": 8, "rank": 16}}}', "rank"),
])
def test_a_key_repeated_in_one_object_is_refused_not_guessed(client, alice, route, doc, key):
    """Python's parser keeps the last value (the first `hyperparameters` block would vanish without a
    word); the request is refused naming the key, before any field is read."""
    message = body_error(post(client, alice, route, doc.replace("MODEL", SMOL), JSON))
    assert message == (f'the request body is ambiguous: the key "{key}" appears more than once in one object, '
                       "and a JSON reader keeps either value; send each key once")


@pytest.mark.parametrize("route", BODY_ROUTES)
@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json(client, alice, route, constant):
    doc = '{"model": "MODEL", "training_file": "file-1", "hyperparameters": {"weight_decay": CONSTANT}}'
    doc = doc.replace("MODEL", SMOL).replace("CONSTANT", constant)
    message = body_error(post(client, alice, route, doc, JSON))
    assert message == (f"the request body is not valid JSON: {constant} is not a JSON value (JSON has no NaN or "
                       "Infinity, RFC 8259); send a finite number")


def test_strict_bodies_pass_and_uploads_are_not_read_as_json(client, alice):
    """A strict body reaches the route (the same key in two different objects is no repeat); a multipart
    upload is not parsed by the check."""
    doc = json.dumps({"model": SMOL, "training_file": "file-missing", "metadata": {"seed": "1"}, "seed": 1})
    response = post(client, alice, BODY_ROUTES[0], doc, JSON)  # the route ran: no such file
    assert response.status_code == 400 and response.json()["error"]["code"] == "file_not_found", response.text
    upload_ok(client, alice)


@pytest.mark.parametrize(("method", "param", "where"), [
    ({"warmup_steps": 5}, "method.warmup_steps",
     "hyperparameters.warmup_steps or method.supervised.hyperparameters.warmup_steps or "
     "method.dpo.hyperparameters.warmup_steps"),
    ({"rank": 8}, "method.rank", "method.lora.rank"),
])
def test_a_known_field_in_the_wrong_section_says_where_it_belongs(client, alice, method, param, where):
    """Fresh-user finding: `method.warmup_steps` answered only "Extra inputs are not permitted"."""
    doc = json.dumps({"model": SMOL, "training_file": "file-1", "method": method})
    err = assert_error(post(client, alice, BODY_ROUTES[0], doc, JSON), 400)
    assert (err["code"], err["param"]) == ("unknown_parameter", param)
    assert err["message"] == f"{param}: Extra inputs are not permitted; {param.split('.')[-1]} belongs at {where}"
