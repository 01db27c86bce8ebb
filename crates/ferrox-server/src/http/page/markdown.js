"use strict";
// A small Markdown renderer for model answers (a CommonMark subset: fenced code, headings,
// lists, block quotes, rules, paragraphs; code spans, bold, italic, strikethrough, links).
// Safety rule: every piece of source text is HTML-escaped before it is placed, the only tags
// are the ones written here, and links are only http(s). Unclosed fences render as code, so
// a half-streamed answer looks right.
(function () {
  const ENTITIES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

  function escapeHtml(s) {
    return String(s).replace(/[&<>"']/g, (c) => ENTITIES[c]);
  }

  // Spans that must not be touched by emphasis (code, links) are set aside as numbered
  // placeholders made of NUL characters, which the source cannot contain (they are removed).
  function inline(text) {
    const kept = [];
    const keep = (html) => "\u0000" + (kept.push(html) - 1) + "\u0000";
    let s = String(text).replace(/\u0000/g, "");
    s = s.replace(/``(.+?)``|`([^`\n]+)`/g, (_, a, b) => keep("<code>" + escapeHtml(a ?? b) + "</code>"));
    s = s.replace(/\[([^\]\n]+)\]\((https?:\/\/[^\s()<>]+)\)/gi, (_, label, url) =>
      keep(link(url, emphasis(escapeHtml(label)))));
    s = s.replace(/\bhttps?:\/\/[^\s<>()"'`\u0000]*[^\s<>()"'`\u0000.,;:!?*_]/gi, (url) =>
      keep(link(url, escapeHtml(url))));
    s = emphasis(escapeHtml(s));
    // Link labels may hold code placeholders: restore until none is left.
    for (let i = 0; i < 3 && s.includes("\u0000"); i++) {
      s = s.replace(/\u0000(\d+)\u0000/g, (_, n) => kept[Number(n)] ?? "");
    }
    return s;
  }

  function link(url, labelHtml) {
    return '<a href="' + escapeHtml(url) + '" target="_blank" rel="noopener noreferrer">' +
      labelHtml + "</a>";
  }

  // Runs on escaped text: the markers are ASCII, so escaping left them in place.
  function emphasis(s) {
    return s
      .replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, "<strong>$1</strong>")
      .replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, "$1<strong>$2</strong>")
      .replace(/\*(?=[^\s*])([^*]*?[^\s*])\*/g, "<em>$1</em>")
      .replace(/(^|[^\w])_(?=[^\s_])([^_]*?[^\s_])_(?!\w)/g, "$1<em>$2</em>")
      .replace(/~~(?=\S)([\s\S]*?\S)~~/g, "<del>$1</del>");
  }

  function codeBlock(lang, code) {
    return '<div class="codeblock"><div class="code-head"><span class="lang">' +
      escapeHtml(lang || "text") +
      '</span><button type="button" class="copy">Copy</button></div><pre><code>' +
      escapeHtml(code) + "</code></pre></div>";
  }

  const FENCE = /^( {0,3})(`{3,}|~{3,})\s*([^\s`]*)/;
  const HEADING = /^ {0,3}(#{1,6})\s+(.*?)(\s+#+)?\s*$/;
  const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
  const ITEM = /^( *)([-*+]|\d{1,9}[.)])\s+(.*)$/;
  const QUOTE = /^ {0,3}>\s?(.*)$/;

  // Block state while lines are read: the open paragraph, list and quote.
  function blocks(src) {
    const lines = String(src).replace(/\r\n?/g, "\n").split("\n");
    const out = [];
    let para = [];
    let list = null;
    let quote = [];
    const flushPara = () => {
      if (para.length) out.push("<p>" + inline(para.join("\n")).replace(/\n/g, "<br>") + "</p>");
      para = [];
    };
    const flushQuote = () => {
      if (quote.length) out.push("<blockquote>" + blocks(quote.join("\n")) + "</blockquote>");
      quote = [];
    };
    const flushList = () => {
      if (list) out.push(renderList(list));
      list = null;
    };
    const flushAll = () => { flushPara(); flushQuote(); flushList(); };

    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      let m = line.match(FENCE);
      if (m && !(list && m[1].length >= list.inner)) {
        flushAll();
        const close = new RegExp("^ {0,3}" + (m[2][0] === "`" ? "`" : "~") + "{" + m[2].length + ",}\\s*$");
        const strip = new RegExp("^ {0," + m[1].length + "}");
        const body = [];
        for (i++; i < lines.length && !close.test(lines[i]); i++) body.push(lines[i].replace(strip, ""));
        out.push(codeBlock(m[3], body.join("\n")));
        continue;
      }
      if (/^\s*$/.test(line)) {
        flushPara();
        flushQuote();
        if (list) list.gap = true;
        continue;
      }
      // Lines indented into the open list's items belong to its last item (nested lists,
      // continuation text, indented code fences).
      if (list && line.match(/^ */)[0].length >= list.inner) {
        const item = list.items[list.items.length - 1];
        if (list.gap) item.push("");
        item.push(line.slice(list.inner));
        list.gap = false;
        continue;
      }
      if ((m = line.match(ITEM)) && !RULE.test(line)) {
        const ordered = /\d/.test(m[2][0]);
        flushPara();
        flushQuote();
        if (!list || list.ordered !== ordered) {
          flushList();
          list = { ordered, start: ordered ? parseInt(m[2], 10) : 1, items: [] };
        }
        list.inner = m[1].length + m[2].length + 1;
        list.items.push([m[3]]);
        list.gap = false;
        continue;
      }
      if (list && !list.gap && !HEADING.test(line) && !QUOTE.test(line)) {
        // A lazy continuation of the last item's text.
        list.items[list.items.length - 1].push(line.trim());
        continue;
      }
      flushList();
      if ((m = line.match(HEADING))) {
        flushAll();
        const n = m[1].length;
        out.push("<h" + n + ">" + inline(m[2]) + "</h" + n + ">");
      } else if (RULE.test(line)) {
        flushAll();
        out.push("<hr>");
      } else if ((m = line.match(QUOTE))) {
        flushPara();
        quote.push(m[1]);
      } else if (quote.length) {
        quote.push(line);
      } else {
        para.push(line);
      }
    }
    flushAll();
    return out.join("\n");
  }

  function renderList(list) {
    const items = list.items.map((lines) => {
      const body = lines.length === 1 ? inline(lines[0]) : blocks(lines.join("\n"));
      return "<li>" + body + "</li>";
    });
    if (!list.ordered) return "<ul>" + items.join("") + "</ul>";
    const start = list.start !== 1 ? ' start="' + list.start + '"' : "";
    return "<ol" + start + ">" + items.join("") + "</ol>";
  }

  window.ferroxMarkdown = { render: blocks, escapeHtml };
})();
