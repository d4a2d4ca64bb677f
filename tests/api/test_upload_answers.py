"""Upload answers from real reports: a form text field or a `filename*`-only part in place of the file
part, bytes uploaded without a name, a JSON array file, OpenAI tool-calling lines, and keys training
ignores (warned at upload and in the job's validation event)."""

from __future__ import annotations

import json

from tests.api.helpers import assert_error, chat_lines, job_ok, upload, upload_ok

TOOL_LINE = (b'{"messages":[{"role":"user","content":"Weather in Paris?"},{"role":"assistant","content":"",'
             b'"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather",'
             b'"arguments":"{\\"city\\":\\"Paris\\"}"}}]}]}\n')


def test_a_text_field_in_place_of_the_file_part(client, alice):
    # curl -F 'file=<train.jsonl' sends the content as a text field
    r = client.post("/v1/files", headers=alice.headers, data={"purpose": "fine-tune", "file": chat_lines(12).decode()})
    err = assert_error(r, 400, "invalid_file", "file")
    assert err["message"].startswith("file must be a file part with a filename") and "-F file=@" in err["message"]
    assert "UploadFile" not in err["message"] and "<class" not in err["message"]


def test_a_part_named_only_by_filename_star(client, alice):
    body = (b'--b\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nfine-tune\r\n'
            b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename*=UTF-8''train.jsonl\r\n"
            b"Content-Type: application/octet-stream\r\n\r\n" + chat_lines(12) + b"\r\n--b--\r\n")
    r = client.post("/v1/files", headers={**alice.headers, "Content-Type": "multipart/form-data; boundary=b"},
                    content=body)
    err = assert_error(r, 400, "invalid_file", "file")
    assert "filename*" in err["message"]


def test_bytes_without_a_name_suggest_passing_one(client, alice):
    # openai's client names a bare bytes upload "upload"
    err = assert_error(upload(client, alice, filename="upload"), 400, "invalid_file_name", "file")
    assert "'upload'" in err["message"] and "file=('train.jsonl', data)" in err["message"]


def test_a_single_line_json_array_is_named(client, alice):
    rows = [json.loads(line) for line in chat_lines(12).splitlines()]
    f = upload_ok(client, alice, json.dumps(rows).encode(), filename="train.json")
    assert f["status"] == "error"
    assert "the file is a JSON array; upload JSON Lines instead" in f["status_details"]
    assert f["validation"]["errors"] == []


def test_tool_calling_lines_are_rejected_at_upload(client, alice):
    f = upload_ok(client, alice, chat_lines(12) + TOOL_LINE)
    assert f["status"] == "error"
    [err] = f["validation"]["errors"]
    assert (err["line"], err["field"]) == (13, "messages[1].tool_calls")
    assert "tool calling is not supported" in err["message"]
    assert "line 13, field messages[1].tool_calls: tool calling is not supported" in f["status_details"]


def test_empty_assistant_content_is_rejected_at_upload(client, alice):
    empty = b'{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"   \\n"}]}\n'
    f = upload_ok(client, alice, chat_lines(12) + empty)
    assert f["status"] == "error"
    assert [(e["line"], e["field"]) for e in f["validation"]["errors"]] == [(13, "messages[1].content")]


def test_ignored_keys_are_warned_at_upload_and_in_the_job(client, alice):
    rows = [json.loads(line) for line in chat_lines(12).splitlines()]
    for i in (1, 4):
        rows[i]["messages"][0]["name"] = "alice"
    content = "".join(json.dumps(r) + "\n" for r in rows).encode()
    f = upload_ok(client, alice, content)
    assert f["status"] == "processed"
    assert f["validation"]["ignored_keys"] == {"messages[].name": {"count": 2, "lines": [2, 5]}}
    [warning] = f["validation"]["warnings"]
    assert warning.startswith("messages[].name is ignored on 2 line(s) (2, 5)")
    job = job_ok(client, alice, f["id"])
    events = client.get(f"/v1/fine_tuning/jobs/{job['id']}/events", headers=alice.headers).json()["data"]
    [validated] = [e for e in events if e["message"].startswith(f"Validated training file: {f['id']}")]
    assert validated["level"] == "warn" and warning in validated["message"]
    assert validated["data"]["ignored_keys"] == {"messages[].name": {"count": 2, "lines": [2, 5]}}


def test_a_repeated_key_is_rejected_at_upload(client, alice):
    twice = (b'{"messages":[{"role":"user","content":"Is it safe?"},'
             b'{"role":"assistant","content":"No.","weight":0,"weight":1}]}\n')
    f = upload_ok(client, alice, chat_lines(12) + twice)
    assert f["status"] == "error"
    [err] = f["validation"]["errors"]
    assert (err["line"], err["field"]) == (13, "messages[1].weight")
    assert err["message"].startswith('the key "weight" appears more than once in the object at messages[1]')
    assert 'line 13, field messages[1].weight: the key "weight" appears more than once' in f["status_details"]


def test_nan_is_rejected_at_upload(client, alice):
    f = upload_ok(client, alice, chat_lines(12) + b'{"prompt": "x", "completion": "y", "score": NaN}\n')
    assert f["status"] == "error"
    [err] = f["validation"]["errors"]
    assert (err["line"], err["field"]) == (13, None)
    assert err["message"].startswith("not valid JSON: NaN is not a JSON value")


def test_utf16_without_a_bom_is_one_message_at_upload(client, alice):
    for encoding in ("utf-16-le", "utf-16"):  # without, then with a byte-order mark: the same answer
        f = upload_ok(client, alice, chat_lines(12).decode().encode(encoding))
        assert f["status"] == "error" and f["validation"]["errors"] == []
        assert f["validation"]["file_errors"] == ["the file is UTF-16 encoded; save it as UTF-8"]
        assert f["status_details"] == "train.jsonl: the file is UTF-16 encoded; save it as UTF-8"


def test_duplicates_are_warned_at_upload_and_in_the_job(client, alice):
    lines = chat_lines(12).splitlines(keepends=True)
    f = upload_ok(client, alice, b"".join(lines + [lines[0], lines[3]]))
    assert f["status"] == "processed" and f["validation"]["duplicates"] == 2
    [warning] = f["validation"]["warnings"]
    assert warning.startswith("2 example(s) repeat an earlier one (line 13 repeats line 1, line 14 repeats line 4)")
    job = job_ok(client, alice, f["id"])
    events = client.get(f"/v1/fine_tuning/jobs/{job['id']}/events", headers=alice.headers).json()["data"]
    [validated] = [e for e in events if e["message"].startswith(f"Validated training file: {f['id']}")]
    assert validated["level"] == "warn" and warning in validated["message"]
    assert validated["data"]["warnings"] == [warning]
