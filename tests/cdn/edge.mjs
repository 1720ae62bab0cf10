// A stand-in for one CloudFront edge, for tests/cdn.rs: an HTTP server on loopback that runs
// infra/cloudfront/index-router.js exactly as CloudFront runs a cloudfront-js-2.0 function
// (viewer-request before the origin, viewer-response after it, the event shapes of the
// CloudFront Functions event structure) and forwards to an S3 origin (path-style bucket URL).
//
// usage: node edge.mjs FUNCTION_JS ORIGIN_URL PORT_FILE [KVS_FILE | KVS_URL]
// Listens on a free loopback port, writes it to PORT_FILE, logs one line per request
// (`METHOD uri -> rewritten-uri status`) on stdout.
import fs from 'node:fs';
import http from 'node:http';
import vm from 'node:vm';

const [functionPath, origin, portFile, kvsFile] = process.argv.slice(2);
// The function imports CloudFront's `cloudfront` module; the stand-in serves the KeyValueStore
// from KVS_FILE (a JSON object, read again on each lookup; none: an empty store), or from a
// KeyValueStore's data plane at KVS_URL (`http://…/key-value-stores/ARN`: a GetKey per lookup).
const source = fs.readFileSync(functionPath, 'utf8').replace(/^import cf from 'cloudfront';$/m, '');
const remote = kvsFile !== undefined && /^https?:\/\//.test(kvsFile);
const lookup = async (key) => {
  if (remote) {
    const response = await fetch(`${kvsFile}/keys/${encodeURIComponent(key)}`);
    if (response.status === 404) return undefined;
    if (!response.ok) throw new Error(`GetKey ${key}: ${response.status} ${await response.text()}`);
    return (await response.json()).Value;
  }
  const all = kvsFile && fs.existsSync(kvsFile) ? JSON.parse(fs.readFileSync(kvsFile, 'utf8')) : {};
  return Object.hasOwn(all, key) ? all[key] : undefined;
};
const cf = {
  kvs: () => ({
    exists: async (key) => (await lookup(key)) !== undefined,
    get: async (key) => {
      const value = await lookup(key);
      if (value === undefined) throw new Error(`no key ${key}`);
      return value;
    },
  }),
};
// The function's file is a script with a global `handler`, as CloudFront loads it.
const handler = vm.runInNewContext(`${source}\n;handler`, { cf }, { filename: functionPath });

function eventHeaders(raw) {
  const headers = {};
  for (const [name, value] of Object.entries(raw)) {
    headers[name.toLowerCase()] = { value: Array.isArray(value) ? value.join(',') : String(value) };
  }
  return headers;
}

function viewerRequest(req) {
  const url = new URL(req.url, 'http://edge');
  const querystring = {};
  for (const [name, value] of url.searchParams) {
    querystring[name] = { value };
  }
  return {
    version: '1.0',
    context: { eventType: 'viewer-request', distributionDomainName: 'edge.test' },
    viewer: { ip: '127.0.0.1' },
    request: { method: req.method, uri: url.pathname, querystring, headers: eventHeaders(req.headers), cookies: {} },
  };
}

function send(res, statusCode, statusDescription, headers, body) {
  const out = {};
  for (const [name, { value }] of Object.entries(headers)) {
    out[name] = value;
  }
  res.writeHead(statusCode, statusDescription, out);
  res.end(body);
}

const server = http.createServer(async (req, res) => {
  try {
    const event = viewerRequest(req);
    const asked = event.request.uri;
    const result = await handler(event);
    if (result.statusCode) {
      console.log(`${req.method} ${asked} -> ${result.statusCode}`);
      send(res, result.statusCode, result.statusDescription, result.headers || {}, '');
      return;
    }
    // CloudFront forwards no query string to an S3 origin (the default cache policy).
    const upstream = await fetch(origin + result.uri, { method: req.method });
    const body = Buffer.from(await upstream.arrayBuffer());
    const headers = {};
    for (const name of ['content-type', 'cache-control', 'etag', 'last-modified', 'content-length']) {
      const value = upstream.headers.get(name);
      if (value !== null) {
        headers[name] = { value };
      }
    }
    const response = await handler({
      version: '1.0',
      context: { eventType: 'viewer-response', distributionDomainName: 'edge.test' },
      viewer: { ip: '127.0.0.1' },
      request: result,
      response: { statusCode: upstream.status, statusDescription: upstream.statusText, headers, cookies: {} },
    });
    console.log(`${req.method} ${asked} -> ${result.uri} ${response.statusCode}`);
    send(res, response.statusCode, response.statusDescription, response.headers, req.method === 'HEAD' ? '' : body);
  } catch (err) {
    console.log(`${req.method} ${req.url} -> error ${err}`);
    res.writeHead(502);
    res.end(String(err));
  }
});

server.listen(0, '127.0.0.1', () => {
  fs.writeFileSync(portFile, String(server.address().port));
});
