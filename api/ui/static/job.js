/* A job's page: the job object (polled while it runs), its event stream (events list, loss charts,
   graded scores, selection heatmap), memory, downloads, the graded sample answers, and cancel with an
   in-page confirmation. */
"use strict";
(function () {
  const { apiRetrying, listAll, el, setText, fmtDuration, fmtNum, fmtBytes, TERMINAL } = LCSB;
  const jobId = document.body.dataset.jobId;
  const base = "/v1/fine_tuning/jobs/" + encodeURIComponent(jobId);
  const train = [], evalLoss = [], trainT = [], evalT = [];
  let t0 = null, job = null, charts = null, heat = null, graded = null, rewards = null, samples = null, stream = null,
    stopped = false;

  function notFound() {
    document.getElementById("not-found").hidden = false;
    document.getElementById("job").hidden = true;
    if (stream) stream.stop();
    stopped = true;
  }

  /* A final error answer (not retried): 404 shows the not-found message, anything else a notice. */
  function finalError(what, r) {
    if (r.status === 404) { notFound(); return; }
    if (r.status === 401) return;  // api() is already on its way to the sign-in page
    LCSB.alertBox(what + " stopped: " + ((r.body && r.body.error && r.body.error.message) || "HTTP " + r.status));
  }

  // What `auto` chose for the job and why (method.lcsb.auto), and once its probe is over the numbers it saw.
  function renderAuto(auto) {
    const line = document.getElementById("job-auto");
    line.hidden = !auto;
    if (!auto) return;
    const d = auto.decision;
    line.textContent = "auto: " + auto.reason + (d ? ` · decided after ${d.probe_steps} steps: the lower ` +
      `${d.lower_layers} layers carried ${(100 * d.lower_share).toFixed(1)}% of the gradient (threshold ` +
      `${(100 * d.threshold).toFixed(1)}%), ${d.switched ? d.schedule : "all layers"} from step ${d.from_step}` : "");
  }

  /* "supervised", or "dpo (beta 0.1)": the method type and, for DPO, its resolved beta. */
  function methodText(m) {
    const type = m.type || "supervised";
    const beta = ((m[type] || {}).hyperparameters || {}).beta;
    return type + (beta === undefined ? "" : ` (beta ${beta})`);
  }

  function renderJob(j) {
    job = j;
    const lcsb = (j.method || {}).lcsb || {};
    setText("job-id", j.id);
    const badge = setText("job-status", j.status);
    badge.className = "badge status-" + j.status;
    setText("job-summary", `${j.model} · ${methodText(j.method || {})} · schedule ${lcsb.schedule || "?"} (k=${lcsb.layers_per_step ?? "?"}) · ` +
      `worker class ${j.queue} · created ${LCSB.fmtTime(j.created_at)}` + (j.fine_tuned_model ? " · " + j.fine_tuned_model : ""));
    renderAuto(lcsb.auto);
    renderLineage(j);
    document.getElementById("job-try").hidden = !(j.status === "succeeded" && j.fine_tuned_model);
    if (j.fine_tuned_model) document.getElementById("job-try-link").href = "/ui/playground?model=" + encodeURIComponent(j.fine_tuned_model);
    const err = document.getElementById("job-error");
    err.hidden = !j.error;
    if (j.error) err.textContent = `${j.error.code}: ${j.error.message}`;
    const p = j.progress || {};
    const bar = document.getElementById("job-progress");
    bar.value = j.status === "succeeded" ? 100 : (p.percent || 0);
    let text = p.total_steps ? `${p.steps_completed}/${p.total_steps} steps (${p.percent}%)` : j.status;
    if (j.status === "running" && j.estimated_finish) text += ` · ETA ${fmtDuration(j.estimated_finish - Date.now() / 1000)}`;
    if (j.finished_at) text += ` · finished ${LCSB.fmtTime(j.finished_at)}`;
    setText("job-progress-text", text);
    document.getElementById("cancel-button").hidden = TERMINAL.includes(j.status);
    document.getElementById("export-form").hidden = j.status !== "succeeded";
    setText("hyperparameters", JSON.stringify(j.hyperparameters, null, 2));
    setText("method", JSON.stringify(j.method, null, 2));
    renderMemory(j);
    if (heat && p.total_steps) heat.setShape(0, p.total_steps);
  }

  /* "Continued from <ft id> (job <link>) · base <model>" for a job continued from a model; text nodes only. */
  function renderLineage(j) {
    const line = document.getElementById("job-lineage");
    if (!line || line.dataset.parent === (j.parent_model || "")) return;
    line.dataset.parent = j.parent_model || "";
    line.hidden = !j.parent_model;
    if (!j.parent_model) { line.replaceChildren(); return; }
    line.replaceChildren("Continued from ", el("span", { class: "mono" }, j.parent_model), " (job ",
      el("a", { href: "/ui/jobs/" + encodeURIComponent(j.parent_job_id), class: "mono" }, j.parent_job_id),
      ") · base ", j.model);
  }

  function renderMemory(j) {
    const est = j.memory_estimate || {};
    const rows = [["estimated peak (MiB)", fmtNum(est.total_mib)], ["with headroom (MiB)", fmtNum(est.required_mib)],
                  ["worker class cap (MiB)", est.memory_cap_mib], ["measured peak (MiB)", fmtNum((j.progress || {}).peak_memory_mib)]];
    for (const [name, value] of Object.entries(est)) {
      if (name.endsWith("_mib") && !["total_mib", "required_mib", "memory_cap_mib"].includes(name)) rows.push(["  " + name.replace(/_mib$/, "") + " (MiB)", fmtNum(value)]);
    }
    const peak = (j.progress || {}).peak_memory_mib;
    if (peak && est.total_mib) rows.splice(4, 0, ["measured / estimated", (peak / est.total_mib).toFixed(2) + "x"]);
    document.querySelector("#memory-table tbody").replaceChildren(...rows.map(([k, v]) =>
      el("tr", {}, el("th", {}, k), el("td", { dataset: { name: k.trim() } }, v ?? ""))));
  }

  function onEvent(e) {
    const d = e.data || {};
    const item = el("li", { class: "event level-" + e.level, dataset: { type: e.type } },
      el("time", {}, new Date(e.created_at * 1000).toLocaleTimeString()), " ", el("span", { class: "message" }, e.message));
    document.getElementById("events").prepend(item);
    if (d.num_layers) heat.setShape(d.num_layers, d.total_steps);
    if (t0 === null && (d.num_layers || e.type === "metrics")) t0 = e.created_at - (d.step_time_s || 0);
    const t = t0 === null ? 0 : e.created_at - t0;
    if (e.type === "metrics" && typeof d.train_loss === "number") { train.push([d.step, d.train_loss]); trainT.push([t, d.train_loss]); }
    if (e.type === "metrics" && typeof d.valid_loss === "number") { evalLoss.push([d.step, d.valid_loss]); evalT.push([d.step === 0 ? 0 : t, d.valid_loss]); }  // step 0: the base model, measured after step 1
    if (e.type === "metrics") { graded.add(d); rewards.add(d); }  // grader/<name> scores; a DPO job's rewards/...
    if (Array.isArray(d.selected_layers)) heat.add(d.step, d.selected_layers);
    charts.step.update([train, evalLoss]);
    charts.time.update([trainT, evalT]);
  }

  const HISTORY_MAX_BYTES = 32 << 20;  // shade the heatmap from the history up to this size
  const SAMPLES_MAX_BYTES = 32 << 20;  // eval_samples.jsonl: 512 samples x 512 tokens stay far below

  /* After the run: the resolved config, the per-layer gradient norms (selection history) and the
     graded evaluation's sample answers. */
  async function loadRunFiles(artifacts) {
    const byName = new Map(artifacts.map((a) => [a.name, a]));
    const config = byName.get("config.json");
    if (config && !document.getElementById("config").dataset.loaded) {
      const r = await fetch(config.download_url, { headers: { Authorization: "Bearer " + LCSB.key() } });
      if (r.ok) {
        setText("config", JSON.stringify(await r.json(), null, 2));
        document.getElementById("config").dataset.loaded = "true";
        document.getElementById("config").classList.remove("muted");
      }
    }
    const history = byName.get("selection_history.jsonl");
    if (history && history.bytes <= HISTORY_MAX_BYTES && !heat.shaded) {
      const r = await fetch(history.download_url, { headers: { Authorization: "Bearer " + LCSB.key() } });
      if (r.ok) {
        const rows = (await r.text()).split("\n").filter((line) => line.trim()).map((line) => JSON.parse(line));
        heat.shaded = true;
        heat.shade(rows);
      }
    }
    const answers = byName.get("eval_samples.jsonl");
    if (answers && answers.bytes <= SAMPLES_MAX_BYTES && !samples.loaded) {
      samples.loaded = true;
      const r = await fetch(answers.download_url, { headers: { Authorization: "Bearer " + LCSB.key() } });
      if (r.ok) samples.show((await r.text()).split("\n").filter((line) => line.trim()).map((line) => JSON.parse(line)));
      else samples.loaded = false;
    }
  }

  async function loadDownloads() {
    const arts = await apiRetrying(base + "/artifacts", undefined, "artifacts");
    const ul = document.getElementById("artifacts");
    if (arts.ok && arts.body.data.length) {
      loadRunFiles(arts.body.data);
      ul.replaceChildren(...arts.body.data.map((a) => el("li", {},
        LCSB.downloadLink(a.download_url, jobId + "-" + a.name.split("/").pop(), a.name), " ", el("span", { class: "muted" }, fmtBytes(a.bytes)))));
    }
    const cps = await listAll(base + "/checkpoints", 5, "checkpoints");
    const cl = document.getElementById("checkpoints");
    if (cps.ok && cps.data.length) {
      renderCheckpointChoice(cps.data.map((c) => String(c.step_number)));
      cl.replaceChildren(...cps.data.map((c) => el("li", {},
        LCSB.downloadLink(c.download_url, `${jobId}-step-${c.step_number}-adapter.tar.gz`, `step ${c.step_number} adapter`),
        " ", el("span", { class: "muted" }, fmtBytes(c.bytes)))));
    }
  }

  /* The export form's adapter choice: "final" and each checkpoint's step. Rebuilt only when the steps
     change (downloads reload when the stream ends), keeping what the user picked. */
  function renderCheckpointChoice(steps) {
    const select = document.getElementById("export-checkpoint");
    if (select.dataset.steps === steps.join(",")) return;
    const picked = select.value;
    select.dataset.steps = steps.join(",");
    select.replaceChildren(el("option", { value: "" }, "final"),
      ...steps.map((step) => el("option", { value: step }, `step ${step} checkpoint`)));
    if (steps.includes(picked)) select.value = picked;
  }

  /* GGUF exports (POST .../exports; the files are made by a worker): list them, poll the unfinished
     (one poll loop at a time). */
  let exportsTimer = null;
  async function loadExports() {
    clearTimeout(exportsTimer);
    const r = await apiRetrying(base + "/exports", undefined, "exports");
    if (!r.ok || !r.body.data.length) return;
    document.getElementById("exports").replaceChildren(...r.body.data.map((x) => el("li", { dataset: { exportId: x.id, status: x.status } },
      el("span", { class: "export-status" }, `${x.formats.join(", ")}` +
        (x.checkpoint_step ? ` (step ${x.checkpoint_step})` : "") + `: ${x.status}`),
      ...(x.error ? [" ", el("span", { class: "error" }, x.error.message)] : []),
      ...x.files.map((f) => el("span", {}, " ", LCSB.downloadLink(f.download_url, f.name, f.name),
        el("span", { class: "muted" }, ` ${fmtBytes(f.bytes)}` +
          (f.effect_kept === null || f.effect_kept === undefined ? "" : `, effect kept ${(100 * f.effect_kept).toFixed(1)} %`)))))));
    if (r.body.data.some((x) => !TERMINAL.includes(x.status))) exportsTimer = setTimeout(loadExports, 2000);
  }

  /* The export form: the chosen formats and adapter (final or a checkpoint's step); a refusal shows the
     API's message under the form. */
  function bindExport() {
    const form = document.getElementById("export-form"), error = document.getElementById("export-error");
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const formats = Array.from(form.querySelectorAll("input[name=format]:checked"), (c) => c.value);
      const step = document.getElementById("export-checkpoint").value;
      const button = document.getElementById("export-button");
      button.disabled = true;
      const r = await LCSB.api(base + "/exports", { method: "POST", json: { formats: formats, checkpoint_step: step ? Number(step) : null } });
      button.disabled = false;
      error.hidden = r.ok;
      error.textContent = r.ok ? "" : "Export refused: " + ((r.body && r.body.error && r.body.error.message) ||
        (r.status ? "the service answered HTTP " + r.status : "the service did not answer"));
      if (r.ok) loadExports();
    });
  }

  /* The job object every 2 s while it runs (each request retried as apiRetrying does). */
  async function poll() {
    if (stopped) return;
    const r = await apiRetrying(base, undefined, "job");
    if (stopped) return;
    if (!r.ok) { finalError("Updates", r); return; }
    renderJob(r.body);
    if (!TERMINAL.includes(r.body.status)) setTimeout(poll, 2000);
  }

  function bindCancel() {
    const dialog = document.getElementById("cancel-dialog");
    document.getElementById("cancel-button").addEventListener("click", () => dialog.showModal());
    dialog.addEventListener("close", async () => {
      if (dialog.returnValue !== "yes") return;
      const r = await LCSB.api(base + "/cancel", { method: "POST" });
      if (r.ok) renderJob(r.body);
      else LCSB.alertBox("Cancel failed: " + ((r.body && r.body.error && r.body.error.message) || "HTTP " + r.status));
    });
  }

  async function start() {
    if (!jobId) { notFound(); return; }
    const r = await apiRetrying(base, undefined, "job");
    if (!r.ok) { if (r.status !== 401) notFound(); return; }
    document.getElementById("job").hidden = false;
    charts = { step: LCSBCharts.lineChart(document.getElementById("chart-step"), "step", ["train loss", "eval loss"]),
               time: LCSBCharts.lineChart(document.getElementById("chart-time"), "seconds", ["train loss", "eval loss"]) };
    heat = LCSBCharts.heatmap(document.getElementById("heatmap"), document.getElementById("heatmap-caption"));
    graded = LCSBGraded.scoreChart(document.getElementById("graded-section"), document.getElementById("chart-graded"));
    rewards = LCSBRewards.rewardCharts(document.getElementById("rewards-section"), document.getElementById("chart-rewards"),
                                       document.getElementById("chart-reward-accuracy"));
    samples = LCSBGraded.samplesTable(document.getElementById("samples-section"));
    const models = await apiRetrying("/v1/models", undefined, "models");
    const info = models.ok ? models.body.data.find((m) => m.id === r.body.model) : null;
    heat.setShape(info ? info.num_layers : 0, (r.body.progress || {}).total_steps);
    renderJob(r.body);
    bindCancel();
    bindExport();
    loadDownloads();
    loadExports();
    if (!TERMINAL.includes(r.body.status)) setTimeout(poll, 2000);
    stream = LCSB.streamEvents(jobId, onEvent, async () => {
      const final = await apiRetrying(base, undefined, "job");
      if (final.ok) renderJob(final.body);
      loadDownloads();
      document.body.dataset.streamDone = "true";
    }, (status, body) => finalError("Events", { status: status, body: body }));
  }
  start();
})();
