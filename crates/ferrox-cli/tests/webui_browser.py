#!/usr/bin/env python3
"""Drives the chat page of a running `ferrox serve` in headless Chromium through chromedriver,
speaking the W3C WebDriver HTTP protocol with the standard library only.

Usage: webui_browser.py BASE_URL API_KEY SCREENSHOT.png

Steps: load the page, give the API key it asks for, set max_tokens, send a prompt, watch the
answer grow, stop it, check it stopped growing, reload, find the conversation again, save a
screenshot. Prints one JSON object of observations on stdout; any failure (chromedriver or
Chromium not starting included) is a message on stderr and exit status 1, never a skip."""
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

PROMPT = "Count from 1 to 300, one number per line."
MAX_TOKENS = "400"
FOLLOW_UP = "Now write a Python hello world program."
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C key of an element reference


class Fail(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Driver:
    """One chromedriver process and one session on it."""

    def __init__(self, profile):
        exe = shutil.which("chromedriver")
        if not exe:
            raise Fail("chromedriver not found (apt-get install chromium chromium-driver)")
        self.port = free_port()
        self.log = open(os.path.join(profile, "chromedriver.log"), "w+")
        self.proc = subprocess.Popen(
            [exe, f"--port={self.port}", "--allowed-ips=127.0.0.1"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.base = f"http://127.0.0.1:{self.port}"
        self.session = None

    def start(self, profile):
        """Waits for chromedriver, then opens a session (which starts Chromium)."""
        deadline = time.time() + 30
        while True:
            try:
                if self.call("GET", "/status").get("ready"):
                    break
            except (OSError, Fail):
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                raise Fail("chromedriver did not start: " + self.driver_log())
            time.sleep(0.1)
        args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            f"--user-data-dir={os.path.join(profile, 'chromium')}",
            "--window-size=1280,900",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-sync",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-default-apps",
            "--metrics-recording-only",
            "--disable-features=Translate,OptimizationHints,MediaRouter",
        ]
        caps = {"browserName": "chrome", "goog:chromeOptions": {"args": args}}
        if shutil.which("chromium"):
            caps["goog:chromeOptions"]["binary"] = shutil.which("chromium")
        v = self.call("POST", "/session", {"capabilities": {"alwaysMatch": caps}})
        self.session = v["sessionId"]

    def driver_log(self):
        self.log.seek(0)
        return self.log.read()[-4000:]

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return json.loads(r.read() or b"{}").get("value")
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                v = json.loads(text)["value"]
                text = f"{v.get('error')}: {v.get('message')}"
            except (ValueError, KeyError, TypeError, AttributeError):
                pass
            raise Fail(f"webdriver {method} {path}: {text}") from None

    def s(self, method, path, body=None):
        return self.call(method, f"/session/{self.session}{path}", body)

    def js(self, script, *args):
        return self.s("POST", "/execute/sync", {"script": script, "args": list(args)})

    def find(self, css):
        return self.s("POST", "/element", {"using": "css selector", "value": css})[ELEMENT]

    def click(self, css):
        self.s("POST", f"/element/{self.find(css)}/click", {})

    def type(self, css, text):
        self.s("POST", f"/element/{self.find(css)}/value", {"text": text})

    def wait(self, what, script, timeout=60):
        """The first truthy value of `script`, polled."""
        deadline = time.time() + timeout
        while True:
            v = self.js(script)
            if v:
                return v
            if time.time() > deadline:
                raise Fail(f"timed out waiting for {what}")
            time.sleep(0.1)

    def quit(self):
        try:
            if self.session:
                self.s("DELETE", "")
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


LAST_ANSWER = "const a = document.querySelectorAll('.msg.assistant'); const m = a[a.length - 1];"
ANSWER_TEXT = LAST_ANSWER + "return m ? m.querySelector('.content').textContent : null;"
ANSWER_STATE = LAST_ANSWER + "return m ? m.dataset.state : null;"


def chat(d, out):
    """Everything up to the reload: key, settings, a stopped streaming answer."""
    # The server wants a key: /v1/models answers 401 and the page asks for it.
    d.wait("the key panel", "return !document.getElementById('key-panel').hidden")
    d.type("#key-input", out["key"])
    d.click("#key-save")
    out["model"] = d.wait(
        "the model id",
        "const t = document.getElementById('model').textContent;"
        "return t && t !== '…' && !t.startsWith('server') ? t : null;",
    )
    d.click("#open-settings")
    d.type("#set-max_tokens", MAX_TOKENS)
    d.type("#set-temperature", "0")
    d.click("#close-settings")
    d.type("#prompt", PROMPT)
    d.click("#send")

    # The answer grows over several polls while it streams.
    lengths, deadline = [], time.time() + 120
    while len(set(lengths)) < 3 or min(lengths) == max(lengths):
        if time.time() > deadline:
            raise Fail(f"the answer did not grow: {lengths}")
        if d.js(ANSWER_STATE) not in (None, "running"):
            raise Fail(f"the answer ended before it was stopped: {d.js(ANSWER_TEXT)!r}")
        n = len(d.js(ANSWER_TEXT) or "")
        if n and (not lengths or n != lengths[-1]):
            lengths.append(n)
        time.sleep(0.15)
    out["lengths"] = lengths
    d.click("#stop")
    d.wait("the stop", "return document.getElementById('stop').hidden")
    out["state"] = d.js(ANSWER_STATE)
    stopped = d.js(ANSWER_TEXT)
    time.sleep(1.5)
    out["answer"], out["answer_later"] = stopped, d.js(ANSWER_TEXT)
    out["meta"] = d.js(LAST_ANSWER + "return m.querySelector('.meta').textContent;")


def follow_up(d, out):
    """A second, short turn after the reload: it ends by itself with a usage line."""
    d.type("#prompt", FOLLOW_UP)
    d.click("#send")
    d.wait("the second answer", "return document.querySelectorAll('.msg.assistant').length === 2")
    ended = LAST_ANSWER + "return m.dataset.state !== 'running' ? m.dataset.state : null;"
    out["second_state"] = d.wait("the second answer to end", ended, 180)
    out["second_meta"] = d.js(LAST_ANSWER + "return m.querySelector('.meta').textContent;")
    out["code_blocks"] = d.js(LAST_ANSWER + "return m.querySelectorAll('.codeblock .copy').length;")
    out["saved_turns"] = d.js(
        "const c = JSON.parse(localStorage.getItem('ferrox.conversations'));"
        "return c[0].messages.map(m => m.role);"
    )


def main():
    base, key, shot = sys.argv[1], sys.argv[2], sys.argv[3]
    started = time.time()
    out = {"key": key}
    with tempfile.TemporaryDirectory(prefix="ferrox-webui-") as profile:
        d = None
        try:
            d = Driver(profile)
            d.start(profile)
            d.s("POST", "/url", {"url": base + "/"})
            chat(d, out)
            d.s("POST", "/refresh", {})
            d.wait("the page after reload", "return document.readyState === 'complete'")
            out["after_reload"] = d.wait(
                "the restored conversation",
                "const u = document.querySelector('.msg.user');"
                "const a = document.querySelector('.msg.assistant .content');"
                "const t = document.querySelector('#conversations .current .title');"
                "return u && a ? {user: u.textContent, answer: a.textContent,"
                " title: t ? t.textContent : null} : null;",
            )
            out["state_after_reload"] = d.js(ANSWER_STATE)
            follow_up(d, out)
            out["markdown"] = d.js(
                "return window.ferroxMarkdown.render(arguments[0]);",
                "<img src=x onerror=alert(1)> **b** [l](javascript:alert(1)) "
                "[ok](https://example.com)\n```py\nx = '<i>'\n```",
            )
            png = base64.b64decode(d.s("GET", "/screenshot"))
            os.makedirs(os.path.dirname(os.path.abspath(shot)), exist_ok=True)
            with open(shot, "wb") as f:
                f.write(png)
            out["screenshot_bytes"] = len(png)
        except Fail as e:
            log = d.driver_log() if d else ""
            print(f"webui_browser: {e}\nchromedriver log tail:\n{log}", file=sys.stderr)
            sys.exit(1)
        finally:
            if d:
                d.quit()
    out["seconds"] = round(time.time() - started, 1)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
