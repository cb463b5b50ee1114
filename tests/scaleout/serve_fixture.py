"""A real `pagedserve serve` for the scale-out tests: started on a free port, stopped with
SIGTERM (its drain), plus small HTTP helpers and a background load of completion requests.

Reads PAGEDSERVE_BINARY and PAGEDSERVE_SHARED_DIR from the environment (ctest sets both)."""

import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

BINARY = os.environ.get("PAGEDSERVE_BINARY", "build/bin/pagedserve")
SHARED = os.environ.get("PAGEDSERVE_SHARED_DIR", "../shared")
STORIES = os.path.join(SHARED, "models", "stories260K")


class Server:
    def __init__(self, *flags):
        self.proc = subprocess.Popen(
            [BINARY, "serve", "--model", STORIES, "--port", "0", "--log-interval", "0", *flags],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.port = None
        deadline = time.monotonic() + 60
        while self.port is None:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError(f"serve exited (code {self.proc.wait()}) before listening")
            match = re.search(r"on https?://[^ ]*:(\d+)", line)
            if match:
                self.port = int(match.group(1))
            if time.monotonic() > deadline:
                raise RuntimeError("serve did not report its port within 60 s")
        # Keep reading its log so a full pipe never blocks the server.
        self.log_reader = threading.Thread(target=self.proc.stderr.read, daemon=True)
        self.log_reader.start()
        self.base = f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        self.log_reader.join(timeout=10)  # EOF once the server is gone
        self.proc.stderr.close()
        if code != 0:
            raise RuntimeError(f"serve exited with {code} after SIGTERM")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.stop()

    def request(self, method, path, body=None, timeout=60):
        """(status, body text) of one request; HTTP errors are returned, not raised."""
        data = None if body is None else (body if isinstance(body, str) else json.dumps(body))
        req = urllib.request.Request(self.base + path, method=method,
                                     data=None if data is None else data.encode())
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def post_json(self, path, body):
        status, text = self.request("POST", path, body)
        return status, json.loads(text)

    def metrics_text(self):
        status, text = self.request("GET", "/metrics")
        assert status == 200, status
        return text


class Load:
    """`clients` threads, each sending `per_client` completion requests back to back."""

    def __init__(self, server, clients=12, per_client=6, max_tokens=200):
        self.errors = []
        self.done = 0
        self.lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._client, args=(server, c, per_client, max_tokens))
            for c in range(clients)
        ]

    def _client(self, server, client, count, max_tokens):
        for i in range(count):
            prompt = "Once upon a time " + " ".join(["the little cat"] * (1 + (client + i) % 9))
            body = {"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
                    "temperature": 0}
            status, text = server.request("POST", "/v1/completions", body, timeout=300)
            with self.lock:
                if status != 200:
                    self.errors.append((status, text[:200]))
                self.done += 1

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def running(self):
        return any(t.is_alive() for t in self.threads)

    def __exit__(self, *exc):
        for t in self.threads:
            t.join()
