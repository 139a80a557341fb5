// trajforge view: tabs on the trajectory page, token ids on demand, and live rows on a run page.
"use strict";

function showTab(name) {
  document.querySelectorAll(".panel").forEach((p) => p.classList.toggle("active", p.id === name));
  document.querySelectorAll(".tab").forEach((t) => t.classList.toggle("active", t.dataset.tab === name));
}

function setUpTabs() {
  const tabs = document.querySelectorAll(".tab");
  if (!tabs.length) return;
  tabs.forEach((t) => t.addEventListener("click", (ev) => {
    ev.preventDefault();
    history.replaceState(null, "", "#" + t.dataset.tab);
    showTab(t.dataset.tab);
  }));
  const wanted = location.hash.slice(1);
  showTab(document.getElementById(wanted) && wanted !== "" ? wanted : "conversation");
}

function setUpIds() {
  const box = document.getElementById("show-ids");
  if (!box) return;
  box.addEventListener("change", () => {
    document.querySelectorAll(".tok-line").forEach((l) => l.classList.toggle("ids", box.checked));
  });
}

function cell(text, className) {
  const td = document.createElement("td");
  if (className) td.className = className;
  td.textContent = text;
  return td;
}

function rowFor(r) {
  const tr = document.createElement("tr");
  tr.className = "traj-row fresh status-" + r.status;
  tr.dataset.id = r.id;
  tr.dataset.reward = r.reward === null ? "" : String(r.reward);
  const link = document.createElement("a");
  link.className = "traj-link";
  link.href = "/trajectories/" + encodeURIComponent(r.id);
  link.textContent = r.short_id;
  const first = document.createElement("td");
  first.appendChild(link);
  tr.appendChild(first);
  tr.appendChild(cell(r.run_id || "-"));
  tr.appendChild(cell(r.task_id));
  tr.appendChild(cell(r.env || "-"));
  tr.appendChild(cell(r.model || "-"));
  tr.appendChild(cell(r.status));
  tr.appendChild(cell(r.reward === null ? "-" : r.reward.toFixed(3), "n reward"));
  tr.appendChild(cell(String(r.turns), "n"));
  tr.appendChild(cell(String(r.tokens), "n"));
  tr.appendChild(cell(new Date(r.created_at * 1000).toLocaleString()));
  return tr;
}

function setUpLive() {
  const live = document.getElementById("live");
  if (!live || !window.EventSource) return;
  const state = document.getElementById("live-state");
  const count = document.getElementById("live-count");
  const total = document.getElementById("total");
  const body = document.getElementById("trajectory-rows");
  const source = new EventSource(live.dataset.events);
  // A page left for another (or kept in the back-forward cache) must not hold its stream open.
  window.addEventListener("pagehide", () => source.close());
  source.onopen = () => { state.textContent = "connected"; };
  source.onerror = () => { state.textContent = "reconnecting"; };
  source.addEventListener("trajectory", (ev) => {
    const r = JSON.parse(ev.data);
    body.insertBefore(rowFor(r), body.firstChild);
    count.textContent = String(Number(count.textContent) + 1);
    if (total) total.textContent = String(Number(total.textContent) + 1);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  setUpTabs();
  setUpIds();
  setUpLive();
});
