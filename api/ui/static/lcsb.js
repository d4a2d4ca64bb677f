/* The dashboard's shared code: the key in sessionStorage, /v1 calls, safe DOM building, formatting,
   downloads with the key, and the job event stream with resume.
   Everything user-supplied reaches the page through textContent / attributes, never innerHTML. */
"use strict";
(function () {
  const KEY = "lcsb_api_key";

  function key() { return sessionStorage.getItem(KEY); }

  function signInUrl() {
    return "/ui/sign-in?next=" + encodeURIComponent(location.pathname + location.search);
  }

  function requireKey() {
    if (!key() && document.body.dataset.page !== "sign-in") { location.replace(signInUrl()); return false; }
    return true;
  }

  /* fetch /v1 with the key; returns {ok, status, body}. A 401 ends the session. */
  async function api(path, options) {
    const opts = Object.assign({}, options || {});
    opts.headers = Object.assign({ Authorization: "Bearer " + key() }, opts.headers || {});
    if (opts.json !== undefined) {
      opts.body = JSON.stringify(opts.json);
      opts.headers["Content-Type"] = "application/json";
      delete opts.json;
    }
    const r = await fetch(path, opts);
    let body = null;
    const type = r.headers.get("Content-Type") || "";
    if (type.includes("application/json")) body = await r.json();
    if (r.status === 401) { sessionStorage.removeItem(KEY); location.replace(signInUrl()); }
    return { ok: r.ok, status: r.status, body: body };
  }

  /* Every page of a cursor list (`data`, `has_more`, `after` = last id). */
  async function listAll(path, maxPages) {
    const out = [];
    let after = null;
    for (let i = 0; i < (maxPages || 50); i++) {
      const sep = path.includes("?") ? "&" : "?";
      const r = await api(path + sep + "limit=100" + (after ? "&after=" + encodeURIComponent(after) : ""));
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

  /* Follow .../events/stream: onEvent(event) for each event oldest first, onDone(status) at the end.
     Reconnects after a dropped connection (or the server's stream time limit) with Last-Event-ID. */
  function streamEvents(jobId, onEvent, onDone) {
    let lastId = null, stopped = false;
    const url = "/v1/fine_tuning/jobs/" + encodeURIComponent(jobId) + "/events/stream";
    async function connect() {
      const headers = { Authorization: "Bearer " + key(), Accept: "text/event-stream" };
      if (lastId) headers["Last-Event-ID"] = lastId;
      let finished = false;
      try {
        const r = await fetch(url, { headers: headers });
        if (!r.ok) { stopped = true; return; }
        const reader = r.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
          let cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, cut);
            buffer = buffer.slice(cut + 2);
            const msg = { event: "message", data: "", id: null };
            for (const line of block.split("\n")) {
              const i = line.indexOf(":");
              if (i <= 0) continue;
              const field = line.slice(0, i), val = line.slice(i + 1).replace(/^ /, "");
              if (field === "data") msg.data += (msg.data ? "\n" : "") + val;
              else if (field === "event") msg.event = val;
              else if (field === "id") msg.id = val;
            }
            if (msg.event === "done") { finished = true; onDone(JSON.parse(msg.data || "{}").status); return; }
            if (msg.data) {
              if (msg.id) lastId = msg.id;
              onEvent(JSON.parse(msg.data));
            }
          }
        }
      } catch (err) { /* dropped: reconnect below */ }
      if (!finished && !stopped) setTimeout(connect, 1000);
    }
    connect();
    return { stop: () => { stopped = true; } };
  }

  function bindSignOut() {
    const b = document.getElementById("sign-out");
    if (b) b.addEventListener("click", () => { sessionStorage.removeItem(KEY); location.assign("/ui/sign-in"); });
  }

  window.LCSB = { KEY, key, requireKey, api, listAll, el, setText, fmtBytes, fmtTime, fmtDuration, fmtNum,
                  TERMINAL, download, downloadLink, alertBox, streamEvents };
  requireKey();
  bindSignOut();
})();
