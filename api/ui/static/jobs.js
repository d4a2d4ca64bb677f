/* Jobs: the caller's jobs (newest first), filtered by status, refreshed 3 s after each refresh ends
   (each request retried as LCSB.apiRetrying does). */
"use strict";
(function () {
  const { listAll, el, fmtTime } = LCSB;
  const filter = document.getElementById("status-filter");
  const wanted = new URLSearchParams(location.search).get("status");
  if (wanted) filter.value = wanted;

  function progressText(j) {
    const p = j.progress || {};
    if (p.total_steps) return `${p.steps_completed}/${p.total_steps} (${p.percent}%)`;
    return j.status === "succeeded" ? "done" : "";
  }

  async function refresh() {
    const r = await listAll("/v1/fine_tuning/jobs", 5, "jobs");
    if (!r.ok) { LCSB.setText("jobs-updated", "not updated: HTTP " + r.status); return; }
    const shown = r.data.filter((j) => !filter.value || j.status === filter.value);
    const tbody = document.querySelector("#jobs-table tbody");
    tbody.replaceChildren(...shown.map((j) => el("tr", { dataset: { jobId: j.id, status: j.status } },
      el("td", {}, el("a", { href: "/ui/jobs/" + encodeURIComponent(j.id), class: "mono" }, j.id)),
      el("td", {}, el("span", { class: "badge status-" + j.status }, j.status)),
      el("td", {}, j.model),
      el("td", {}, ((j.method || {}).lcsb || {}).schedule || ""),
      el("td", { class: "progress-cell" }, progressText(j)),
      el("td", {}, fmtTime(j.created_at)))));
    document.getElementById("jobs-empty").hidden = shown.length > 0;
    LCSB.setText("jobs-updated", "updated " + new Date().toLocaleTimeString());
  }

  filter.addEventListener("change", () => {
    history.replaceState(null, "", filter.value ? "?status=" + encodeURIComponent(filter.value) : location.pathname);
    refresh();
  });
  async function loop() {
    if (!document.hidden) await refresh();
    setTimeout(loop, 3000);
  }
  loop();
})();
