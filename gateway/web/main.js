// The page: three views (chat, cluster, integrations) behind tabs, and the API key setting.

import { apiKey } from "./api.js";
import { Chat } from "./chat.js";
import { Cluster } from "./cluster.js";
import { $ } from "./dom.js";
import { showIntegrations } from "./integrations.js";

const VIEWS = ["chat", "cluster", "integrations"];
let model = null;      // the served model's id, as the cluster feed last told it

function show(view) {
  if (!VIEWS.includes(view)) view = "chat";
  for (const v of VIEWS) {
    $(`#view-${v}`).hidden = v !== view;
    const tab = $(`#tab-${v}`);
    tab.setAttribute("aria-selected", String(v === view));
    tab.tabIndex = v === view ? 0 : -1;
  }
  if (view === "chat") $("#prompt").focus();
}

function tabs() {
  for (const v of VIEWS) {
    $(`#tab-${v}`).addEventListener("click", () => { location.hash = v; });
  }
  // Arrow keys move between tabs, as in any tab list.
  $("#tabs").addEventListener("keydown", (e) => {
    const i = VIEWS.findIndex((v) => $(`#tab-${v}`) === document.activeElement);
    if (i < 0 || (e.key !== "ArrowRight" && e.key !== "ArrowLeft")) return;
    const next = VIEWS[(i + (e.key === "ArrowRight" ? 1 : VIEWS.length - 1)) % VIEWS.length];
    location.hash = next;
    $(`#tab-${next}`).focus();
  });
  window.addEventListener("hashchange", () => show(location.hash.slice(1)));
  show(location.hash.slice(1));
}

function keySetting() {
  const input = $("#api-key");
  input.value = apiKey.get();
  input.addEventListener("change", () => {
    apiKey.set(input.value.trim());
    showIntegrations(model);
  });
}

tabs();
keySetting();
new Chat();
showIntegrations(model);
new Cluster((snap) => {
  const id = snap.model ? snap.model.id : null;
  if (id !== model) {
    model = id;
    showIntegrations(model);
  }
});
