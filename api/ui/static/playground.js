/* Playground: one of your fine-tuned models or checkpoints and its base model answer the same messages
   side by side, both streamed from /v1/chat/completions (stream_options.include_usage), each pane with
   its own conversation. `?model=<id>` preselects a model (the "Try it" link of a job's page). An error
   answer or an `error` event mid-stream shows in that pane; a model that is not yours (404) shows
   "Model not found". Text nodes only. */
"use strict";
(function () {
  const { api, el, setText, key } = LCSB;
  const panes = { tuned: { id: "pane-tuned", history: [] }, base: { id: "pane-base", history: [] } };
  let models = [];

  function part(pane, cls) { return document.querySelector("#" + pane.id + " ." + cls); }

  function settings() {
    const num = (id) => { const v = document.getElementById(id).value; return v === "" ? undefined : Number(v); };
    const out = { temperature: num("play-temperature"), max_completion_tokens: num("play-max-tokens") };
    if (num("play-seed") !== undefined) out.seed = num("play-seed");
    return out;
  }

  function bubble(pane, role, text) {
    const p = el("p", { class: "turn turn-" + role }, el("strong", {}, role === "user" ? "you: " : "model: "),
                 el("span", { class: "turn-text" }, text));
    part(pane, "transcript").append(p);
    return p.querySelector(".turn-text");
  }

  /* Stream one answer of `model` into `pane`; resolves when it ended (or failed). */
  async function ask(pane, model, message) {
    pane.history.push({ role: "user", content: message });
    bubble(pane, "user", message);
    const out = bubble(pane, "assistant", "");
    part(pane, "pane-error").textContent = "";
    part(pane, "pane-usage").textContent = "";
    const body = Object.assign({ model: model, messages: pane.history, stream: true,
                                 stream_options: { include_usage: true } }, settings());
    let r;
    try {
      r = await fetch("/v1/chat/completions", { method: "POST", body: JSON.stringify(body),
        headers: { Authorization: "Bearer " + key(), "Content-Type": "application/json", Accept: "text/event-stream" } });
    } catch (err) { fail(pane, "The connection was lost."); return; }
    if (!r.ok) {
      let msg = "HTTP " + r.status;
      try { const b = await r.json(); msg = (b.error && b.error.message) || msg; } catch (err) { /* not JSON */ }
      fail(pane, r.status === 404 ? "Model not found: " + model : msg);
      return;
    }
    const reader = r.body.getReader(), decoder = new TextDecoder();
    let buffer = "", text = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const isError = block.split("\n").some((l) => l === "event: error");
          const data = block.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
          if (!data || data === "[DONE]") continue;
          const chunk = JSON.parse(data);
          if (isError || chunk.error) { fail(pane, "Error: " + ((chunk.error && chunk.error.message) || "generation failed")); return; }
          if (chunk.usage) {
            const u = chunk.usage;
            part(pane, "pane-usage").textContent = `${u.prompt_tokens} prompt + ${u.completion_tokens} completion tokens`;
          }
          for (const c of chunk.choices || []) {
            if (c.delta && c.delta.content) { text += c.delta.content; out.textContent = text; }
            if (c.finish_reason) out.parentElement.dataset.finish = c.finish_reason;
          }
        }
      }
    } catch (err) { fail(pane, "The connection was lost."); return; }
    pane.history.push({ role: "assistant", content: text });
    out.parentElement.dataset.done = "1";
  }

  function fail(pane, message) {
    pane.history.pop();  // the unanswered user turn
    part(pane, "pane-error").textContent = message;
  }

  function chosen() { return document.getElementById("play-model").value; }

  function showModels(selected) {
    const select = document.getElementById("play-model");
    const tuned = models.filter((m) => m.job_id);
    const ids = tuned.map((m) => m.id);
    if (selected && !ids.includes(selected)) ids.unshift(selected);  // not listed: the API will say 404
    select.replaceChildren(...ids.map((id) => el("option", { value: id, selected: id === selected }, id)));
  }

  function baseOf(id) {
    const m = models.find((x) => x.id === id);
    if (m && m.root) return m.root;
    const parts = id.split(":");
    return id.startsWith("ft:") && parts.length > 1 ? parts[1] : id;
  }

  async function start() {
    const selected = new URLSearchParams(location.search).get("model");
    const r = await api("/v1/models");
    models = r.ok ? r.body.data : [];
    showModels(selected);
    document.getElementById("play-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const message = document.getElementById("play-message").value.trim();
      const model = chosen();
      if (!model) { setText("play-error", "Pick a fine-tuned model first (train one: New job)."); return; }
      if (!message) return;
      setText("play-error", "");
      part(panes.tuned, "pane-model").textContent = model;
      part(panes.base, "pane-model").textContent = baseOf(model);
      document.getElementById("play-message").value = "";
      const send = document.getElementById("play-send");
      send.disabled = true;
      document.body.dataset.answering = "1";
      await Promise.all([ask(panes.tuned, model, message), ask(panes.base, baseOf(model), message)]);
      send.disabled = false;
      document.body.dataset.answering = "";
      document.body.dataset.answered = String(Number(document.body.dataset.answered || 0) + 1);
    });
    document.getElementById("play-reset").addEventListener("click", () => {
      for (const p of Object.values(panes)) {
        p.history = [];
        part(p, "transcript").replaceChildren();
        part(p, "pane-usage").textContent = "";
        part(p, "pane-error").textContent = "";
      }
    });
    document.body.dataset.ready = "1";
  }
  start();
})();
