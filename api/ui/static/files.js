/* Files: the list, an upload with a progress bar (XMLHttpRequest: fetch reports no upload progress),
   and the validation report as /v1/files returns it. */
"use strict";
(function () {
  const { api, listAll, el, fmtBytes, fmtTime, key } = LCSB;
  const MAX_ERRORS = 20;

  function showReport(file) {
    const v = file.validation || {};
    const body = document.getElementById("report-body");
    body.replaceChildren();
    document.getElementById("report").hidden = false;
    LCSB.setText("report-name", file.filename);
    body.append(el("p", { id: "report-status", class: file.status === "processed" ? "ok" : "error" },
      file.status === "processed" ? "Valid: ready for training." : "Rejected: " + (file.status_details || "invalid file")));
    const counts = [["lines", v.lines], ["examples", v.num_examples], ["valid examples", v.valid_examples],
                    ["invalid examples", v.invalid_examples], ["blank lines", v.blank_lines],
                    ["duplicates", v.duplicates], ["format", v.format], ["file type", v.file_type]];
    const table = el("table", { id: "report-counts" });
    for (const [name, value] of counts) {
      if (value !== undefined && value !== null) table.append(el("tr", {}, el("th", {}, name), el("td", {}, value)));
    }
    body.append(table);
    if (v.tokens) {
      const tokens = el("table", { id: "report-tokens" });
      for (const [name, value] of Object.entries(v.tokens)) {
        tokens.append(el("tr", {}, el("th", {}, "tokens " + name), el("td", {}, typeof value === "object" ? JSON.stringify(value) : value)));
      }
      body.append(el("h3", {}, "Token statistics"), tokens);
    } else {
      body.append(el("p", { class: "muted" }, "Token statistics are measured by the worker with the model's tokenizer (the job's data report)."));
    }
    for (const text of v.file_errors || []) body.append(el("p", { class: "error file-error" }, text));
    const errors = v.errors || [];
    if (errors.length) {
      const t = el("table", { id: "report-errors" }, el("thead", {}, el("tr", {}, el("th", {}, "Line"), el("th", {}, "Field"), el("th", {}, "Error"))));
      const tb = el("tbody");
      for (const e of errors.slice(0, MAX_ERRORS)) tb.append(el("tr", {}, el("td", {}, e.line), el("td", {}, e.field || ""), el("td", {}, e.message)));
      t.append(tb);
      body.append(el("h3", {}, errors.length > MAX_ERRORS ? `First ${MAX_ERRORS} of ${errors.length} errors` : "Errors"), t);
    }
    for (const w of v.warnings || []) body.append(el("p", { class: "warn" }, w));
  }

  async function refresh() {
    const r = await listAll("/v1/files", 5, "files");
    const tbody = document.querySelector("#files-table tbody");
    tbody.replaceChildren();
    for (const f of r.data) {
      const v = f.validation || {};
      const name = el("a", { href: "#", class: "file-name", dataset: { fileId: f.id } }, f.filename);
      name.addEventListener("click", async (ev) => {
        ev.preventDefault();
        const one = await api("/v1/files/" + encodeURIComponent(f.id));
        if (one.ok) showReport(one.body);
      });
      tbody.append(el("tr", { dataset: { fileId: f.id } }, el("td", {}, name), el("td", { class: "mono" }, f.id),
        el("td", {}, fmtBytes(f.bytes)), el("td", {}, v.valid_examples ?? ""), el("td", {}, v.format || ""),
        el("td", { class: "status-" + f.status }, f.status), el("td", {}, fmtTime(f.created_at))));
    }
    document.getElementById("files-empty").hidden = r.data.length > 0;
  }

  document.getElementById("upload-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const input = document.getElementById("upload-file");
    if (!input.files.length) return;
    const form = new FormData();
    form.append("purpose", "fine-tune");
    form.append("file", input.files[0], input.files[0].name);
    const bar = document.getElementById("upload-progress");
    bar.hidden = false;
    bar.value = 0;
    LCSB.setText("upload-status", "Uploading…");
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/v1/files");
    xhr.setRequestHeader("Authorization", "Bearer " + key());
    xhr.upload.addEventListener("progress", (e) => { if (e.lengthComputable) bar.value = 100 * e.loaded / e.total; });
    xhr.addEventListener("load", () => {
      bar.value = 100;
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch (err) { body = null; }
      if (xhr.status === 200 && body) {
        LCSB.setText("upload-status", body.status === "processed" ? "Uploaded " + body.id : "Uploaded, but rejected: " + body.id);
        showReport(body);
      } else {
        LCSB.setText("upload-status", "Upload failed: " + ((body && body.error && body.error.message) || "HTTP " + xhr.status));
      }
      refresh();
    });
    xhr.addEventListener("error", () => LCSB.setText("upload-status", "Upload failed: network error"));
    xhr.send(form);
  });

  refresh();
})();
