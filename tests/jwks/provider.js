// A small identity provider for tests/jwks.rs: it publishes a JWKS at
// /jwks.json (RSA keys made by Node's crypto) and signs tokens with them,
// so the server under test checks signatures made by an implementation
// independent of its own. It prints `PORT n` once listening.
//
// Control (never counted as fetches):
//   GET /control/sign?kid=K&claims=JSON  a token signed RS256 by key K (default: newest)
//   GET /control/rotate                  a new key; the oldest is removed; answers the new kid
//   GET /control/mode?m=M                how /jwks.json answers from now on:
//     ok | down (connection reset) | error (503) | slow (answers after 5 s) |
//     huge (a 300 KiB set) | malformed (not JSON) | many (33 usable keys) |
//     rotating (a new key, the old removed, every second from now on)
//   GET /control/fetches                 how many times /jwks.json was asked for
const crypto = require('crypto');
const http = require('http');

let serial = 0;
let keys = [];
let mode = 'ok';
let fetches = 0;
let rotating = null;

function newKey() {
  const kid = 'k' + serial++;
  const { privateKey, publicKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  const jwk = Object.assign(publicKey.export({ format: 'jwk' }), { kid, use: 'sig', alg: 'RS256' });
  return { kid, privateKey, jwk };
}

function rotate() {
  keys.push(newKey());
  if (keys.length > 1) keys.shift();
  return keys[keys.length - 1].kid;
}

function sign(kid, claims) {
  const key = kid ? keys.find((k) => k.kid === kid) : keys[keys.length - 1];
  if (!key) return null;
  const b64 = (s) => Buffer.from(s).toString('base64url');
  const signed = b64(JSON.stringify({ alg: 'RS256', typ: 'JWT', kid: key.kid })) + '.' + b64(claims);
  return signed + '.' + crypto.sign('sha256', Buffer.from(signed), key.privateKey).toString('base64url');
}

function set() {
  switch (mode) {
    case 'huge':
      return JSON.stringify({ keys: keys.map((k) => k.jwk), padding: 'x'.repeat(300 * 1024) });
    case 'malformed':
      return '<html>this is not a key set';
    case 'many': {
      const many = [];
      for (let i = 0; i < 33; i++) many.push(Object.assign({}, keys[0].jwk, { kid: 'many' + i }));
      return JSON.stringify({ keys: many });
    }
    default:
      return JSON.stringify({ keys: keys.map((k) => k.jwk) });
  }
}

function send(res, status, body) {
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

function jwks(req, res) {
  fetches++;
  if (mode === 'down') return req.socket.destroy();
  if (mode === 'error') return send(res, 503, '{"error":"unavailable"}');
  if (mode === 'slow') return setTimeout(() => send(res, 200, set()), 5000);
  send(res, 200, set());
}

function control(url, res) {
  const q = url.searchParams;
  switch (url.pathname) {
    case '/control/sign': {
      const t = sign(q.get('kid'), q.get('claims'));
      return t ? send(res, 200, t) : send(res, 404, 'no such key');
    }
    case '/control/rotate':
      return send(res, 200, rotate());
    case '/control/mode':
      mode = q.get('m');
      if (mode === 'rotating' && !rotating) rotating = setInterval(rotate, 1000);
      return send(res, 200, mode);
    case '/control/fetches':
      return send(res, 200, String(fetches));
    default:
      return send(res, 404, 'unknown');
  }
}

rotate();
http
  .createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    if (url.pathname === '/jwks.json') return jwks(req, res);
    control(url, res);
  })
  .listen(0, '127.0.0.1', function () {
    process.stdout.write('PORT ' + this.address().port + '\n');
  });
