// Settings to paste into other clients, with this server's address (and the model it serves).

import { apiKey } from "./api.js";
import { $, copy, h } from "./dom.js";

export function showIntegrations(model) {
  const base = location.origin;
  const key = apiKey.get() ? "$LLMBUS_API_KEY" : "unused";
  const m = model || "MODEL";
  const auth = apiKey.get() ? ` \\\n  -H "Authorization: Bearer $LLMBUS_API_KEY"` : "";
  const cards = [
    ["OpenAI (Python)", "pip install openai", `from openai import OpenAI

client = OpenAI(base_url="${base}/v1", api_key="${key}")
r = client.chat.completions.create(
    model="${m}", messages=[{"role": "user", "content": "Hello!"}])
print(r.choices[0].message.content)`, `export OPENAI_BASE_URL=${base}/v1`],
    ["Anthropic (Python)", "pip install anthropic", `from anthropic import Anthropic

client = Anthropic(base_url="${base}", api_key="${key}")
r = client.messages.create(
    model="${m}", max_tokens=256, messages=[{"role": "user", "content": "Hello!"}])
print(r.content[0].text)`, `export ANTHROPIC_BASE_URL=${base}`],
    ["Ollama (Python)", "pip install ollama", `from ollama import Client

client = Client(host="${base}")
r = client.chat(model="${m}", messages=[{"role": "user", "content": "Hello!"}])
print(r.message.content)`, `export OLLAMA_HOST=${base}`],
    ["Open WebUI", "as an Ollama or an OpenAI connection", `docker run -d --network=host -e PORT=3000 \\
  -e OLLAMA_BASE_URL=${base} \\
  -e OPENAI_API_BASE_URL=${base}/v1 -e OPENAI_API_KEY=${key} \\
  ghcr.io/open-webui/open-webui:main`, "with --network=host the container reaches this address; Open WebUI is then at http://localhost:3000"],
    ["curl", "streamed, as server-sent events", `curl ${base}/v1/chat/completions \\
  -H "Content-Type: application/json"${auth} \\
  -d '{"model": "${m}", "stream": true,
       "messages": [{"role": "user", "content": "Hello!"}]}'`, `curl ${base}/v1/cluster`],
  ];
  $("#integrations-list").replaceChildren(...cards.map(([title, note, code, extra]) => {
    const shell = /^(export|curl) /.test(extra);
    return h("section", { class: "card", "data-client": title },
      h("div", { class: "code-head" }, h("h3", {}, title)), h("p", { class: "note" }, note),
      snippet(code), shell ? snippet(extra) : h("p", { class: "note" }, extra));
  }));
}

function snippet(text) {
  const button = h("button", { class: "copy small", type: "button", onclick: () => copy(text, button) }, "copy");
  return h("div", { class: "snippet" }, button, h("pre", {}, h("code", {}, text)));
}
