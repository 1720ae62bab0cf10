import cf from 'cloudfront';

// Quarry's CloudFront Function (runtime cloudfront-js-2.0), associated with the distribution's
// viewer-request and viewer-response events. The bucket holds static files only; this maps the
// URLs pip, uv, apt, dnf and browsers ask for onto them:
//
// - a directory URL (`…/python/`, `…/simple/torch/`) serves that directory's `index.html`;
// - under a PEP 503 `simple/` tree, a client that prefers PEP 691 JSON
//   (`Accept: application/vnd.pypi.simple.v1+json`, or `?format=` with that type) gets the
//   `index.json` the indexer writes beside each `index.html`;
// - `…/simple/torch` (no slash) is redirected to `…/simple/torch/`, as PyPI does;
// - every negotiated page carries `Vary: Accept` on the way out, so caches below the CDN keep
//   the two representations apart (the CDN's own cache key is the rewritten URI);
// - a page under a channel with versions is read from the channel's current version: the
//   associated KeyValueStore maps the channel's prefix (`/nightly/`, the bucket key's) to its
//   current version N, and `/nightly/python/simple/x/index.html` becomes
//   `/nightly/.versions/N/python/simple/x/index.html` (`quarry channel rollback` prints the key
//   and value to write; package files are never rewritten). One KVS write switches the edge.
//
// The same source is embedded in infra/template.yaml (tests/cdn.rs checks they are identical)
// and is run under node by tests/cdn.rs in front of an S3 server.

var JSON_TYPES = ['application/vnd.pypi.simple.v1+json', 'application/vnd.pypi.simple.latest+json', 'application/*'];
var HTML_TYPES = ['application/vnd.pypi.simple.v1+html', 'application/vnd.pypi.simple.latest+html', 'text/html', 'text/*', '*/*'];

// The quality (0-1000) of the best range in `accept` among `types`, or -1 when none names one.
function quality(accept, types) {
  var best = -1;
  var ranges = accept.split(',');
  for (var i = 0; i < ranges.length; i++) {
    var parts = ranges[i].split(';');
    var media = parts[0].trim().toLowerCase();
    if (types.indexOf(media) < 0) {
      continue;
    }
    var q = 1000;
    for (var j = 1; j < parts.length; j++) {
      var kv = parts[j].split('=');
      if (kv.length === 2 && kv[0].trim().toLowerCase() === 'q') {
        var value = parseFloat(kv[1].trim());
        q = isNaN(value) ? 0 : Math.round(Math.min(Math.max(value, 0), 1) * 1000);
      }
    }
    if (q > best) {
      best = q;
    }
  }
  return best;
}

// Whether the client asks for PEP 691 JSON over HTML (JSON wins ties, as `quarry serve`).
function wantsJson(request) {
  var format = request.querystring.format;
  if (format && format.value) {
    return quality(decodeURIComponent(format.value), JSON_TYPES) > 0;
  }
  var accept = request.headers.accept;
  if (!accept || !accept.value.trim()) {
    return false;
  }
  var json = quality(accept.value, JSON_TYPES);
  return json > 0 && json >= quality(accept.value, HTML_TYPES);
}

function inSimpleTree(uri) {
  return uri.indexOf('/simple/') >= 0;
}

// Names of package files and sidecars: served where they are, never from a version.
var PACKAGE_SUFFIXES = ['.whl', '.tar.gz', '.zip', '.tar.bz2', '.tgz', '.deb', '.rpm', '.metadata', '.yanked', '.sha256sum'];
// Deepest channel prefix looked up (each level is one KVS lookup).
var MAX_CHANNEL_DEPTH = 6;

function isPage(uri) {
  var name = uri.substring(uri.lastIndexOf('/') + 1).toLowerCase();
  if (uri.indexOf('/.') >= 0) {
    return false;
  }
  for (var i = 0; i < PACKAGE_SUFFIXES.length; i++) {
    var suffix = PACKAGE_SUFFIXES[i];
    if (name.length >= suffix.length && name.substring(name.length - suffix.length) === suffix) {
      return false;
    }
  }
  return true;
}

// The request with a channel page's URI moved to the channel's current version.
async function versioned(request) {
  var uri = request.uri;
  if (!isPage(uri)) {
    return request;
  }
  var kvs = cf.kvs();
  var end = 0;
  for (var depth = 0; depth < MAX_CHANNEL_DEPTH; depth++) {
    var slash = uri.indexOf('/', end + 1);
    if (slash < 0) {
      break;
    }
    end = slash;
    var prefix = uri.substring(0, end + 1);
    if (await kvs.exists(prefix)) {
      var n = String(await kvs.get(prefix)).trim();
      if (/^[0-9]+$/.test(n)) {
        request.uri = prefix + '.versions/' + n + '/' + uri.substring(end + 1);
      }
      return request;
    }
  }
  return request;
}

function onRequest(event) {
  var request = event.request;
  var uri = request.uri;
  if (uri.charAt(uri.length - 1) === '/') {
    request.uri = uri + (inSimpleTree(uri) && wantsJson(request) ? 'index.json' : 'index.html');
    return request;
  }
  var last = uri.substring(uri.lastIndexOf('/') + 1);
  if (inSimpleTree(uri + '/') && last.indexOf('.') < 0) {
    var query = [];
    for (var name in request.querystring) {
      query.push(name + '=' + request.querystring[name].value);
    }
    return {
      statusCode: 301,
      statusDescription: 'Moved Permanently',
      headers: { location: { value: uri + '/' + (query.length ? '?' + query.join('&') : '') } },
    };
  }
  return request;
}

function onResponse(event) {
  var response = event.response;
  var type = response.headers['content-type'];
  var page = type && (type.value.indexOf('text/html') === 0 || type.value.indexOf('application/vnd.pypi.simple') === 0);
  if (page) {
    response.headers.vary = { value: 'Accept' };
  }
  return response;
}

// The URI rewrites and redirects, without the version lookup.
function rewrite(event) {
  return event.context.eventType === 'viewer-response' ? onResponse(event) : onRequest(event);
}

async function handler(event) {
  var done = rewrite(event);
  if (event.context.eventType === 'viewer-response' || done.statusCode) {
    return done;
  }
  return versioned(done);
}
