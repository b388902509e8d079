// Conversations and settings, kept in this browser's localStorage.

const CONVS = "llmbus.conversations";
const SETTINGS = "llmbus.settings";

export const DEFAULTS = { model: "", temperature: 0.7, top_p: 0.95, top_k: 40, max_tokens: 512,
                          seed: "", system: "", logprobs: true };

function read(key, fallback) {
  try {
    const v = JSON.parse(localStorage.getItem(key));
    return v ?? fallback;
  } catch {
    return fallback;
  }
}

function write(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
  } catch {
    // Full (long answers with their token view): drop the oldest conversation and try once more.
    if (key === CONVS && value.length > 1) write(key, value.slice(0, -1));
  }
}

export const settings = {
  load: () => ({ ...DEFAULTS, ...read(SETTINGS, {}) }),
  save: (s) => write(SETTINGS, s),
};

// Newest first. Each: {id, title, system, messages: [{role, content, meta, logprobs}], updated}.
export const conversations = {
  all: () => read(CONVS, []),
  save(conv) {
    conv.updated = Date.now();
    const rest = this.all().filter((c) => c.id !== conv.id);
    write(CONVS, [conv, ...rest]);
  },
  remove(id) { write(CONVS, this.all().filter((c) => c.id !== id)); },
  create: (system) => ({ id: `c${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`,
                         title: "New chat", system, messages: [], updated: Date.now() }),
};
