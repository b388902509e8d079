// The chat: conversations (kept in the browser), streamed answers from the OpenAI chat endpoint
// with stop and regenerate, the sampling settings, time to first token and tokens/s of each
// answer, and a token view that colours each token by its log-probability.

import { ApiError, getJSON, postEvents } from "./api.js";
import { $, copy, h } from "./dom.js";
import { render } from "./markdown.js";
import { conversations, settings } from "./store.js";

const TOP_LOGPROBS = 5;

export class Chat {
  constructor() {
    this.settings = settings.load();
    this.conv = conversations.all()[0] || conversations.create(this.settings.system);
    this.controller = null;
    this.el = {
      list: $("#conversations"), messages: $("#messages"), prompt: $("#prompt"),
      send: $("#send"), stop: $("#stop"), model: $("#model"), system: $("#system"),
      form: $("#composer"), status: $("#chat-status"),
    };
    this.bindSettings();
    this.el.form.addEventListener("submit", (e) => { e.preventDefault(); this.send(); });
    this.el.prompt.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); this.send(); }
    });
    document.addEventListener("keydown", (e) => {
      if (e.key === "Escape" && this.controller) { e.preventDefault(); this.stop(); }
    });
    this.el.stop.addEventListener("click", () => this.stop());
    $("#new-chat").addEventListener("click", () => this.open(conversations.create(this.settings.system)));
    this.showList();
    this.showConversation();
    this.loadModels();
  }

  bindSettings() {
    for (const input of document.querySelectorAll("[data-setting]")) {
      const key = input.dataset.setting;
      if (input.type === "checkbox") input.checked = !!this.settings[key];
      else input.value = this.settings[key] ?? "";
      input.addEventListener("change", () => {
        this.settings[key] = input.type === "checkbox" ? input.checked : input.value;
        settings.save(this.settings);
      });
    }
    this.el.system.addEventListener("input", () => {
      this.conv.system = this.el.system.value;
      this.settings.system = this.el.system.value;   // the next new chat starts with it
      settings.save(this.settings);
      if (this.conv.messages.length) conversations.save(this.conv);
    });
  }

  async loadModels() {
    for (;;) {
      try {
        const { data } = await getJSON("/v1/models");
        this.el.model.replaceChildren(...data.map((m) => h("option", { value: m.id }, m.id)));
        if (data.some((m) => m.id === this.settings.model)) this.el.model.value = this.settings.model;
        this.settings.model = this.el.model.value;
        this.say("");
        return;
      } catch (e) {
        this.say(e instanceof ApiError && e.status === 401
          ? "the server wants an API key: set it under Settings" : `waiting for the model: ${e.message}`);
        await new Promise((r) => setTimeout(r, 2000));
      }
    }
  }

  say(text) { this.el.status.textContent = text; }

  // ---------------------------------------------------------------- conversations
  open(conv) {
    if (this.controller) this.stop();
    this.conv = conv;
    this.showList();
    this.showConversation();
    this.el.prompt.focus();
  }

  showList() {
    const all = conversations.all();
    if (!all.some((c) => c.id === this.conv.id)) all.unshift(this.conv);
    this.el.list.replaceChildren(...all.map((c) => h("li", { class: c.id === this.conv.id ? "current" : "" },
      h("button", { class: "conv", type: "button", title: c.title,
                    onclick: () => this.open(conversations.all().find((x) => x.id === c.id) || c) }, c.title),
      h("button", { class: "del small", type: "button", title: "delete this conversation",
                    "aria-label": `delete ${c.title}`,
                    onclick: () => {
                      conversations.remove(c.id);
                      if (c.id === this.conv.id) this.open(conversations.all()[0] || conversations.create(this.settings.system));
                      else this.showList();
                    } }, "×"))));
  }

  showConversation() {
    this.el.system.value = this.conv.system || "";
    const last = this.conv.messages.length - 1;
    this.el.messages.replaceChildren(...this.conv.messages.map((m, i) => this.view(m, i === last)));
  }

  // ---------------------------------------------------------------- sending
  send() {
    const text = this.el.prompt.value.trim();
    if (!text || this.controller) return;
    this.el.prompt.value = "";
    if (!this.conv.messages.length) this.conv.title = text.slice(0, 48);
    this.conv.messages.push({ role: "user", content: text });
    this.answer();
  }

  regenerate() {
    if (this.controller) return;
    const m = this.conv.messages;
    if (m.length && m[m.length - 1].role === "assistant") m.pop();
    if (m.length) this.answer();
  }

  stop() {
    if (this.controller) this.controller.abort();
  }

  body() {
    const s = this.settings;
    const messages = [];
    if (this.conv.system && this.conv.system.trim()) messages.push({ role: "system", content: this.conv.system });
    for (const m of this.conv.messages) {
      if (m.role === "assistant" && m.meta && m.meta.error && !m.content) continue;
      messages.push({ role: m.role, content: m.content });
    }
    const body = { model: this.el.model.value || s.model, messages, stream: true,
                   stream_options: { include_usage: true } };
    const num = (v) => (v === "" || v === null || v === undefined ? null : Number(v));
    for (const k of ["temperature", "top_p", "top_k", "max_tokens", "seed"]) {
      if (num(s[k]) !== null && !Number.isNaN(num(s[k]))) body[k] = num(s[k]);
    }
    if (s.logprobs) Object.assign(body, { logprobs: true, top_logprobs: TOP_LOGPROBS });
    return body;
  }

  async answer() {
    const msg = { role: "assistant", content: "", logprobs: [], meta: {} };
    const body = this.body();
    this.conv.messages.push(msg);
    conversations.save(this.conv);
    this.showList();
    this.showConversation();
    const node = this.el.messages.lastElementChild;
    this.busy(new AbortController());
    const t0 = performance.now();
    let first = null, usage = null, pending = false;
    const paint = () => {
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => { pending = false; this.fill(node, msg, { streaming: true }); });
    };
    try {
      for await (const { data } of postEvents("/v1/chat/completions", body, this.controller.signal)) {
        if (data === "[DONE]") break;
        if (data.error) throw new Error(data.error.message || String(data.error));
        if (data.usage) usage = data.usage;
        const choice = data.choices && data.choices[0];
        if (!choice) continue;
        const piece = (choice.delta && choice.delta.content) || "";
        const lps = (choice.logprobs && choice.logprobs.content) || [];
        if ((piece || lps.length) && first === null) first = performance.now();
        msg.content += piece;
        for (const t of lps) {
          msg.logprobs.push({ token: t.token, logprob: t.logprob,
                              top: (t.top_logprobs || []).map((a) => [a.token, a.logprob]) });
        }
        if (choice.finish_reason) msg.meta.finish = choice.finish_reason;
        paint();
      }
    } catch (e) {
      if (e.name === "AbortError") msg.meta.finish = "stopped";
      else msg.meta.error = e.message;
    } finally {
      const end = performance.now();
      const tokens = usage ? usage.completion_tokens : msg.logprobs.length;
      if (first !== null) {
        msg.meta.ttft_ms = Math.round(first - t0);
        if (tokens > 1 && end > first) msg.meta.tps = +((tokens - 1) / ((end - first) / 1000)).toFixed(1);
      }
      msg.meta.tokens = tokens || msg.logprobs.length;
      this.busy(null);
      conversations.save(this.conv);
      this.showConversation();
      this.el.prompt.focus();
    }
  }

  busy(controller) {
    this.controller = controller;
    this.el.send.disabled = !!controller;
    this.el.stop.disabled = !controller;
    document.body.classList.toggle("generating", !!controller);
  }

  // ---------------------------------------------------------------- one message
  view(m, isLast) {
    const node = h("article", { class: `msg ${m.role}` },
      h("div", { class: "who" }, m.role === "user" ? "you" : "model"),
      h("div", { class: "body" }), h("div", { class: "meta" }), h("div", { class: "actions" }));
    this.fill(node, m, { isLast });
    return node;
  }

  // The message's text, figures and actions; while it streams, its text and figures only.
  fill(node, m, { isLast = false, streaming = false } = {}) {
    const body = node.querySelector(".body");
    if (m.role === "user") body.replaceChildren(h("p", { class: "plain" }, m.content));
    else body.replaceChildren(render(m.content));
    if (m.role !== "assistant") return;
    const meta = m.meta || {};
    const parts = [];
    if (meta.ttft_ms !== undefined) parts.push(h("span", { class: "ttft" }, `TTFT ${meta.ttft_ms} ms`));
    if (meta.tps !== undefined) parts.push(h("span", { class: "tps" }, `${meta.tps} tok/s`));
    if (meta.tokens) parts.push(h("span", { class: "ntok" }, `${meta.tokens} tokens`));
    if (meta.finish) parts.push(h("span", { class: `finish ${meta.finish}` }, meta.finish));
    if (meta.error) parts.push(h("span", { class: "error" }, meta.error));
    node.querySelector(".meta").replaceChildren(...parts);
    const actions = [];
    if (!streaming) {
      const c = h("button", { class: "copy small", type: "button", onclick: () => copy(m.content, c) }, "copy");
      actions.push(c);
      if (isLast) actions.push(h("button", { class: "regen small", type: "button", onclick: () => this.regenerate() }, "regenerate"));
      if (m.logprobs && m.logprobs.length) {
        const t = h("button", { class: "toggle-tokens small", type: "button", "aria-expanded": "false",
                                onclick: () => {
                                  const open = node.classList.toggle("show-tokens");
                                  t.setAttribute("aria-expanded", String(open));
                                } }, "tokens");
        actions.push(t);
      }
    }
    node.querySelector(".actions").replaceChildren(...actions);
    const old = node.querySelector(".tokens");
    if (old) old.remove();
    if (m.logprobs && m.logprobs.length && !streaming) node.append(tokenView(m.logprobs));
  }
}

// Each token coloured from red (improbable) to green (certain); its probability and the
// alternatives the model weighed are in its title.
export function tokenView(logprobs) {
  return h("div", { class: "tokens", "aria-label": "tokens coloured by probability" },
    logprobs.map((t) => {
      const p = Math.exp(t.logprob);
      const alts = t.top.map(([tok, lp]) => `${JSON.stringify(tok)} ${(Math.exp(lp) * 100).toFixed(1)}%`).join("\n");
      return h("span", { class: "tok", "data-logprob": t.logprob.toFixed(4),
                         style: { backgroundColor: `hsl(${Math.round(120 * p)} 70% 42% / 0.35)` },
                         title: `p = ${(p * 100).toFixed(1)}% (logprob ${t.logprob.toFixed(3)})\n${alts}` },
               t.token);
    }));
}
