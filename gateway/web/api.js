// The gateway's APIs as the page uses them: JSON calls and server-sent event streams, both over
// fetch (EventSource cannot send the API key). The key, if the server wants one, is kept in
// this browser only.

const KEY = "llmbus.apiKey";

export const apiKey = {
  get: () => localStorage.getItem(KEY) || "",
  set: (k) => (k ? localStorage.setItem(KEY, k) : localStorage.removeItem(KEY)),
};

export function headers(extra = {}) {
  const out = { ...extra };
  const k = apiKey.get();
  if (k) out.Authorization = `Bearer ${k}`;
  return out;
}

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function failure(resp) {
  let message = `${resp.status} ${resp.statusText}`;
  try {
    const body = await resp.json();
    const e = body.error;
    message = typeof e === "string" ? e : (e && e.message) || message;
  } catch { /* not JSON: the status says it */ }
  return new ApiError(resp.status, message);
}

export async function getJSON(path, signal) {
  const resp = await fetch(path, { headers: headers({ Accept: "application/json" }), signal });
  if (!resp.ok) throw await failure(resp);
  return resp.json();
}

// POST a JSON body and read the answer as server-sent events: yields {event, data} with data
// parsed as JSON ("[DONE]" stays a string).
export async function* postEvents(path, body, signal) {
  const resp = await fetch(path, {
    method: "POST", signal, body: JSON.stringify(body),
    headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
  });
  if (!resp.ok) throw await failure(resp);
  yield* events(resp);
}

export async function* getEvents(path, signal) {
  const resp = await fetch(path, { headers: headers({ Accept: "text/event-stream" }), signal });
  if (!resp.ok) throw await failure(resp);
  yield* events(resp);
}

async function* events(resp) {
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (!data.length) continue;
      const text = data.join("\n");
      let parsed = text;
      if (text !== "[DONE]") {
        try { parsed = JSON.parse(text); } catch { /* left as text */ }
      }
      yield { event, data: parsed };
    }
  }
}
