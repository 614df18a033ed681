#!/usr/bin/python3
"""Drives headless Chromium through the DevTools protocol on a pipe.

    cdp.py BROWSER PROFILE STEP...

Each STEP is `open:URL` (navigate, then wait 3 s for the page's scripts)
or `eval:JS` (evaluate in the page, awaiting a promise; its value is
printed on a line of its own). DevTools evaluation is not bound by the
page's Content-Security-Policy, so a test can click as a user would.
"""
import json
import os
import subprocess
import sys
import time


def main():
    browser, profile, steps = sys.argv[1], sys.argv[2], sys.argv[3:]
    to_browser_r, to_browser_w = os.pipe()
    from_browser_r, from_browser_w = os.pipe()

    def wire_pipes():  # Chromium reads commands on fd 3, answers on fd 4
        os.dup2(to_browser_r, 3)
        os.dup2(from_browser_w, 4)

    proc = subprocess.Popen(
        [browser, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-dev-shm-usage", f"--user-data-dir={profile}",
         "--remote-debugging-pipe", "about:blank"],
        pass_fds=(3, 4), preexec_fn=wire_pipes,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(to_browser_r)
    os.close(from_browser_w)
    pending = b""
    last_id = 0

    def call(method, params, session=None):
        nonlocal pending, last_id
        last_id += 1
        message = {"id": last_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(to_browser_w, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" in pending:
                raw, pending = pending.split(b"\0", 1)
                answer = json.loads(raw)
                if answer.get("id") == last_id:
                    if "error" in answer:
                        raise RuntimeError(f"{method}: {answer['error']}")
                    return answer["result"]
            more = os.read(from_browser_r, 1 << 20)
            if not more:
                raise RuntimeError("the browser closed its pipe")
            pending += more

    try:
        target = call("Target.createTarget", {"url": "about:blank"})
        session = call("Target.attachToTarget",
                       {"targetId": target["targetId"],
                        "flatten": True})["sessionId"]
        for step in steps:
            kind, _, arg = step.partition(":")
            if kind == "open":
                call("Page.navigate", {"url": arg}, session)
                time.sleep(3)
            elif kind == "eval":
                result = call("Runtime.evaluate",
                              {"expression": arg, "awaitPromise": True},
                              session)["result"]
                print(result.get("value", result.get("description", "")))
            else:
                raise SystemExit(f"unknown step {step!r}: open:URL or eval:JS")
    finally:
        try:  # let it end its own helper processes
            call("Browser.close", {})
            proc.wait(timeout=10)
        except Exception:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
