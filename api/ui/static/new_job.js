/* The create-job form: models and files from /v1, the memory estimate and worker class from
   POST /v1/fine_tuning/jobs/estimate as fields change, and the API's errors next to their fields. */
"use strict";
(function () {
  const { api, listAll, el } = LCSB;
  const $ = (id) => document.getElementById(id);
  const dpo = () => $("f-method").value === "dpo";

  /* The request body; text fields are sent as typed (numbers when they parse) so the API's own
     validation speaks, and empty fields are left out (the API's defaults). A DPO job's hyperparameters,
     beta with them, go in method.dpo.hyperparameters (OpenAI's shape); a supervised job's at the top level. */
  function body() {
    const num = (id) => { const v = $(id).value.trim(); return v === "" ? undefined : (isFinite(Number(v)) ? Number(v) : v); };
    const b = { model: $("f-model").value, training_file: $("f-training").value };
    if ($("f-validation").value) b.validation_file = $("f-validation").value;
    const hp = { learning_rate: num("f-lr"), n_epochs: num("f-epochs"), max_steps: num("f-steps") };
    const lcsb = { schedule: $("f-schedule").value, k: num("f-k"), fraction: num("f-fraction"),
                   full_every: num("f-full-every") };
    const method = { lora: { rank: num("f-rank") }, lcsb: lcsb, eval_every: num("f-eval") };
    if (dpo()) {
      method.type = "dpo";
      method.dpo = { hyperparameters: { ...hp, beta: num("f-beta") } };
    } else b.hyperparameters = JSON.parse(JSON.stringify(hp));
    b.method = JSON.parse(JSON.stringify(method));
    return b;
  }

  function clearErrors() {
    for (const n of document.querySelectorAll("#job-form [data-param]")) n.textContent = "";
    for (const n of document.querySelectorAll("#job-form .invalid")) n.classList.remove("invalid");
  }

  /* The error next to the field its `param` names (or the closest enclosing one), else at the top. */
  function showError(error) {
    clearErrors();
    // a DPO job's hyperparameters are the form's hyperparameter fields (beta has its own slot)
    let param = (error.param || "").replace(/^method\.dpo\.hyperparameters\.(?!beta$)/, "hyperparameters.");
    let slot = null;
    while (param && !(slot = document.querySelector(`#job-form .field-error[data-param="${CSS.escape(param)}"]`))) {
      param = param.includes(".") ? param.slice(0, param.lastIndexOf(".")) : "";
    }
    slot = slot || $("form-error");
    slot.textContent = error.message;
    if (slot.parentElement.classList.contains("field")) slot.parentElement.classList.add("invalid");
  }

  function showEstimate(est) {
    const m = est.memory_estimate;
    $("estimate-text").textContent = `Estimated peak ${m.total_mib.toFixed(0)} MiB (${m.required_mib.toFixed(0)} MiB with ` +
      `headroom): runs on worker class ${est.queue} (cap ${m.memory_cap_mib} MiB, ${m.device}).`;
    const lcsb = est.method.lcsb;
    const beta = ((est.method[est.method.type] || {}).hyperparameters || {}).beta;
    const rows = [["method", est.method.type + (beta === undefined ? "" : ` (beta ${beta})`)], ["worker class", est.queue], ["estimated peak (MiB)", m.total_mib.toFixed(1)],
                  ["memory cap (MiB)", m.memory_cap_mib], ["schedule", lcsb.schedule],
                  ["layers per step", lcsb.layers_per_step],
                  ["exact gradient", String(lcsb.exact_gradient)], ["learning rate", est.hyperparameters.learning_rate],
                  ["epochs", est.hyperparameters.n_epochs], ["batch size", est.hyperparameters.batch_size]];
    const table = $("estimate-table");
    table.tBodies[0].replaceChildren(...rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", { dataset: { name: k } }, v ?? ""))));
    table.hidden = false;
  }

  let seq = 0;
  async function estimate() {
    if (!$("f-model").value || !$("f-training").value) return;
    const mine = ++seq;
    const r = await api("/v1/fine_tuning/jobs/estimate", { method: "POST", json: body() });
    if (mine !== seq) return;  // a newer estimate is on its way
    if (r.ok) { clearErrors(); showEstimate(r.body); document.body.dataset.estimated = r.body.queue; }
    else {
      $("estimate-table").hidden = true;
      $("estimate-text").textContent = "No estimate until the errors are fixed.";
      if (r.body && r.body.error) showError(r.body.error);
    }
  }

  $("f-method").addEventListener("change", () => { $("beta-field").hidden = !dpo(); });

  let timer = null;
  $("job-form").addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(estimate, 400); });
  $("job-form").addEventListener("change", () => { clearTimeout(timer); timer = setTimeout(estimate, 100); });
  $("job-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const r = await api("/v1/fine_tuning/jobs", { method: "POST", json: body() });
    if (r.ok) location.assign("/ui/jobs/" + encodeURIComponent(r.body.id));
    else if (r.body && r.body.error) showError(r.body.error);
  });

  async function load() {
    const [models, files] = await Promise.all([api("/v1/models"), listAll("/v1/files", 5)]);
    if (models.ok) $("f-model").replaceChildren(...models.body.data.map((m) => el("option", { value: m.id }, `${m.id} (${m.num_layers} layers)`)));
    const usable = files.data.filter((f) => f.status === "processed" && f.purpose === "fine-tune");
    const opts = () => usable.map((f) => el("option", { value: f.id }, `${f.filename} (${f.id})`));
    $("f-training").replaceChildren(...opts());
    $("f-validation").replaceChildren(el("option", { value: "" }, "none"), ...opts());
    estimate();
  }
  load();
})();
