/* Compare: eval-loss curves of two or more jobs on one chart, against step and against seconds since
   each job's training started (read from each job's metrics events). `?jobs=id1,id2` in the URL. */
"use strict";
(function () {
  const { apiRetrying, listAll, el, fmtNum, fmtDuration } = LCSB;

  function label(j) {
    const lcsb = (j.method || {}).lcsb || {};
    return `${j.id} (${lcsb.schedule || "?"}, k=${lcsb.layers_per_step ?? "?"})`;
  }

  async function curves(id) {
    const evs = await listAll("/v1/fine_tuning/jobs/" + encodeURIComponent(id) + "/events", 50, "events " + id);
    const events = evs.data.slice().reverse();  // the API pages newest first
    let t0 = null, trainEnd = null;
    const byStep = [], byTime = [];
    for (const e of events) {
      const d = e.data || {};
      if (t0 === null && (d.num_layers || e.type === "metrics")) t0 = e.created_at - (d.step_time_s || 0);
      if (typeof d.train_seconds === "number") trainEnd = d.train_seconds;
      if (e.type === "metrics" && typeof d.valid_loss === "number") {
        byStep.push([d.step, d.valid_loss]);
        byTime.push([d.step === 0 ? 0 : e.created_at - (t0 ?? e.created_at), d.valid_loss]);  // step 0: before training
      }
    }
    return { byStep, byTime, trainEnd };
  }

  async function compare(ids) {
    const jobs = [];
    for (const id of ids) {
      const r = await apiRetrying("/v1/fine_tuning/jobs/" + encodeURIComponent(id), undefined, "job " + id);
      if (!r.ok) { LCSB.setText("compare-error", "No such fine-tuning job: " + id); return; }
      jobs.push(Object.assign(r.body, await curves(id)));
    }
    const names = jobs.map(label);
    const stepDiv = document.getElementById("compare-step"), timeDiv = document.getElementById("compare-time");
    stepDiv.replaceChildren();
    timeDiv.replaceChildren();
    LCSBCharts.lineChart(stepDiv, "step", names).now(jobs.map((j) => j.byStep));
    LCSBCharts.lineChart(timeDiv, "seconds", names).now(jobs.map((j) => j.byTime));
    document.querySelector("#compare-table tbody").replaceChildren(...jobs.map((j) => {
      const lcsb = (j.method || {}).lcsb || {};
      const last = j.byStep.length ? j.byStep[j.byStep.length - 1][1] : null;
      return el("tr", { dataset: { jobId: j.id } },
        el("td", {}, el("a", { href: "/ui/jobs/" + encodeURIComponent(j.id), class: "mono" }, j.id)),
        el("td", {}, lcsb.schedule || ""), el("td", {}, lcsb.layers_per_step ?? ""), el("td", {}, j.status),
        el("td", { class: "eval-points" }, j.byStep.length), el("td", {}, fmtNum(last, 4)),
        el("td", {}, j.trainEnd === null ? "" : fmtDuration(j.trainEnd)));
    }));
    document.body.dataset.compared = String(jobs.length);
  }

  async function picker(selected) {
    const r = await listAll("/v1/fine_tuning/jobs", 3, "jobs");
    const ul = document.getElementById("compare-picker");
    ul.replaceChildren(...r.data.map((j) => el("li", {}, el("label", {},
      el("input", { type: "checkbox", value: j.id, checked: selected.includes(j.id) }), " ", label(j), " · ", j.status))));
  }

  const ids = (new URLSearchParams(location.search).get("jobs") || "").split(",").filter(Boolean);
  document.getElementById("compare-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const chosen = Array.from(document.querySelectorAll("#compare-picker input:checked")).map((i) => i.value);
    if (chosen.length < 2) { LCSB.setText("compare-error", "Pick at least two jobs."); return; }
    LCSB.setText("compare-error", "");
    history.replaceState(null, "", "?jobs=" + chosen.map(encodeURIComponent).join(","));
    compare(chosen);
  });
  picker(ids);
  if (ids.length >= 2) compare(ids);
})();
