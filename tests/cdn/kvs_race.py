"""A loopback proxy in front of a KeyValueStore data plane (ministack) that races the client:
before forwarding a PutKey it writes another key itself, so the ETag the client read is stale.

usage: python kvs_race.py UPSTREAM PORT_FILE LOG_FILE RACES
Races the first RACES PutKeys (then forwards untouched); logs one line per forwarded request
(`METHOD path status`). Standard library only.
"""

import http.server
import json
import sys
import urllib.error
import urllib.request

upstream, port_file, log_file, races = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
raced = 0


def call(method, path, headers=None, body=None):
    request = urllib.request.Request(upstream + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


class Proxy(http.server.BaseHTTPRequestHandler):
    def forward(self):
        global raced
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else None
        if self.command == "PUT" and "/keys/" in self.path and raced < races:
            raced += 1
            store = self.path.split("/keys/")[0]
            _, headers, _ = call("GET", store)
            etag = headers.get("ETag") or headers.get("etag")
            value = json.dumps({"Value": str(raced)}).encode()
            call("PUT", f"{store}/keys/%2Fracer%2F", {"If-Match": etag, "Content-Type": "application/json"}, value)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
        status, out_headers, out = call(self.command, self.path, headers, body)
        with open(log_file, "a") as log:
            log.write(f"{self.command} {self.path} {status}\n")
        self.send_response(status)
        for name, value in out_headers.items():
            if name.lower() not in ("content-length", "transfer-encoding", "connection", "server", "date"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_PUT = do_POST = do_DELETE = forward

    def log_message(self, *args):
        pass


server = http.server.HTTPServer(("127.0.0.1", 0), Proxy)
with open(port_file, "w") as f:
    f.write(str(server.server_address[1]))
server.serve_forever()
