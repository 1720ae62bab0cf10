// Unit tests of infra/cloudfront/index-router.js (node --test), run by tests/cdn.rs.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import test from 'node:test';
import vm from 'node:vm';

const file = path.join(import.meta.dirname, '../../infra/cloudfront/index-router.js');
// CloudFront supplies the `cloudfront` module; here a stand-in KeyValueStore (`kvs`, a plain
// object) takes its place, and `handler` is the rewrite without the version lookup.
const kvs = {};
const cf = {
  kvs: () => ({
    exists: async (key) => Object.hasOwn(kvs, key),
    get: async (key) => {
      if (!Object.hasOwn(kvs, key)) throw new Error(`no key ${key}`);
      return kvs[key];
    },
  }),
};
const source = fs.readFileSync(file, 'utf8').replace(/^import cf from 'cloudfront';$/m, '');
const [handler, versionedHandler] = vm.runInNewContext(`${source}\n;[rewrite, handler]`, { cf });

function request(uri, accept, querystring = {}) {
  const headers = accept === undefined ? {} : { accept: { value: accept } };
  return handler({ context: { eventType: 'viewer-request' }, request: { method: 'GET', uri, querystring, headers, cookies: {} } });
}

const PIP = 'application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html; q=0.1, text/html; q=0.01';

test('directory URLs serve index.html', () => {
  assert.equal(request('/1-linux/python/').uri, '/1-linux/python/index.html');
  assert.equal(request('/1-linux/').uri, '/1-linux/index.html');
  assert.equal(request('/').uri, '/index.html');
  // JSON is negotiated only where the indexer writes index.json: simple trees.
  assert.equal(request('/1-linux/python/', PIP).uri, '/1-linux/python/index.html');
});

test('simple pages negotiate PEP 691 JSON', () => {
  assert.equal(request('/1-linux/python/simple/torch/', PIP).uri, '/1-linux/python/simple/torch/index.json');
  assert.equal(request('/1-linux/python/simple/', PIP).uri, '/1-linux/python/simple/index.json');
  assert.equal(request('/1-linux/python/simple/torch/').uri, '/1-linux/python/simple/torch/index.html');
  assert.equal(request('/1-linux/python/simple/torch/', 'text/html').uri, '/1-linux/python/simple/torch/index.html');
  assert.equal(request('/1-linux/python/simple/torch/', '*/*').uri, '/1-linux/python/simple/torch/index.html');
  assert.equal(request('/1-linux/python/simple/torch/', '  ').uri, '/1-linux/python/simple/torch/index.html');
  // An explicit preference for HTML, or JSON refused with q=0, keeps HTML.
  assert.equal(
    request('/r/simple/torch/', 'application/vnd.pypi.simple.v1+json;q=0.1, text/html').uri,
    '/r/simple/torch/index.html',
  );
  assert.equal(request('/r/simple/torch/', 'application/vnd.pypi.simple.v1+json;q=0').uri, '/r/simple/torch/index.html');
  assert.equal(request('/r/simple/torch/', 'application/vnd.pypi.simple.latest+json').uri, '/r/simple/torch/index.json');
  assert.equal(request('/r/simple/torch/', 'APPLICATION/VND.PYPI.SIMPLE.V1+JSON').uri, '/r/simple/torch/index.json');
  // PEP 691's format query parameter wins over Accept.
  const format = { format: { value: 'application%2Fvnd.pypi.simple.v1%2Bjson' } };
  assert.equal(request('/r/simple/torch/', 'text/html', format).uri, '/r/simple/torch/index.json');
});

test('simple project URLs without a slash redirect', () => {
  const r = request('/1-linux/python/simple/torch', PIP);
  assert.equal(r.statusCode, 301);
  assert.equal(r.headers.location.value, '/1-linux/python/simple/torch/');
  assert.equal(request('/1-linux/python/simple').headers.location.value, '/1-linux/python/simple/');
  const q = request('/r/simple/torch', undefined, { format: { value: 'x' } });
  assert.equal(q.headers.location.value, '/r/simple/torch/?format=x');
});

test('files pass through unchanged', () => {
  for (const uri of [
    '/1-linux/python/torch-2.9.1-py3-none-any.whl',
    '/1-linux/python/simple/torch/index.json',
    '/1-linux/packages/deb/dists/stable/Release',
    '/1-linux/packages/rpm/x86_64/repodata/repomd.xml',
    '/1-linux/logs/build',
  ]) {
    assert.equal(request(uri, PIP).uri, uri);
  }
});

test('pages vary on Accept, files do not', () => {
  const respond = (type) =>
    handler({
      context: { eventType: 'viewer-response' },
      request: { uri: '/x', headers: {}, querystring: {} },
      response: { statusCode: 200, headers: { 'content-type': { value: type } } },
    }).headers.vary?.value;
  assert.equal(respond('text/html; charset=utf-8'), 'Accept');
  assert.equal(respond('application/vnd.pypi.simple.v1+json'), 'Accept');
  assert.equal(respond('application/octet-stream'), undefined);
});

test('a channel page is read from the current version the KeyValueStore names', async () => {
  const ask = (uri) =>
    versionedHandler({
      context: { eventType: 'viewer-request' },
      request: { method: 'GET', uri, querystring: {}, headers: {}, cookies: {} },
    });
  assert.equal((await ask('/ci/nightly/python/simple/x/')).uri, '/ci/nightly/python/simple/x/index.html');
  kvs['/ci/nightly/'] = '3';
  assert.equal((await ask('/ci/nightly/python/simple/x/')).uri, '/ci/nightly/.versions/3/python/simple/x/index.html');
  assert.equal((await ask('/ci/nightly/packages/deb/dists/stable/InRelease')).uri, '/ci/nightly/.versions/3/packages/deb/dists/stable/InRelease');
  // Package files, sidecars and the versions themselves are never rewritten.
  for (const uri of ['/ci/nightly/python/x-1.0-py3-none-any.whl', '/ci/nightly/python/x-1.0-py3-none-any.whl.metadata', '/ci/nightly/packages/deb/pool/main/x_1.0_amd64.deb', '/ci/nightly/.versions/2/python/index.html']) {
    assert.equal((await ask(uri)).uri, uri);
  }
  // Another channel, a value that is no version: as they are.
  assert.equal((await ask('/ci/weekly/python/')).uri, '/ci/weekly/python/index.html');
  kvs['/ci/nightly/'] = 'x';
  assert.equal((await ask('/ci/nightly/python/')).uri, '/ci/nightly/python/index.html');
  delete kvs['/ci/nightly/'];
});
