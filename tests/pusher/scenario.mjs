// Real Pusher clients against a running corecast, for tests/pusher_js.rs.
// Usage: node scenario.mjs MODE   (env: CORECAST_ADDR=host:port, APP_ID,
// APP_KEY, APP_SECRET; CORECAST_ADDR2: a second instance, Redis mode, that
// some clients of the presence and channels_across scenarios use). Prints one JSON object per line for what the
// clients saw; the Rust test asserts on them. Exits 0 when the scenario
// finished, 1 on a timeout (the test's deadline covers the rest).
import PusherJs from 'pusher-js';
import Pusher from 'pusher';
import Echo from 'laravel-echo';

const [host, port] = process.env.CORECAST_ADDR.split(':');
const first = [host, port];
const second = process.env.CORECAST_ADDR2 ? process.env.CORECAST_ADDR2.split(':') : first;
const appId = process.env.APP_ID;
const key = process.env.APP_KEY;
const secret = process.env.APP_SECRET;
const mode = process.argv[2];

const say = (o) => console.log(JSON.stringify(o));
const sdk = (s = secret) =>
  new Pusher({ appId, key, secret: s, host, port, useTLS: false });

// A client whose channel authorization is signed by the server SDK's
// authorizeChannel (what an app's auth endpoint does); `signer` can be an
// SDK with a wrong secret.
function client(name, { signer = sdk(), user, me, at = first } = {}) {
  const c = new PusherJs(key, {
    cluster: 'corecast',
    wsHost: at[0],
    wsPort: Number(at[1]),
    forceTLS: false,
    enabledTransports: ['ws'],
    disableStats: true,
    userAuthentication: {
      customHandler: ({ socketId }, cb) => cb(null, signer.authenticateUser(socketId, me)),
    },
    channelAuthorization: {
      customHandler: ({ socketId, channelName }, cb) => {
        const data = user ? { user_id: user, user_info: { name: user } } : undefined;
        cb(null, signer.authorizeChannel(socketId, channelName, data));
      },
    },
  });
  c.connection.bind('error', (e) =>
    say({ client: name, kind: 'error', code: e?.data?.code ?? null }));
  c.connection.bind('connected', () =>
    say({ client: name, kind: 'connected', socket_id: c.connection.socket_id }));
  c.bind_global((event, data) => {
    if (!event.startsWith('pusher:') && !event.startsWith('pusher_internal:')) {
      say({ client: name, kind: 'event', event, data });
    }
  });
  return c;
}

function subscribe(c, name, channel) {
  return new Promise((resolve) => {
    const ch = c.subscribe(channel);
    ch.bind('pusher:subscription_succeeded', (data) => {
      say({ client: name, kind: 'subscribed', channel, members: data?.count });
      resolve(ch);
    });
    ch.bind('pusher:subscription_error', (err) => {
      say({ client: name, kind: 'subscription_error', channel, status: err.status });
      resolve(null);
    });
  });
}

function next(ch, event) {
  return new Promise((resolve) => ch.bind(event, resolve));
}

const scenarios = {
  // Public and private channels; an event triggered with the server SDK.
  async events() {
    const a = client('a');
    const pub = await subscribe(a, 'a', 'news');
    const priv = await subscribe(a, 'a', 'private-room');
    const got = Promise.all([next(pub, 'greet'), next(priv, 'greet')]);
    await sdk().trigger(['news', 'private-room'], 'greet', { hi: 1 });
    await got;
    a.disconnect();
  },
  // A private channel signed with the wrong secret is refused.
  async bad_signature() {
    const a = client('a', { signer: sdk('not-the-secret') });
    await subscribe(a, 'a', 'private-room');
    a.disconnect();
  },
};

async function stat(name, [h, p] = first) {
  const r = await fetch(`http://${h}:${p}/stats`);
  return (await r.json())[name];
}

// A counter summed over the instances in use.
async function total(name) {
  const one = await stat(name, first);
  return second === first ? one : one + (await stat(name, second));
}

async function until(name, value) {
  while ((await total(name)) !== value) {
    await new Promise((r) => setTimeout(r, 10));
  }
}

Object.assign(scenarios, {
  // Client events between two clients: delivered to the other one,
  // never echoed to the sender.
  async client_events() {
    const a = client('a');
    const b = client('b');
    const cha = await subscribe(a, 'a', 'private-chat');
    const chb = await subscribe(b, 'b', 'private-chat');
    const typing = next(chb, 'client-typing');
    cha.trigger('client-typing', { who: 'a' });
    await typing;
    // b's reply reaches a after a's own event would have.
    const reply = next(cha, 'client-reply');
    chb.trigger('client-reply', { who: 'b' });
    await reply;
    a.disconnect();
    b.disconnect();
  },
  // Presence: bob's second connection adds nobody; only his last one
  // leaving removes him.
  async presence() {
    const a = client('a', { user: 'alice' });
    const cha = await subscribe(a, 'a', 'presence-room');
    cha.bind('pusher:member_added', (m) =>
      say({ client: 'a', kind: 'member_added', user: m.id, info: m.info }));
    cha.bind('pusher:member_removed', (m) =>
      say({ client: 'a', kind: 'member_removed', user: m.id }));
    const added = next(cha, 'pusher:member_added');
    const b = client('b', { user: 'bob', at: second });
    await subscribe(b, 'b', 'presence-room');
    await added;
    const b2 = client('b2', { user: 'bob', at: second });
    await subscribe(b2, 'b2', 'presence-room');
    b2.disconnect();
    await until('pusher_connections', 2);
    const removed = next(cha, 'pusher:member_removed');
    b.disconnect();
    await removed;
    say({ client: 'a', kind: 'members', count: cha.members.count });
    a.disconnect();
  },
});

Object.assign(scenarios, {
  // Channel state across instances (Redis mode): a pusher-js client on
  // the second instance; the server SDK asks the first for the app's
  // channels (polling until Redis has them: the deadline is the test's).
  async channels_across() {
    const b = client('b', { at: second });
    await subscribe(b, 'b', 'news');
    const b2 = client('b2', { at: second });
    await subscribe(b2, 'b2', 'news');
    const ask = async (path, params) => (await sdk().get({ path, params })).json();
    let listed = {};
    while (!listed.news) {
      listed = (await ask('/channels', {})).channels;
    }
    say({ client: 'sdk', kind: 'channels', channels: listed });
    let info = {};
    while (info.subscription_count !== 2) {
      info = await ask('/channels/news', { info: 'subscription_count' });
    }
    say({ client: 'sdk', kind: 'channel', info });
    b.disconnect();
    b2.disconnect();
  },
});

Object.assign(scenarios, {
  // Laravel Echo's pusher broadcaster on a private channel, as a Laravel
  // app configures it, with the event broadcast through the SDK.
  async echo() {
    const echo = new Echo({
      broadcaster: 'pusher',
      Pusher: PusherJs,
      key,
      cluster: 'corecast',
      wsHost: host,
      wsPort: Number(port),
      forceTLS: false,
      enabledTransports: ['ws'],
      disableStats: true,
      channelAuthorization: {
        customHandler: ({ socketId, channelName }, cb) =>
          cb(null, sdk().authorizeChannel(socketId, channelName)),
      },
    });
    const got = new Promise((resolve) => {
      echo
        .private('orders.1')
        .subscribed(async () => {
          say({ client: 'echo', kind: 'subscribed', channel: 'private-orders.1' });
          await sdk().trigger('private-orders.1', 'App\\Events\\OrderShipped', { id: 1 });
        })
        .listen('OrderShipped', (e) => {
          say({ client: 'echo', kind: 'event', event: 'OrderShipped', data: e });
          resolve();
        });
    });
    await got;
    echo.disconnect();
  },
});

Object.assign(scenarios, {
  // User authentication: signin, then an event sent to the user with the
  // SDK's sendToUser arrives on the user's own channel.
  async signin() {
    const a = client('a', { me: { id: 'u1', name: 'Ann' } });
    a.signin();
    while (!a.user.serverToUserChannel?.subscribed) {
      await new Promise((r) => setTimeout(r, 10));
    }
    say({ client: 'a', kind: 'signed_in', user: a.user.user_data.id });
    const got = new Promise((resolve) => a.user.bind('hello', resolve));
    await sdk().sendToUser('u1', 'hello', { x: 1 });
    say({ client: 'a', kind: 'user_event', data: await got });
    a.disconnect();
  },
  // A signin signed with the wrong secret: pusher:error 4009.
  async bad_signin() {
    const a = client('a', { me: { id: 'u1' }, signer: sdk('not-the-secret') });
    const refused = new Promise((resolve) =>
      a.connection.bind('error', (e) => e?.data?.code === 4009 && resolve()));
    a.signin();
    await refused;
    a.disconnect();
  },
});

Object.assign(scenarios, {
  // Webhooks, checked with the server SDK's webhook(...).isValid(): a
  // receiver on WEBHOOK_PORT answers the first request 500 (corecast
  // retries it) and prints every event; presence, a client event and
  // leaving produce them; done at channel_vacated.
  async webhooks() {
    const http = await import('node:http');
    let requests = 0;
    let vacated;
    const allVacated = new Promise((r) => { vacated = r; });
    const server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (d) => { body += d; });
      req.on('end', () => {
        requests += 1;
        const wh = sdk().webhook({ headers: req.headers, rawBody: body });
        const forged = sdk('not-the-secret').webhook({ headers: req.headers, rawBody: body });
        if (requests === 1) {
          say({ kind: 'webhook_refused', valid: wh.isValid() });
          res.writeHead(500).end();
          return;
        }
        for (const e of wh.getEvents()) {
          say({ kind: 'webhook', valid: wh.isValid(), forged_valid: forged.isValid(), ...e });
          if (e.name === 'channel_vacated') vacated();
        }
        res.writeHead(200).end('{}');
      });
    });
    await new Promise((r) => server.listen(Number(process.env.WEBHOOK_PORT), '127.0.0.1', r));
    const a = client('a', { user: 'alice' });
    const cha = await subscribe(a, 'a', 'presence-room');
    const b = client('b', { user: 'bob' });
    const chb = await subscribe(b, 'b', 'presence-room');
    const typing = next(chb, 'client-typing');
    cha.trigger('client-typing', { who: 'a' });
    await typing;
    b.disconnect();
    await until('pusher_connections', 1);
    a.disconnect();
    await allVacated;
    server.close();
  },
});

Object.assign(scenarios, {
  // corecast closes a silent connection with 4201 (run with a short
  // --idle-timeout and no keepalive): pusher-js reconnects at once,
  // subscribes again and gets the next event.
  async reconnect() {
    const a = client('a');
    let connects = 0;
    let again;
    const reconnected = new Promise((r) => { again = r; });
    a.connection.bind('connected', () => { connects += 1; if (connects === 2) again(); });
    const ch = await subscribe(a, 'a', 'news');
    const resubscribed = new Promise((r) => ch.bind('pusher:subscription_succeeded', r));
    await reconnected;
    await resubscribed;
    say({ client: 'a', kind: 'resubscribed' });
    const got = next(ch, 'after');
    await sdk().trigger('news', 'after', { n: 2 });
    await got;
    a.disconnect();
  },
});

const timer = setTimeout(() => {
  say({ kind: 'timeout' });
  process.exit(1);
}, 15000);
await scenarios[mode]();
say({ kind: 'done' });
clearTimeout(timer);
process.exit(0);
