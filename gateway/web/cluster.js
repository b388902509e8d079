// The cluster, live: /v1/cluster as server-sent events (a snapshot on each change, at least one
// a second). Hosts and their services with the health watchers' state, heartbeat age and
// restarts; the layer map, one bar per shard over the model's layers (replicas in lanes side by
// side), red while a shard does not serve and green again once it does; each hop's bytes and
// latency; the requests running and waiting and the KV pages in use.

import { getEvents } from "./api.js";
import { $, fmtBytes, h } from "./dom.js";

export class Cluster {
  constructor(onSnapshot) {
    this.onSnapshot = onSnapshot;
    this.el = { live: $("#live"), summary: $("#cluster-summary"), layers: $("#layer-map"),
                hops: $("#hops"), hosts: $("#hosts") };
    this.follow();
  }

  async follow() {
    for (;;) {
      try {
        for await (const { event, data } of getEvents("/v1/cluster")) {
          if (event !== "cluster") continue;
          this.live(true);
          this.show(data);
          if (this.onSnapshot) this.onSnapshot(data);
        }
      } catch { /* the gateway went away or restarted: shown as offline, then tried again */ }
      this.live(false);
      await new Promise((r) => setTimeout(r, 1000));
    }
  }

  live(on) {
    this.el.live.textContent = on ? "live" : "offline";
    this.el.live.className = `badge ${on ? "up" : "down"}`;
  }

  show(snap) {
    this.summary(snap);
    this.layerMap(snap);
    this.hopTable(snap.hops || []);
    this.hostList(snap);
  }

  summary(snap) {
    const r = snap.requests || {};
    const item = (label, value, cls = "") => h("div", { class: `stat ${cls}` },
      h("span", { class: "label" }, label), h("span", { class: "value" }, value));
    const items = [
      item("model", snap.model ? snap.model.id : "none yet"),
      item("running", r.running ?? "–", "running"), item("waiting", r.waiting ?? "–", "waiting"),
      item("KV pages in use", r.pages_total ? `${r.pages_used} / ${r.pages_total}` : "–", "pages"),
      item("tokens/s", r.tokens_per_s !== undefined ? r.tokens_per_s.toFixed(1) : "–"),
    ];
    const missing = (snap.missing || []).map((m) => h("li", {}, m));
    this.el.summary.replaceChildren(h("div", { class: "stats" }, items),
      missing.length ? h("ul", { class: "missing" }, missing) : "");
  }

  layerMap(snap) {
    const bars = snap.layer_map || [];
    if (!bars.length) {
      this.el.layers.replaceChildren(h("p", { class: "empty" }, "no shard holds a layer yet"));
      return;
    }
    const n = snap.n_layers || Math.max(1, ...bars.map((b) => b.layers[1]));
    const lanes = Math.max(1, ...bars.map((b) => (b.lane || 0) + 1));
    const rows = [];
    for (let lane = 0; lane < lanes; lane++) {
      rows.push(h("div", { class: "lane" }, bars.filter((b) => (b.lane || 0) === lane).map((b) => {
        const [a, z] = b.layers;
        const state = b.watch_state && b.watch_state !== "up" ? b.watch_state : b.state;
        return h("div", {
          class: `bar ${b.status}`, "data-shard": b.shard, "data-status": b.status,
          style: { left: `${(100 * a) / n}%`, width: `${(100 * (z - a)) / n}%` },
          title: `${b.shard}: layers ${a}–${z - 1}, ${state}, ${b.restarts} restarts` +
                 (b.kv_pages ? `, ${b.kv_pages} KV pages` : "") + (b.device ? `, ${b.device}` : ""),
        }, h("span", { class: "name" }, b.shard), h("span", { class: "range" }, `${a}–${z - 1}`),
           h("span", { class: "state" }, state + (b.restarts ? ` · ${b.restarts}↻` : "")));
      })));
    }
    const axis = h("div", { class: "axis" }, h("span", {}, "0"), h("span", {}, `${n} layers`));
    this.el.layers.replaceChildren(...rows, axis);
  }

  hopTable(hops) {
    const rows = hops.map((x) => h("tr", {},
      h("td", {}, x.from), h("td", {}, "→ " + x.to), h("td", { class: "num" }, String(x.batches)),
      h("td", { class: "num" }, fmtBytes(x.bytes)),
      h("td", { class: "num" }, x.batches ? fmtBytes(x.bytes / x.batches) : "–"),
      h("td", { class: "num" }, `${x.latency_ms.toFixed(2)} ms`)));
    this.el.hops.replaceChildren(h("thead", {}, h("tr", {},
      ["from", "to", "batches", "bytes", "per batch", "mean latency"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 6, class: "empty" }, "no batch yet"))));
  }

  hostList(snap) {
    const byName = Object.fromEntries([...(snap.services || []), ...(snap.self ? [snap.self] : [])]
      .map((s) => [s.name, s]));
    this.el.hosts.replaceChildren(...(snap.hosts || []).map((host) => h("section", { class: "host" },
      h("h3", {}, host.addresses.join(", ") || host.machine,
        h("small", {}, ` machine ${host.machine.slice(0, 12)}${host.watcher ? ` · watched by ${host.watcher}` : ""}`)),
      h("table", { class: "services" },
        h("thead", {}, h("tr", {}, ["", "service", "kind", "state", "watcher", "heartbeat", "restarts", "pid"]
          .map((t) => h("th", {}, t)))),
        h("tbody", {}, host.services.map((name) => {
          const s = byName[name];
          const w = s.watch || {};
          return h("tr", { "data-service": s.name, "data-status": s.status },
            h("td", {}, h("span", { class: `dot ${s.status}`, title: s.status })),
            h("td", {}, s.name), h("td", {}, s.kind), h("td", {}, s.state),
            h("td", { title: w.last_error || "" }, w.state || "–"),
            h("td", { class: "num" }, s.heartbeat_age_s === null ? "–" : `${s.heartbeat_age_s.toFixed(1)} s`),
            h("td", { class: "num" }, String(w.restarts ?? "–")), h("td", { class: "num" }, String(s.pid || w.pid || "")));
        }))))));
  }
}
