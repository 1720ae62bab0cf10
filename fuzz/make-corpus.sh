#!/usr/bin/env bash
# Regenerate the checked-in seed corpora (fuzz/corpus/<target>/) from the repository's fixtures
# and a few files made here with the real tools (zip via Python, GNU tar, gzip, zstd, xz,
# dpkg-deb and rpmbuild through tests/fixtures/native/build.sh). Small on purpose: a few files
# per target, well under a megabyte in all.
set -euo pipefail
cd "$(dirname "$0")/.."
out=fuzz/corpus
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$out"
mkdir -p "$out"/{wheel,core_metadata,deb,rpm,sdist,artifact_manifest,artifact_extract,names_versions,lambda_event,package_json,topology,token,jwt,elf_rpath,elf_search_path,mirror_page}

# Wheels and zip sdists (Python's zipfile, as pip's tools write them).
python3 - "$out" <<'PY'
import io, sys, zipfile
out = sys.argv[1]
md = b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\nRequires-Python: >=3.8\n\nLong description.\n"
def zipped(members, method=zipfile.ZIP_DEFLATED):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z:
        for name, data in members:
            z.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), data)
    return buf.getvalue()
open(f"{out}/wheel/demo.whl", "wb").write(zipped([("demo/__init__.py", b""), ("demo-1.0.dist-info/METADATA", md), ("demo-1.0.dist-info/RECORD", b"")]))
open(f"{out}/wheel/stored.whl", "wb").write(zipped([("demo-1.0.dist-info/METADATA", md)], zipfile.ZIP_STORED))
open(f"{out}/core_metadata/metadata", "wb").write(md)
open(f"{out}/core_metadata/pkg-info", "wb").write(b"Metadata-Version: 1.0\nName: Foo.Bar\nVersion: 2.0rc1\nSummary: x\n")
# sdist seeds: first byte 1 selects the zip form (the name is pkg-1.0.zip).
open(f"{out}/sdist/zip", "wb").write(b"\x01" + zipped([("pkg-1.0/PKG-INFO", b"Name: pkg\nVersion: 1.0\n"), ("pkg-1.0/setup.py", b"")]))
PY

# tar.gz sdist by GNU tar (first byte 0: pkg-1.0.tar.gz).
mkdir -p "$work/s/pkg-1.0"
printf 'Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n' > "$work/s/pkg-1.0/PKG-INFO"
: > "$work/s/pkg-1.0/setup.py"
ln -s setup.py "$work/s/pkg-1.0/link"
{ printf '\0'; tar --owner=0 --group=0 --mtime=@0 -C "$work/s" -cf - pkg-1.0 | gzip -9n; } > "$out/sdist/targz"

# An OIDC token, its key set and discovery document (openssl keys and signatures), each behind
# the byte that selects it.
python3 bench/oidc_issuer.py make "$work/oidc" https://token.actions.githubusercontent.com quarry 12345
{ printf '\0'; cat "$work/oidc/token.jwt"; } > "$out/jwt/token"
{ printf '\1'; cat "$work/oidc/.well-known/jwks"; } > "$out/jwt/jwks"
{ printf '\2'; cat "$work/oidc/.well-known/openid-configuration"; } > "$out/jwt/discovery"

# .deb and .rpm from the native fixtures (dpkg-deb, rpmbuild).
tests/fixtures/native/build.sh "$work/native" > /dev/null
cp "$(ls -S "$work"/native/deb/*.deb | tail -1)" "$out/deb/small.deb"
cp "$(ls -S "$work"/native/deb/quarry-hello_1.0-1_*.deb | head -1)" "$out/deb/hello.deb"
cp "$(ls -S "$work"/native/rpm/*.rpm | tail -1)" "$out/rpm/small.rpm"
printf 'Package: hello\nVersion: 1.0-1\nArchitecture: all\nDescription: x\n\tmore\n' > "$out/deb/control-text"

# Artifact archives: manifest first, then the root it names (first byte: 0 zstd, 1 xz; the
# extract target also reads the mode from bits 1-2).
mkdir -p "$work/a/lib/bin"
printf 'lib\n' > "$work/a/artifact_manifest.txt"
printf 'hello\n' > "$work/a/lib/bin/tool"
ln -s tool "$work/a/lib/bin/alias"
tar --owner=0 --group=0 --mtime=@0 -C "$work/a" -cf "$work/a.tar" artifact_manifest.txt lib
for t in artifact_manifest artifact_extract; do
  { printf '\0'; zstd -q -c "$work/a.tar"; } > "$out/$t/zstd"
  { printf '\1'; xz -c "$work/a.tar"; } > "$out/$t/xz"
done
{ printf '\2'; zstd -q -c "$work/a.tar"; } > "$out/artifact_extract/zstd-bootstrap"
{ printf '\4'; zstd -q -c "$work/a.tar"; } > "$out/artifact_extract/zstd-flatten"

# Names and versions (two inputs split at a NUL).
printf 'numpy-2.1.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl\0rocm-7.10.0rc20251124.tar.gz' > "$out/names_versions/files"
printf '1:7.10.0~dev20251124-1\0007.10.0-12345678901' > "$out/names_versions/deb"
printf '1.0.post1.dev3+local.7\0!1.0a1' > "$out/names_versions/pep440"
printf '2:1.0^git1-3.el9\0001.0~rc1-1' > "$out/names_versions/evr"
printf 'blas_lib_gfx942.tar.zst\0core-runtime_dev_generic' > "$out/names_versions/artifact"

cp lambda-indexer/tests/events/*.json "$out/lambda_event/"
python3 - packaging/data/therock/package.json "$out/package_json/therock-head.json" <<'PY'
import json, sys
packages = json.load(open(sys.argv[1]))
json.dump(packages[:4] if isinstance(packages, list) else packages, open(sys.argv[2], "w"), indent=1)
PY
cp tests/fixtures/pipeline/BUILD_TOPOLOGY.toml "$out/topology/pipeline.toml"
cp topology/data/BUILD_TOPOLOGY.toml "$out/topology/therock.toml"
# A tiny shared library with a RUNPATH (cc -Wl,--enable-new-dtags), stripped.
printf 'int f(void) { return 1; }\n' > "$work/f.c"
cc -shared -fPIC -nostdlib -s -o "$out/elf_rpath/runpath.so" "$work/f.c" -Wl,--enable-new-dtags -Wl,-rpath,'$ORIGIN/../lib'
# elf_search_path: a byte picking the path (0x81: RPATH, one more entry: a new segment; 0x00: a
# RUNPATH shorter than the old one: in place), then the file: the library above, and one
# without a search path (a spare dynamic slot).
cc -shared -fPIC -nostdlib -s -o "$work/none.so" "$work/f.c"
{ printf '\x81'; cat "$out/elf_rpath/runpath.so"; } > "$out/elf_search_path/grow"
{ printf '\x00'; cat "$out/elf_rpath/runpath.so"; } > "$out/elf_search_path/in-place"
{ printf '\x81'; cat "$work/none.so"; } > "$out/elf_search_path/none"
printf '# tokens\ns3cret 123-linux /124-linux/ # ci\nadmin\n\n' > "$out/token/tokens"

# mirror_page: project pages as upstreams serve them (PEP 503 HTML as PyPI and pip's tests
# write it, PEP 691 JSON with PEP 700 fields, an HTML page in odd but legal spellings).
cat > "$out/mirror_page/pypi.html" <<'HTML'
<!DOCTYPE html>
<html>
  <head>
    <meta name="pypi:repository-version" content="1.1">
    <title>Links for numpy</title>
  </head>
  <body>
    <h1>Links for numpy</h1>
    <a href="https://files.example/packages/ab/cd/numpy-2.1.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl#sha256=0c7ba28e9e2bd9f5b6d5b8a1f3c4e5d6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2" data-requires-python="&gt;=3.10" data-dist-info-metadata="sha256=5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f" data-core-metadata="sha256=5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f" >numpy-2.1.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl</a><br />
    <a href="https://files.example/packages/ef/01/numpy-2.1.0.tar.gz#sha256=7056b10f4e3c8a4e1ee5e5d3b4f5c6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3" data-requires-python="&gt;=3.10" data-yanked="" >numpy-2.1.0.tar.gz</a><br />
  </body>
</html>
<!--SERIAL 25000000-->
HTML
cat > "$out/mirror_page/pep691.json" <<'JSON'
{"meta":{"api-version":"1.1","_last-serial":25000000},"name":"foo-bar","versions":["1.0","2.0rc1"],
 "files":[
  {"filename":"foo_bar-1.0-py3-none-any.whl","url":"../../packages/foo_bar-1.0-py3-none-any.whl","hashes":{"sha256":"AB12CD34EF56AB12CD34EF56AB12CD34EF56AB12CD34EF56AB12CD34EF56AB12"},"requires-python":">=3.8","core-metadata":{"sha256":"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"},"size":10240,"upload-time":"2026-01-02T03:04:05.123456Z","yanked":false},
  {"filename":"foo_bar-1.0.tar.gz","url":"https://files.example/foo_bar-1.0.tar.gz#md5=00","hashes":{"md5":"00"},"dist-info-metadata":true,"size":2048,"yanked":"broken build"},
  {"filename":"foo_bar-2.0rc1-py3-none-any.whl","url":"/files/foo_bar-2.0rc1-py3-none-any.whl","hashes":{},"core-metadata":false}
 ]}
JSON
cat > "$out/mirror_page/odd.html" <<'HTML'
<HTML><BODY>
<A HREF='../../files/foo-1.0-py3-none-any.whl#sha256=AbCd' DATA-CORE-METADATA=true data-upload-time=2026-01-02T03:04:05Z>foo&#45;1.0&#x2d;py3-none-any.whl</A>
<a	href=/files/foo-1.0.tar.gz#sha256=ef data-dist-info-metadata>
<a href="foo-0.9.zip">  </a><abbr>not a link</abbr><a name="x">no href</a>
<a href="http://[::1]:8080/f-1.whl#sha256=00" data-core-metadata="sha256=FF">f&amp;1</a
HTML
du -sh "$out"
