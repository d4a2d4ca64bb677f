"""The dashboard's Playground in headless Chromium against the serving world (API under uvicorn, a real
inference worker, a real short SmolLM2 job): the fine-tuned answer and the base answer stream side by
side with their usage; an error answer shows as an error in its pane; another owner's model shows
"Model not found"; a succeeded job's page links to the playground with its model."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.api.conftest import LiveServer
from tests.ui.conftest import UI, browser, download_dir  # noqa: F401 - fixtures

pytestmark = [pytest.mark.integration, pytest.mark.worker]


@pytest.fixture
def ui(browser, world) -> Iterator[UI]:  # noqa: F811 - the fixture imported above
    browser.get_log("browser")
    yield UI(browser, LiveServer(url=world.url, pid=world.api_pid))


def send(ui: UI, message: str) -> None:
    ui.find("#play-message").send_keys(message)
    before = int(ui.js("return Number(document.body.dataset.answered || 0)"))
    ui.find("#play-send").click()
    ui.wait(lambda d: int(ui.js("return Number(document.body.dataset.answered || 0)")) > before, timeout=120)


def test_the_playground_streams_both_answers_side_by_side(ui, world, trained):
    ui.sign_in(world.alice, f"/ui/jobs/{trained.job_id}")
    link = ui.wait(lambda d: ui.find("#job-try-link") if not ui.find("#job-try").get_attribute("hidden") else None)
    assert link.get_attribute("href").endswith("/ui/playground?model=" + trained.ft.replace(":", "%3A"))
    link.click()
    ui.wait(lambda d: ui.js("return document.body.dataset.ready") == "1")
    assert ui.find("#play-model").get_attribute("value") == trained.ft
    assert trained.ft in ui.js("return Array.from(document.querySelectorAll('#play-model option'), o => o.value)")
    ui.find("#play-max-tokens").clear()
    ui.find("#play-max-tokens").send_keys("8")
    send(ui, "What is 7 plus 7?")
    tuned = ui.text("#pane-tuned .turn-assistant .turn-text")
    base = ui.text("#pane-base .turn-assistant .turn-text")
    assert tuned and base and tuned != base
    assert "completion tokens" in ui.text("#pane-tuned .pane-usage") and ui.text("#pane-base .pane-model") == \
        "SmolLM2-135M-Instruct"
    ui.screenshot("playground")
    ui.find("#play-max-tokens").clear()
    ui.find("#play-max-tokens").send_keys("100000")   # over the service's cap: a 400, shown in both panes
    send(ui, "Hi")
    for pane in ("tuned", "base"):
        assert "max_completion_tokens" in ui.text(f"#pane-{pane} .pane-error")
    assert not [e for e in ui.console_errors() if "Failed to load resource" not in e]   # the 400s are logged
    ui.assert_no_dialog()


def test_another_owners_model_shows_not_found(ui, world, trained):
    ui.sign_in(world.bob, "/ui/playground?model=" + trained.ft)
    ui.wait(lambda d: ui.js("return document.body.dataset.ready") == "1")
    ui.find("#play-max-tokens").clear()
    ui.find("#play-max-tokens").send_keys("4")
    send(ui, "Hi")
    assert ui.text("#pane-tuned .pane-error") == "Model not found: " + trained.ft
    assert ui.text("#pane-base .turn-assistant .turn-text")   # the base still answers
