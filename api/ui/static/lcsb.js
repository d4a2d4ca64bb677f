/* The dashboard's shared code: the key in sessionStorage, /v1 calls (with retries), safe DOM building,
   formatting, downloads with the key, the job event stream with resume, and the status line that says
   when updates are delayed.
   Everything user-supplied reaches the page through textContent / attributes, never innerHTML.

   Retries, in one place: a GET that fails with a network error, 408, 429 or 5xx is tried again after an
   exponential backoff with jitter (RETRY: 1 s doubling to a 30 s cap, each wait drawn from the upper half
   of its step, "equal jitter"), and never before the answer's Retry-After (seconds or an HTTP date, RFC
   9110 10.2.3). Other 4xx are final: 401 ends the session (the sign-in page), the caller shows the rest
   (404: not found). While a request waits to be retried, #live-status says so with a countdown;
   "Reconnected" replaces it once every delayed request has succeeded, and clears a few seconds later. */
"use strict";
(function () {
  const KEY = "lcsb_api_key";
  const RETRY = { baseMs: 1000, capMs: 30000, maxRetryAfterMs: 10 * 60000, reconnectedMs: 4000 };

  function key() { return sessionStorage.getItem(KEY); }

  function signInUrl() {
    return "/ui/sign-in?next=" + encodeURIComponent(location.pathname + location.search);
  }

  function requireKey() {
    if (!key() && document.body.dataset.page !== "sign-in") { location.replace(signInUrl()); return false; }
    return true;
  }

  function endSession() { sessionStorage.removeItem(KEY); location.replace(signInUrl()); }

  /* fetch /v1 with the key; returns {ok, status, body, retryAfter} (status 0: no answer, a network
     error). A 401 ends the session. */
  async function api(path, options) {
    const opts = Object.assign({}, options || {});
    opts.headers = Object.assign({ Authorization: "Bearer " + key() }, opts.headers || {});
    if (opts.json !== undefined) {
      opts.body = JSON.stringify(opts.json);
      opts.headers["Content-Type"] = "application/json";
      delete opts.json;
    }
    let r;
    try { r = await fetch(path, opts); } catch (err) { return { ok: false, status: 0, body: null, retryAfter: null }; }
    let body = null;
    const type = r.headers.get("Content-Type") || "";
    if (type.includes("application/json")) { try { body = await r.json(); } catch (err) { body = null; } }
    if (r.status === 401) endSession();
    return { ok: r.ok, status: r.status, body: body, retryAfter: r.headers.get("Retry-After") };
  }

  /* Whether an answer with this status is worth trying again (0: a network error). */
  function retryable(status) { return status === 0 || status === 408 || status === 429 || status >= 500; }

  /* A Retry-After value (delay-seconds or an HTTP date) in ms from now (0 for a date past), or null when
     absent or unreadable; at most RETRY.maxRetryAfterMs, so a broken header cannot stop the page. */
  function retryAfterMs(value) {
    if (value === null || value === undefined || String(value).trim() === "") return null;
    const text = String(value).trim();
    let ms;
    if (/^\d+$/.test(text)) ms = Number(text) * 1000;
    else {
      const at = Date.parse(text);
      if (isNaN(at)) return null;
      ms = Math.max(0, at - Date.now());
    }
    return Math.min(ms, RETRY.maxRetryAfterMs);
  }

  /* The wait before retry number `attempt` (0 = the first retry) in ms: 1 s, 2 s, 4 s, ... capped at
     30 s, drawn from the upper half of that step; never shorter than `retryAfter` asks. */
  function retryDelay(attempt, retryAfter) {
    const step = Math.min(RETRY.capMs, RETRY.baseMs * Math.pow(2, Math.min(attempt, 30)));
    const backoff = step / 2 + Math.random() * step / 2;
    const asked = retryAfterMs(retryAfter);
    return asked === null ? backoff : Math.max(asked, backoff);
  }

  function failureReason(status) {
    if (status === 0) return "the connection was lost";
    if (status === 429 || status === 503) return "the server is busy";
    if (status === 408 || status === 504) return "the server timed out";
    return "the server answered HTTP " + status;
  }

  /* The status line (#live-status, role=status): one entry per delayed source (a poll, the stream). */
  const delays = new Map();  // source -> {reason, at: Date.now() of the next try}
  let ticker = null, clearer = null;

  function statusLine() { return document.getElementById("live-status"); }

  function renderStatus() {
    const line = statusLine();
    if (!delays.size) { if (ticker) { clearInterval(ticker); ticker = null; } return; }
    let next = null;
    for (const d of delays.values()) if (!next || d.at < next.at) next = d;
    const seconds = Math.ceil((next.at - Date.now()) / 1000);
    const text = "Updates delayed: " + next.reason + ", " + (seconds > 0 ? "retrying in " + seconds + " s" : "retrying now");
    if (line && line.textContent !== text) line.textContent = text;
    if (line) line.dataset.state = "delayed";
  }

  /* `source` waits `ms` before its next try because of `reason`. */
  function noteDelay(source, reason, ms) {
    delays.set(source, { reason: reason, at: Date.now() + ms });
    if (clearer) { clearTimeout(clearer); clearer = null; }
    renderStatus();
    if (!ticker) ticker = setInterval(renderStatus, 1000);
  }

  /* `source` got an answer again: once no source is delayed, say "Reconnected", then clear the line. */
  function noteRecovered(source) {
    if (!delays.delete(source) || delays.size) { renderStatus(); return; }
    renderStatus();
    const line = statusLine();
    if (!line) return;
    line.textContent = "Reconnected";
    line.dataset.state = "reconnected";
    clearer = setTimeout(() => { clearer = null; line.textContent = ""; line.dataset.state = ""; }, RETRY.reconnectedMs);
  }

  function sleep(ms) { return new Promise((resolve) => setTimeout(resolve, ms)); }

  /* api(path) tried again (see RETRY) until its answer is final: a success or a status not worth
     retrying (the caller handles those: 404, 400, ...). `source` names the request on the status line. */
  async function apiRetrying(path, options, source) {
    source = source || path;
    for (let attempt = 0; ; attempt++) {
      const r = await api(path, options);
      if (!retryable(r.status)) { noteRecovered(source); return r; }
      const wait = retryDelay(attempt, r.retryAfter);
      noteDelay(source, failureReason(r.status), wait);
      await sleep(wait);
    }
  }

  /* Every page of a cursor list (`data`, `has_more`, `after` = last id). With `source`, each page is
     fetched with apiRetrying under that name. */
  async function listAll(path, maxPages, source) {
    const out = [];
    let after = null;
    for (let i = 0; i < (maxPages || 50); i++) {
      const sep = path.includes("?") ? "&" : "?";
      const page = path + sep + "limit=100" + (after ? "&after=" + encodeURIComponent(after) : "");
      const r = source ? await apiRetrying(page, undefined, source) : await api(page);
      if (!r.ok) return { ok: false, status: r.status, body: r.body, data: out };
      out.push(...r.body.data);
      if (!r.body.has_more || !r.body.data.length) break;
      after = r.body.data[r.body.data.length - 1].id;
    }
    return { ok: true, data: out };
  }

  /* el("td", {class: "x", href: ...}, "text", childNode, ...): strings become text nodes. */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "dataset") Object.assign(node.dataset, value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function setText(id, text) { const n = document.getElementById(id); if (n) n.textContent = text; return n; }

  function fmtBytes(n) {
    if (n === null || n === undefined) return "";
    const units = ["B", "KiB", "MiB", "GiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : String(n)) + " " + units[i];
  }

  function fmtTime(unix) { return unix ? new Date(unix * 1000).toLocaleString() : ""; }

  function fmtDuration(s) {
    if (s === null || s === undefined || !isFinite(s)) return "";
    s = Math.max(0, Math.round(s));
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
    return (h ? h + "h " : "") + (h || m ? m + "m " : "") + sec + "s";
  }

  function fmtNum(x, digits) { return typeof x === "number" ? x.toFixed(digits === undefined ? 1 : digits) : ""; }

  const TERMINAL = ["succeeded", "failed", "cancelled"];

  /* Download a /v1 file with the key (a plain link cannot send the header). */
  async function download(url, filename) {
    const r = await fetch(url, { headers: { Authorization: "Bearer " + key() } });
    if (!r.ok) { alertBox("Download failed: HTTP " + r.status); return; }
    const blob = await r.blob();
    const href = URL.createObjectURL(blob);
    const a = el("a", { href: href, download: filename });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(href), 60000);
  }

  function downloadLink(url, filename, label) {
    const a = el("a", { href: url, class: "download", dataset: { filename: filename } }, label || filename);
    a.addEventListener("click", (ev) => { ev.preventDefault(); download(url, filename); });
    return a;
  }

  /* An in-page notice (the dashboard never calls window.alert/confirm: a dialog means a bug or XSS). */
  function alertBox(text) {
    const main = document.querySelector("main");
    main.prepend(el("p", { class: "error", role: "alert" }, text));
  }

  /* One server-sent-event block ("field: value" lines) as {event, data, id}. */
  function parseBlock(block) {
    const msg = { event: "message", data: "", id: null };
    for (const line of block.split("\n")) {
      const i = line.indexOf(":");
      if (i <= 0) continue;
      const field = line.slice(0, i), val = line.slice(i + 1).replace(/^ /, "");
      if (field === "data") msg.data += (msg.data ? "\n" : "") + val;
      else if (field === "event") msg.event = val;
      else if (field === "id") msg.id = val;
    }
    return msg;
  }

  /* Follow .../events/stream: onEvent(event) for each event oldest first, once; onDone(status) at the
     end; onError(status, body) when the stream answers a final error (404, 400: not retried; 401 ends
     the session). When the server ends the stream (its time limit) it reconnects at once; after a
     dropped connection or a retryable answer it reconnects with the backoff of apiRetrying. Each
     reconnect sends the last event's id as Last-Event-ID, so nothing is missed or repeated. */
  function streamEvents(jobId, onEvent, onDone, onError) {
    let lastId = null, stopped = false, attempt = 0;
    const seen = new Set();  // ids delivered: a server that resent one would not show it twice
    const source = "events";
    const url = "/v1/fine_tuning/jobs/" + encodeURIComponent(jobId) + "/events/stream";

    /* Read one connection; returns {done} at `event: done`, {failed: status, retryAfter} on an error
       answer or a drop (status 0), {ended, empty} when the server closed the stream (empty: before
       sending anything). */
    async function follow() {
      const headers = { Authorization: "Bearer " + key(), Accept: "text/event-stream" };
      if (lastId) headers["Last-Event-ID"] = lastId;
      let r;
      try { r = await fetch(url, { headers: headers }); } catch (err) { return { failed: 0 }; }
      if (!r.ok) {
        let body = null;
        try { body = await r.json(); } catch (err) { body = null; }
        return { failed: r.status, retryAfter: r.headers.get("Retry-After"), body: body };
      }
      try {
        const reader = r.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "", empty = true;
        for (;;) {
          const { value, done } = await reader.read();
          if (done) return { ended: true, empty: empty };
          empty = false;
          if (attempt) { attempt = 0; noteRecovered(source); }
          buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
          let cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const msg = parseBlock(buffer.slice(0, cut));
            buffer = buffer.slice(cut + 2);
            if (msg.event === "done") return { done: JSON.parse(msg.data || "{}").status };
            if (!msg.data || (msg.id && seen.has(msg.id))) continue;
            const event = JSON.parse(msg.data);
            if (msg.id) { lastId = msg.id; seen.add(msg.id); }
            onEvent(event);
          }
        }
      } catch (err) { return { failed: 0 }; }  // dropped mid-stream
    }

    async function run() {
      while (!stopped) {
        const out = await follow();
        if (stopped) return;
        if (out.done !== undefined) { noteRecovered(source); onDone(out.done); return; }
        if (out.ended && !out.empty) continue;  // the server's time limit: resume at once
        if (out.ended) { await sleep(retryDelay(attempt++)); continue; }  // closed at once: do not spin
        if (out.failed === 401) { endSession(); return; }
        if (!retryable(out.failed)) { noteRecovered(source); stopped = true; if (onError) onError(out.failed, out.body); return; }
        const wait = retryDelay(attempt++, out.retryAfter);
        noteDelay(source, failureReason(out.failed), wait);
        await sleep(wait);
      }
    }
    run();
    return { stop: () => { stopped = true; } };
  }

  function bindSignOut() {
    const b = document.getElementById("sign-out");
    if (b) b.addEventListener("click", () => { sessionStorage.removeItem(KEY); location.assign("/ui/sign-in"); });
  }

  window.LCSB = { KEY, key, requireKey, api, apiRetrying, retryable, retryDelay, retryAfterMs, listAll, el, setText,
                  fmtBytes, fmtTime, fmtDuration, fmtNum, TERMINAL, download, downloadLink, alertBox, streamEvents };
  requireKey();
  bindSignOut();
})();
