// The reference architecture of the published evaluation, written as the
// paper describes it, speaking corecast's path-mode contract so
// `corecast-bench paper --baseline node` drives it exactly like corecast:
//
//   GET  /ws/{channel}      WebSocket subscribed to {channel}; each message
//                           it sends goes to every subscriber, sender
//                           included, same opcode
//   POST /publish/{channel} body delivered as a text message; 200
//   GET  /healthz           200 ok
//   GET  /api/{path}        (C3) cache-aside through Redis: GET the key,
//                           on a miss fetch ORIGIN/{path}, SET it with
//                           CACHE_TTL seconds, answer
//
// Setups (environment):
//   C1  PORT only: in-process broadcast loop over the channel's clients
//   C2  + REDIS_URL: every message is PUBLISHed to Redis (ioredis); each
//       instance SUBSCRIBEs to the channels its clients use and broadcasts
//       what arrives
//   C3  + ORIGIN: the Redis-cached HTTP API above
//
// One process, one event loop: the reference ran one Node.js process per
// instance on a 1 vCPU VPS.
'use strict';

const http = require('http');
const { WebSocketServer } = require('ws');

const PORT = Number(process.env.PORT || 8080);
const HOST = process.env.HOST || '127.0.0.1';
const REDIS_URL = process.env.REDIS_URL || '';
const ORIGIN = process.env.ORIGIN || '';
const CACHE_TTL = Number(process.env.CACHE_TTL || 60);
const PREFIX = 'ref:';

// channel -> Set of WebSocket clients
const channels = new Map();

let pub = null;
let sub = null;
let cache = null;
if (REDIS_URL) {
  const Redis = require('ioredis');
  pub = new Redis(REDIS_URL);
  sub = new Redis(REDIS_URL);
  cache = pub;
  sub.on('messageBuffer', (chan, message) => {
    const name = chan.toString().slice(PREFIX.length);
    // The first byte says text (t) or binary (b).
    const binary = message[0] === 0x62;
    broadcast(name, message.subarray(1), binary);
  });
}

function broadcast(channel, data, binary) {
  const clients = channels.get(channel);
  if (!clients) return;
  for (const ws of clients) {
    if (ws.readyState === 1) ws.send(data, { binary });
  }
}

function publish(channel, data, binary) {
  if (pub) {
    const head = Buffer.from(binary ? 'b' : 't');
    pub.publish(PREFIX + channel, Buffer.concat([head, data]));
  } else {
    broadcast(channel, data, binary);
  }
}

function join(channel, ws) {
  let set = channels.get(channel);
  if (!set) {
    set = new Set();
    channels.set(channel, set);
    if (sub) sub.subscribe(PREFIX + channel);
  }
  set.add(ws);
}

function leave(channel, ws) {
  const set = channels.get(channel);
  if (!set) return;
  set.delete(ws);
  if (set.size === 0) {
    channels.delete(channel);
    if (sub) sub.unsubscribe(PREFIX + channel);
  }
}

function readBody(req, cb) {
  const parts = [];
  req.on('data', (c) => parts.push(c));
  req.on('end', () => cb(Buffer.concat(parts)));
}

function fetchOrigin(path, cb) {
  http
    .get(ORIGIN + path, (res) => {
      readBody(res, (body) => cb(null, res.statusCode, body));
    })
    .on('error', (e) => cb(e));
}

function cachedApi(path, res) {
  const key = PREFIX + 'api:' + path;
  cache.getBuffer(key, (err, hit) => {
    if (!err && hit) {
      res.writeHead(200, { 'Content-Type': 'application/json', 'X-Cache': 'hit' });
      res.end(hit);
      return;
    }
    fetchOrigin(path, (e, status, body) => {
      if (e) {
        res.writeHead(502);
        res.end();
        return;
      }
      if (status === 200) cache.set(key, body, 'EX', CACHE_TTL);
      res.writeHead(status, { 'Content-Type': 'application/json', 'X-Cache': 'miss' });
      res.end(body);
    });
  });
}

const server = http.createServer((req, res) => {
  const url = req.url;
  if (req.method === 'GET' && url === '/healthz') {
    res.end('ok');
  } else if (req.method === 'POST' && url.startsWith('/publish/')) {
    const channel = url.slice('/publish/'.length);
    readBody(req, (body) => {
      publish(channel, body, false);
      res.end();
    });
  } else if (req.method === 'GET' && url.startsWith('/api/') && ORIGIN && cache) {
    cachedApi(url.slice('/api'.length), res);
  } else {
    res.writeHead(404);
    res.end();
  }
});

const wss = new WebSocketServer({ noServer: true, perMessageDeflate: false, maxPayload: 16 << 20 });

server.on('upgrade', (req, socket, head) => {
  if (!req.url.startsWith('/ws/')) {
    socket.destroy();
    return;
  }
  const channel = req.url.slice('/ws/'.length);
  wss.handleUpgrade(req, socket, head, (ws) => {
    join(channel, ws);
    ws.on('message', (data, isBinary) => publish(channel, data, isBinary));
    ws.on('close', () => leave(channel, ws));
    ws.on('error', () => leave(channel, ws));
  });
});

server.listen(PORT, HOST, () => {
  console.log(`reference-node listening on ${HOST}:${server.address().port}`);
});

process.on('SIGTERM', () => process.exit(0));
