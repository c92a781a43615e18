#!/usr/bin/env python3
"""A recording proxy between the OpenClaw bridge and a clawctx gateway, on loopback.

Usage: engine_proxy.py TARGET_URL LOG_FILE  -- prints "listening <port>" on stdout, then forwards
every request to TARGET_URL (same method, path, headers and body) until killed. Each request
writes two JSON lines to LOG_FILE: when it arrives {"id", "phase": "start", "method", "path",
"start"}, and once answered {"id", "phase": "end", "method", "path", "start", "end" (epoch
seconds), "status", "body" (the request's JSON, or null)}. A test reads it to see what the
bridge sent (ingestBatch's messages) and when each engine call ran (a call still running has
only its start line).
"""
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TARGET = sys.argv[1].rstrip("/")
LOG = sys.argv[2]
LOCK = threading.Lock()
NEXT = [0]
HOP = {"host", "content-length", "connection", "transfer-encoding", "keep-alive"}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def log(self, line):
        with LOCK:
            with open(LOG, "a") as f:
                f.write(json.dumps(line) + "\n")

    def forward(self):
        start = time.time()
        with LOCK:
            NEXT[0] += 1
            rid = NEXT[0]
        self.log({"id": rid, "phase": "start", "method": self.command, "path": self.path, "start": start})
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        req = urllib.request.Request(TARGET + self.path, data=raw, headers=headers, method=self.command)
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                status, ctype, data = r.status, r.headers.get("content-type", ""), r.read()
        except urllib.error.HTTPError as e:
            status, ctype, data = e.code, e.headers.get("content-type", ""), e.read()
        except OSError as e:
            status, ctype = 502, "application/json"
            data = json.dumps({"error": {"message": "proxy: %s" % e}}).encode()
        self.send_response(status)
        if ctype:
            self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        self.log({"id": rid, "phase": "end", "method": self.command, "path": self.path,
                  "start": start, "end": time.time(), "status": status, "body": body})

    do_GET = forward
    do_POST = forward


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print("listening %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
