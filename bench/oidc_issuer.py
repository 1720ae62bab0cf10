#!/usr/bin/env python3
"""A stand-in OIDC issuer for the trusted publishing benchmark and the fuzz seeds, with openssl
for the RSA key and the RS256 signatures (no Python JWT library needed).

  oidc_issuer.py serve DIR          # serve DIR/.well-known/* on 127.0.0.1, print the URL
  oidc_issuer.py make DIR ISSUER AUDIENCE RUN_ID
      # a 2048-bit key in DIR, DIR/.well-known/{openid-configuration,jwks} naming ISSUER, and
      # DIR/token.jwt: GitHub's claims for ROCm/TheRock release.yml on main, run RUN_ID, valid
      # for an hour, for AUDIENCE
"""
import base64, http.server, json, os, subprocess, sys, time


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make(out, issuer, audience, run_id):
    wk = os.path.join(out, ".well-known")
    os.makedirs(wk, exist_ok=True)
    key = os.path.join(out, "key.pem")
    subprocess.run(["openssl", "genrsa", "-out", key, "2048"], check=True, capture_output=True)
    modulus = subprocess.run(["openssl", "rsa", "-in", key, "-noout", "-modulus"], check=True,
                             capture_output=True, text=True).stdout.strip().split("=", 1)[1]
    jwk = {"kty": "RSA", "use": "sig", "alg": "RS256", "kid": "bench-1",
           "n": b64(bytes.fromhex(modulus)), "e": b64((65537).to_bytes(3, "big"))}
    json.dump({"keys": [jwk]}, open(os.path.join(wk, "jwks"), "w"))
    json.dump({"issuer": issuer, "jwks_uri": f"{issuer}/.well-known/jwks"},
              open(os.path.join(wk, "openid-configuration"), "w"))
    now = int(time.time())
    ref = "ROCm/TheRock/.github/workflows/release.yml@refs/heads/main"
    claims = {"iss": issuer, "aud": audience, "iat": now, "nbf": now, "exp": now + 3600,
              "sub": "repo:ROCm/TheRock:ref:refs/heads/main", "repository": "ROCm/TheRock",
              "repository_owner": "ROCm", "job_workflow_ref": ref, "workflow_ref": ref,
              "ref": "refs/heads/main", "run_id": str(run_id), "run_attempt": "1", "actor": "bench"}
    head = b64(json.dumps({"alg": "RS256", "typ": "JWT", "kid": "bench-1"}).encode())
    body = b64(json.dumps(claims).encode())
    signing_input = f"{head}.{body}".encode()
    sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", key], input=signing_input,
                         check=True, capture_output=True).stdout
    open(os.path.join(out, "token.jwt"), "w").write(f"{head}.{body}.{b64(sig)}")


def serve(root):
    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=root, **kw)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2])
    elif sys.argv[1:2] == ["make"]:
        make(*sys.argv[2:6])
    else:
        sys.exit(__doc__)
