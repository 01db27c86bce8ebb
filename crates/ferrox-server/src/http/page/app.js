"use strict";
// The chat page: conversations kept in localStorage, answers streamed from
// /v1/chat/completions (OpenAI's SSE chunk format, `data: [DONE]` last), a stop button that
// keeps the partial answer, settings sent only when set, and the API key asked for on a 401.
(function () {
  const md = window.ferroxMarkdown;
  const $ = (id) => document.getElementById(id);
  const STORE = {
    convs: "ferrox.conversations",
    current: "ferrox.current",
    settings: "ferrox.settings",
    key: "ferrox.apiKey",
  };
  // Sampler fields of the settings panel and how each is parsed for the request.
  const NUMBERS = {
    temperature: parseFloat, top_p: parseFloat, top_k: (v) => parseInt(v, 10),
    min_p: parseFloat, max_tokens: (v) => parseInt(v, 10), seed: (v) => parseInt(v, 10),
  };

  const state = {
    convs: loadConvs(),
    current: localStorage.getItem(STORE.current),
    settings: load(STORE.settings, {}),
    key: localStorage.getItem(STORE.key) || "",
    model: null,
    running: null, // {controller, conv, msg}
    retry: false, // resend the composer's text once a key is given
  };

  // ---- storage ----

  function load(name, fallback) {
    try {
      const v = JSON.parse(localStorage.getItem(name));
      return v === null || typeof v !== typeof fallback ? fallback : v;
    } catch (_) {
      return fallback;
    }
  }

  function store(name, value) {
    try {
      localStorage.setItem(name, typeof value === "string" ? value : JSON.stringify(value));
    } catch (e) {
      console.warn("ferrox: could not save " + name, e); // a full storage keeps the page usable
    }
  }

  function loadConvs() {
    const convs = load(STORE.convs, []);
    if (!Array.isArray(convs)) return [];
    const ok = convs.filter((c) => c && typeof c.id === "string" && Array.isArray(c.messages));
    // An answer still streaming when the page went away was cut off there.
    for (const c of ok) {
      for (const m of c.messages) {
        if (m.pending) {
          delete m.pending;
          m.stopped = true;
        }
      }
    }
    return ok;
  }

  const saveConvs = () => store(STORE.convs, state.convs);
  let saveTimer = null;
  // While streaming, saving every chunk would rewrite the whole history each token.
  function saveSoon() {
    if (saveTimer === null) {
      saveTimer = setTimeout(() => {
        saveTimer = null;
        saveConvs();
      }, 500);
    }
  }

  // ---- conversations ----

  const currentConv = () => state.convs.find((c) => c.id === state.current) || null;

  function newId() {
    return Date.now().toString(36) + Math.random().toString(36).slice(2, 10);
  }

  function selectConv(id) {
    state.current = id;
    store(STORE.current, id || "");
    renderSidebar();
    renderMessages();
  }

  function newConv() {
    const conv = { id: newId(), title: "", created: Date.now(), messages: [] };
    state.convs.unshift(conv);
    saveConvs();
    selectConv(conv.id);
    return conv;
  }

  function deleteConv(id) {
    if (state.running && state.running.conv.id === id) stop();
    state.convs = state.convs.filter((c) => c.id !== id);
    saveConvs();
    selectConv(state.current === id ? (state.convs[0] || {}).id || null : state.current);
  }

  function titleOf(text) {
    const t = text.replace(/\s+/g, " ").trim();
    return t.length > 48 ? t.slice(0, 47) + "…" : t;
  }

  // ---- rendering ----

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function renderSidebar() {
    const ul = $("conversations");
    ul.replaceChildren();
    for (const c of state.convs) {
      const li = el("li", c.id === state.current ? "current" : "");
      const open = el("button", "title", c.title || "New chat");
      open.type = "button";
      open.title = c.title || "New chat";
      open.addEventListener("click", () => {
        if (state.running) stop();
        selectConv(c.id);
      });
      const del = el("button", "delete", "×");
      del.type = "button";
      del.title = "Delete conversation";
      del.setAttribute("aria-label", "Delete conversation");
      del.addEventListener("click", () => deleteConv(c.id));
      li.append(open, del);
      ul.append(li);
    }
  }

  function renderMessages() {
    const box = $("messages");
    box.replaceChildren();
    const conv = currentConv();
    if (!conv) return;
    for (const m of conv.messages) {
      const v = messageView(m);
      box.append(v.root);
      if (state.running && state.running.msg === m) state.running.view = v;
    }
    box.scrollTop = box.scrollHeight;
  }

  // One message's elements; `update` redraws an assistant message from its fields.
  function messageView(m) {
    const root = el("div", "msg " + (m.role === "user" ? "user" : "assistant"));
    if (m.role === "user") {
      root.textContent = m.content;
      return { root, update() {} };
    }
    const details = el("details", "reasoning");
    const reasoning = el("div", "reasoning-text");
    details.append(el("summary", "", "Reasoning"), reasoning);
    const content = el("div", "content");
    const failure = el("div", "failure");
    const meta = el("div", "meta");
    root.append(details, content, failure, meta);
    const update = () => {
      const box = $("messages");
      const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
      details.hidden = !m.reasoning;
      reasoning.textContent = m.reasoning || "";
      content.innerHTML = md.render(m.content || "");
      failure.hidden = !m.error;
      failure.textContent = m.error ? "Error: " + m.error : "";
      meta.textContent = metaLine(m);
      root.dataset.state = m.pending ? "running" : m.error ? "error" : m.stopped ? "stopped" : "done";
      if (atBottom) box.scrollTop = box.scrollHeight;
    };
    update();
    return { root, update };
  }

  function metaLine(m) {
    if (m.pending) return m.content || m.reasoning ? "…" : "waiting for the first token…";
    const parts = [];
    if (m.stopped) parts.push("stopped");
    const u = m.usage;
    if (u) {
      parts.push(u.prompt_tokens + " prompt + " + u.completion_tokens + " generated tokens");
      if (u.tps) parts.push(u.tps.toFixed(1) + " tokens/s");
      if (u.ttft) parts.push(u.ttft.toFixed(2) + " s to first token");
    }
    if (m.finish === "length") parts.push("reached max_tokens");
    return parts.join(" · ");
  }

  let frame = 0;
  // Streamed chunks arrive faster than frames; redraw once per frame.
  function redrawSoon() {
    if (!frame) {
      frame = requestAnimationFrame(() => {
        frame = 0;
        if (state.running && state.running.view) state.running.view.update();
      });
    }
  }

  function setRunning(on) {
    $("send").hidden = on;
    $("stop").hidden = !on;
  }

  // ---- the API ----

  function authHeaders(extra) {
    const h = Object.assign({}, extra);
    if (state.key) h.Authorization = "Bearer " + state.key;
    return h;
  }

  async function errorText(r) {
    try {
      const j = await r.json();
      return (j.error && j.error.message) || r.status + " " + r.statusText;
    } catch (_) {
      return r.status + " " + r.statusText;
    }
  }

  async function loadModel() {
    try {
      const r = await fetch("/v1/models", { headers: authHeaders() });
      if (r.status === 401) {
        askKey();
        return;
      }
      if (!r.ok) throw new Error(await errorText(r));
      const j = await r.json();
      state.model = (j.data && j.data[0] && j.data[0].id) || null;
      $("model").textContent = state.model || "no model";
    } catch (e) {
      $("model").textContent = "server unreachable: " + e.message;
    }
  }

  function askKey() {
    $("key-error").hidden = !state.key;
    $("key-panel").hidden = false;
    $("key-input").focus();
  }

  function requestBody(conv, pending) {
    const messages = [];
    const system = (state.settings.system || "").trim();
    if (system) messages.push({ role: "system", content: system });
    for (const m of conv.messages) {
      if (m === pending || (m.role === "assistant" && !m.content)) continue;
      messages.push({ role: m.role, content: m.content });
    }
    const body = { model: state.model, messages, stream: true, stream_options: { include_usage: true } };
    for (const [name, parse] of Object.entries(NUMBERS)) {
      const raw = String(state.settings[name] ?? "").trim();
      const v = raw === "" ? NaN : parse(raw);
      if (Number.isFinite(v)) body[name] = v;
    }
    return body;
  }

  // Calls `onData` with each JSON `data:` payload until `[DONE]` or the end of the body.
  async function readSse(body, onData) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      buf += decoder.decode(value || new Uint8Array(), { stream: !done });
      let m;
      while ((m = /\r?\n\r?\n/.exec(buf))) {
        const event = buf.slice(0, m.index);
        buf = buf.slice(m.index + m[0].length);
        const data = event.split(/\r?\n/)
          .filter((l) => l.startsWith("data:"))
          .map((l) => l.slice(5).replace(/^ /, ""))
          .join("\n");
        if (data === "[DONE]") return;
        if (data) {
          try {
            onData(JSON.parse(data));
          } catch (e) {
            if (!(e instanceof SyntaxError)) throw e;
          }
        }
      }
      if (done) return;
    }
  }

  async function send(text) {
    if (state.running) return;
    if (!state.model) await loadModel();
    if (!state.model) {
      $("prompt").value = text;
      state.retry = !$("key-panel").hidden;
      return;
    }
    const conv = currentConv() || newConv();
    conv.messages.push({ role: "user", content: text });
    if (!conv.title) conv.title = titleOf(text);
    const msg = { role: "assistant", content: "", reasoning: "", pending: true };
    conv.messages.push(msg);
    state.running = { controller: new AbortController(), conv, msg, view: null };
    saveConvs();
    renderSidebar();
    renderMessages();
    setRunning(true);
    const t0 = performance.now();
    let first = null;
    try {
      const r = await fetch("/v1/chat/completions", {
        method: "POST",
        headers: authHeaders({ "Content-Type": "application/json" }),
        body: JSON.stringify(requestBody(conv, msg)),
        signal: state.running.controller.signal,
      });
      if (r.status === 401) {
        // Not an answer: take the turn back and ask for the key, then send again.
        conv.messages.splice(conv.messages.indexOf(msg) - 1, 2);
        if (!conv.messages.length) conv.title = "";
        state.running.view = null;
        renderMessages();
        $("prompt").value = text;
        state.retry = true;
        askKey();
        return;
      }
      if (!r.ok) throw new Error(await errorText(r));
      await readSse(r.body, (j) => {
        if (j.error) msg.error = j.error.message || "server error";
        const choice = j.choices && j.choices[0];
        const delta = (choice && choice.delta) || {};
        if (delta.content || delta.reasoning_content) {
          if (first === null) first = performance.now();
          msg.content += delta.content || "";
          msg.reasoning += delta.reasoning_content || "";
        }
        if (choice && choice.finish_reason) msg.finish = choice.finish_reason;
        if (j.usage) msg.usage = usageOf(j.usage, t0, first);
        redrawSoon();
        saveSoon();
      });
    } catch (e) {
      if (e.name === "AbortError") msg.stopped = true;
      else msg.error = e.message;
    } finally {
      delete msg.pending;
      const view = state.running.view;
      state.running = null;
      setRunning(false);
      saveConvs();
      renderSidebar();
      if (view) view.update();
    }
  }

  function usageOf(u, t0, first) {
    const now = performance.now();
    const out = { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens };
    if (first !== null) {
      out.ttft = (first - t0) / 1000;
      // Decode speed: the tokens after the first over the time since it came.
      const s = (now - first) / 1000;
      if (u.completion_tokens > 1 && s > 0) out.tps = (u.completion_tokens - 1) / s;
    }
    return out;
  }

  function stop() {
    if (state.running) state.running.controller.abort();
  }

  // ---- copying code ----

  async function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
    // Plain http on a non-loopback address has no clipboard API.
    const ta = el("textarea");
    ta.value = text;
    document.body.append(ta);
    ta.select();
    document.execCommand("copy");
    ta.remove();
  }

  function onMessagesClick(e) {
    const btn = e.target.closest(".copy");
    if (!btn) return;
    const code = btn.closest(".codeblock").querySelector("code");
    copyText(code.textContent).then(
      () => { btn.textContent = "Copied"; },
      () => { btn.textContent = "Copy failed"; },
    );
    setTimeout(() => { btn.textContent = "Copy"; }, 1500);
  }

  // ---- wiring ----

  function wireSettings() {
    for (const input of document.querySelectorAll("[data-setting]")) {
      const name = input.dataset.setting;
      input.value = state.settings[name] ?? "";
      input.addEventListener("input", () => {
        state.settings[name] = input.value;
        store(STORE.settings, state.settings);
      });
    }
    $("open-settings").addEventListener("click", () => { $("settings").hidden = !$("settings").hidden; });
    $("close-settings").addEventListener("click", () => { $("settings").hidden = true; });
    $("forget-key").addEventListener("click", () => {
      state.key = "";
      localStorage.removeItem(STORE.key);
      state.model = null;
      loadModel();
    });
  }

  function wireComposer() {
    const prompt = $("prompt");
    $("composer").addEventListener("submit", (e) => {
      e.preventDefault();
      const text = prompt.value.trim();
      if (!text || state.running) return;
      prompt.value = "";
      send(text);
    });
    prompt.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        $("composer").requestSubmit();
      }
    });
    $("stop").addEventListener("click", stop);
    $("new-chat").addEventListener("click", () => {
      if (state.running) stop();
      const c = currentConv();
      if (c && c.messages.length === 0) return; // an empty chat is already new
      newConv();
      prompt.focus();
    });
    $("key-form").addEventListener("submit", async (e) => {
      e.preventDefault();
      state.key = $("key-input").value.trim();
      store(STORE.key, state.key);
      $("key-input").value = "";
      $("key-panel").hidden = true;
      await loadModel();
      if (state.model && state.retry) {
        state.retry = false;
        $("composer").requestSubmit();
      }
    });
    $("messages").addEventListener("click", onMessagesClick);
  }

  wireSettings();
  wireComposer();
  if (!currentConv()) state.current = state.convs.length ? state.convs[0].id : null;
  renderSidebar();
  renderMessages();
  loadModel();
})();
