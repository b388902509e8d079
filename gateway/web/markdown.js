// A small Markdown renderer for model answers: fenced code blocks (with a copy button),
// headings, lists, quotes, rules, paragraphs; inline code, bold, italic and http(s) links.
// It builds DOM nodes and sets only textContent and safe attributes: nothing the model writes
// is ever parsed as HTML. An unclosed fence (an answer still streaming) shows as code so far.

import { copy, h } from "./dom.js";

const FENCE = /^\s*(```|~~~)\s*([\w+#.-]*)\s*$/;
const HEADING = /^(#{1,6})\s+(.*)$/;
const BULLET = /^\s*[-*+]\s+(.*)$/;
const NUMBERED = /^\s*(\d+)[.)]\s+(.*)$/;
const QUOTE = /^\s*>\s?(.*)$/;
const RULE = /^\s*([-*_])(\s*\1){2,}\s*$/;

export function render(text) {
  const out = document.createDocumentFragment();
  const lines = text.split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(FENCE);
    if (fence) {
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i++;
      out.append(codeBlock(body.join("\n"), fence[2]));
      continue;
    }
    if (!line.trim()) { i++; continue; }
    const head = line.match(HEADING);
    if (head) {
      out.append(h(`h${Math.min(head[1].length + 2, 6)}`, {}, inline(head[2])));
      i++;
      continue;
    }
    if (RULE.test(line)) { out.append(h("hr")); i++; continue; }
    if (BULLET.test(line) || NUMBERED.test(line)) {
      const ordered = !BULLET.test(line);
      const re = ordered ? NUMBERED : BULLET;
      const list = h(ordered ? "ol" : "ul");
      if (ordered) list.start = Number(line.match(NUMBERED)[1]);
      while (i < lines.length && re.test(lines[i])) {
        const m = lines[i].match(re);
        list.append(h("li", {}, inline(ordered ? m[2] : m[1])));
        i++;
      }
      out.append(list);
      continue;
    }
    if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && QUOTE.test(lines[i])) body.push(lines[i++].match(QUOTE)[1]);
      out.append(h("blockquote", {}, render(body.join("\n"))));
      continue;
    }
    const para = [];
    while (i < lines.length && lines[i].trim() && !FENCE.test(lines[i]) && !HEADING.test(lines[i])
           && !BULLET.test(lines[i]) && !NUMBERED.test(lines[i]) && !QUOTE.test(lines[i])) {
      para.push(lines[i++]);
    }
    const p = h("p");
    para.forEach((l, k) => { if (k) p.append(h("br")); p.append(inline(l)); });
    out.append(p);
  }
  return out;
}

function codeBlock(code, lang) {
  const button = h("button", { class: "copy small", type: "button", title: "copy the code",
                               onclick: () => copy(code, button) }, "copy");
  return h("div", { class: "code" },
    h("div", { class: "code-head" }, h("span", { class: "lang" }, lang || "code"), button),
    h("pre", {}, h("code", {}, code)));
}

// Inline spans, left to right: `code`, **bold**, *italic* or _italic_, [text](http://...).
const INLINE = /(`+)([^`]|[^`][\s\S]*?[^`])\1|\*\*([^*]+)\*\*|__([^_]+)__|\*([^*\s][^*]*)\*|\b_([^_\s][^_]*)_\b|\[([^\]]+)\]\((https?:\/\/[^\s)]+)\)/g;

export function inline(text) {
  const out = document.createDocumentFragment();
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > last) out.append(text.slice(last, m.index));
    if (m[1]) out.append(h("code", {}, m[2]));
    else if (m[3] || m[4]) out.append(h("strong", {}, inline(m[3] || m[4])));
    else if (m[5] || m[6]) out.append(h("em", {}, inline(m[5] || m[6])));
    else out.append(h("a", { href: m[8], target: "_blank", rel: "noopener noreferrer" }, m[7]));
    last = m.index + m[0].length;
  }
  if (last < text.length) out.append(text.slice(last));
  return out;
}
