import { backoffDelay } from "./backoff.js";
import { Emitter } from "./emitter.js";
import { CorecastError } from "./errors.js";
import {
  closeVerdict,
  dataMembers,
  frameData,
  parseFrame,
  publishMembers,
  refusalVerdict,
  type Data,
  type PresenceSnapshot,
  type PublishOptions,
  type ServerFrame,
} from "./protocol.js";
import { resolveOptions, type Bounds, type ClientOptions, type Transport, type WebSocketConstructor, type WebSocketLike } from "./options.js";
import { getJson, httpBase, postPublish, upgradeRefusal, withToken } from "./http.js";
import { eventId, parseEventId, SseStream } from "./sse.js";
import { Subscription, type HistoryPage, type SubscribeOptions } from "./subscription.js";
import { refreshDelay, tokenExp } from "./token.js";

/** `connected`. */
export interface ConnectedEvent {
  transport: Transport;
}

/** `disconnected`: after a connection ended, or when the client stops trying. */
export interface DisconnectedEvent {
  code: number;
  reason: string;
  /** False when the client will not reconnect by itself. */
  reconnect: boolean;
}

/** `reconnecting`: a retry is scheduled after `delay` ms. */
export interface ReconnectingEvent {
  attempt: number;
  delay: number;
  code: number;
  reason: string;
  transport: Transport;
}

/** The events of a [`Client`]. */
export interface ClientEvents {
  connected: ConnectedEvent;
  disconnected: DisconnectedEvent;
  reconnecting: ReconnectingEvent;
  error: CorecastError;
}

interface Pending {
  resolve(f: ServerFrame): void;
  reject(e: CorecastError): void;
  timer: ReturnType<typeof setTimeout>;
  /** Subscribes are re-sent after a reconnect, so a lost reply is no failure. */
  subscribe: boolean;
}

interface QueuedPublish {
  channel: string;
  data: Data;
  opts: PublishOptions;
  resolve(r: { subscribers: number }): void;
  reject(e: CorecastError): void;
}

type Verdict = "reconnect" | "new-token" | "stop";

const PROBE_ID = "corecast-client-probe";

/**
 * A corecast connection speaking the JSON control protocol, which
 * reconnects by itself and restores every subscription from its last
 * delivered position. See the package README.
 */
export class Client extends Emitter<ClientEvents> {
  /** `connecting` also while waiting to reconnect. */
  state: "disconnected" | "connecting" | "connected" = "disconnected";
  /** The transport in use (or tried next). */
  transport: Transport;
  /** Liveness probes sent on silent connections, and answers received. */
  readonly probes = { sent: 0, answered: 0 };
  private readonly o: Bounds;
  private readonly subs = new Map<string, Subscription>();
  private readonly pending = new Map<number, Pending>();
  private readonly queue: QueuedPublish[] = [];
  private readonly sse = new Map<string, SseStream>();
  private readonly sseOpen = new Set<string>();
  private ws: WebSocketLike | undefined;
  private gen = 0;
  private wanted = false;
  private attempt = 0;
  private everOpened = false;
  private failures = 0;
  private nextId = 1;
  private lastSeen = 0;
  private probeAt = 0;
  private refusal: number | undefined;
  private cachedToken: string | undefined;
  private tokenFresh = false;
  private attemptToken: string | undefined;
  private timers: Record<"reconnect" | "idle" | "refresh" | "drain" | "connect", ReturnType<typeof setTimeout> | undefined> = {
    reconnect: undefined,
    idle: undefined,
    refresh: undefined,
    drain: undefined,
    connect: undefined,
  };

  constructor(
    readonly url: string,
    private readonly options: ClientOptions = {},
  ) {
    super();
    this.o = resolveOptions(options);
    if (this.o.transports.length === 0) throw new Error("transports must name at least one transport");
    this.transport = this.o.transports[0];
  }

  /** Connects (and keeps reconnecting) until `disconnect()`. */
  connect(): void {
    if (this.wanted) return;
    this.wanted = true;
    this.attempt = 0;
    void this.open();
  }

  /** Closes the connection and stops reconnecting; subscriptions are kept for a later `connect()`. */
  disconnect(): void {
    this.wanted = false;
    if (this.state === "disconnected") return;
    this.lost(1000, "client disconnect", "stop");
  }

  /** The subscription to `channel` (one per channel: a second call returns the first). */
  subscribe(channel: string, opts: SubscribeOptions = {}): Subscription {
    const known = this.subs.get(channel);
    if (known) return known;
    const sub = new Subscription(channel, this.host, opts);
    this.subs.set(channel, sub);
    if (this.state === "connected") this.startSubscription(sub);
    return sub;
  }

  /** The subscriptions, by channel. */
  subscriptions(): Map<string, Subscription> {
    return new Map(this.subs);
  }

  /**
   * Publishes `data` (a string: text; bytes: binary) and resolves with the
   * server's count of local subscribers. Waits in a bounded queue while
   * disconnected; a publish whose reply is lost with the connection fails
   * with `disconnected` and is not resent (it may or may not have been
   * published). `opts`: the message's `tags` (for subscribers' filters)
   * and latest-value `key`.
   */
  publish(channel: string, data: Data, opts: PublishOptions = {}): Promise<{ subscribers: number }> {
    return new Promise((resolve, reject) => {
      if (this.queue.length >= this.o.maxQueuedPublishes) {
        reject(new CorecastError("queue_full", `${this.o.maxQueuedPublishes} publishes already queued`));
        return;
      }
      this.queue.push({ channel, data, opts, resolve, reject });
      this.drain();
    });
  }

  /**
   * Calls the application backend's RPC hook (corecast `--proxy-rpc`):
   * resolves with the `data` of its answer; rejects with the backend's
   * refusal (`code` "refused") or `unavailable` when it is down. Needs
   * the WebSocket transport.
   */
  async rpc(method: string, data: unknown = null): Promise<unknown> {
    await this.whenConnected();
    if (this.transport === "sse") {
      throw new CorecastError("unsupported", "rpc needs the WebSocket transport");
    }
    const f = await this.request({ op: "rpc", method, data });
    return (f as { data?: unknown }).data;
  }

  // The narrow interface subscriptions call back through.
  private readonly host = {
    presence: (channel: string) => this.presence(channel),
    history: (channel: string, opts: { limit?: number; since?: number }) => this.history(channel, opts),
    unsubscribe: (sub: Subscription) => this.unsubscribe(sub),
  };

  private async presence(channel: string): Promise<PresenceSnapshot> {
    await this.whenConnected();
    const f =
      this.transport === "sse"
        ? await this.httpJson(`/presence/${encodeURIComponent(channel)}`)
        : await this.request({ op: "presence", channel });
    return { channel, members: f.members ?? [], count: f.count ?? 0 };
  }

  private async history(channel: string, opts: { limit?: number; since?: number }): Promise<HistoryPage> {
    const q = new URLSearchParams();
    if (opts.since !== undefined) q.set("since", String(opts.since));
    if (opts.limit !== undefined) q.set("limit", String(opts.limit));
    const body = (await this.httpJson(`/history/${encodeURIComponent(channel)}?${q}`)) as unknown as {
      epoch: string | null;
      offset: number;
      messages: { offset: number; data?: string; data_base64?: string }[];
    };
    const epoch = body.epoch ?? undefined;
    const messages = body.messages.map((m) => ({ channel, data: frameData(m), offset: m.offset, epoch }));
    return { channel, epoch: body.epoch, offset: body.offset, messages };
  }

  private async unsubscribe(sub: Subscription): Promise<void> {
    if (this.subs.get(sub.channel) !== sub) return;
    this.subs.delete(sub.channel);
    this.sse.get(sub.channel)?.abort();
    this.sse.delete(sub.channel);
    this.sseOpen.delete(sub.channel);
    if (this.state === "connected" && this.ws) {
      try {
        await this.request({ op: "unsubscribe", channel: sub.channel });
      } catch {
        // Gone with the connection: unsubscribed all the same.
      }
    }
    sub.end();
  }

  // ---- connecting ------------------------------------------------------

  private async open(): Promise<void> {
    this.state = "connecting";
    const gen = ++this.gen;
    let token: string | undefined;
    try {
      token = await this.tokenForConnect();
    } catch (e) {
      if (gen !== this.gen) return;
      const err = e instanceof CorecastError ? e : new CorecastError("token", `token callback failed: ${String(e)}`);
      this.emit("error", err);
      return this.lost(4001, err.message, err.code === "closed" ? "stop" : "reconnect");
    }
    if (gen !== this.gen || !this.wanted) return;
    this.timers.connect = setTimeout(() => this.failed(1006, "connect timeout", "reconnect"), this.o.connectTimeout);
    if (this.transport === "sse") return this.openSse(gen);
    this.openWebSocket(gen, token);
  }

  private openWebSocket(gen: number, token: string | undefined): void {
    const WS = this.options.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (!WS) {
      this.emit("error", new CorecastError("closed", "no WebSocket implementation: pass the WebSocket option (e.g. the ws package)"));
      return this.lost(1006, "no WebSocket implementation", "stop");
    }
    let ws: WebSocketLike;
    try {
      ws = new WS(withToken(this.url, token));
    } catch (e) {
      this.emit("error", new CorecastError("closed", `cannot open ${this.url}: ${String(e)}`));
      return this.lost(1006, "invalid URL", "stop");
    }
    this.ws = ws;
    this.refusal = undefined;
    this.attemptToken = token;
    ws.binaryType = "arraybuffer";
    ws.onopen = () => gen === this.gen && this.opened();
    ws.onmessage = (ev: { data: unknown }) => gen === this.gen && this.onText(ev.data);
    ws.onerror = (ev: { message?: unknown }) => {
      // `ws` reports a refused upgrade as "Unexpected server response: 401";
      // browsers do not tell the status at all.
      const m = /Unexpected server response: (\d{3})/.exec(String(ev?.message ?? ""));
      if (gen === this.gen && m) this.refusal = Number(m[1]);
    };
    ws.onclose = (ev: { code: number; reason: string }) => gen === this.gen && this.closed(ev.code, ev.reason);
  }

  private async tokenForConnect(): Promise<string | undefined> {
    const src = this.options.token;
    this.tokenFresh = false;
    if (src === undefined) return undefined;
    if (typeof src === "string") {
      const exp = tokenExp(src);
      if (exp !== undefined && exp * 1000 <= Date.now()) {
        throw new CorecastError("closed", "the token has expired and there is no token callback to renew it");
      }
      return src;
    }
    const cached = this.usableCachedToken();
    if (cached) return cached;
    this.cachedToken = await src();
    this.tokenFresh = true;
    return this.cachedToken;
  }

  /** The token for an HTTP request (history, presence, SSE). */
  private async currentToken(): Promise<string | undefined> {
    const src = this.options.token;
    if (typeof src !== "function") return src;
    this.cachedToken = this.usableCachedToken() ?? (await src());
    return this.cachedToken;
  }

  /** The callback's last token, unless it expires within a second. */
  private usableCachedToken(): string | undefined {
    const exp = this.cachedToken ? tokenExp(this.cachedToken) : undefined;
    return exp === undefined || exp * 1000 - Date.now() > 1000 ? this.cachedToken : undefined;
  }

  private opened(): void {
    clearTimeout(this.timers.connect);
    this.state = "connected";
    this.attempt = 0;
    this.failures = 0;
    this.everOpened = true;
    this.lastSeen = Date.now();
    this.probeAt = 0;
    // Over SSE the streams are the subscriptions, already open.
    if (this.transport === "websocket") for (const sub of this.subs.values()) this.startSubscription(sub);
    this.emit("connected", { transport: this.transport });
    this.drain();
    this.armIdle();
    this.armRefresh();
  }

  /** A WebSocket closed (before or after it opened). */
  private closed(code: number, reason: string): void {
    if (this.state === "connected") return this.lost(code, reason, closeVerdict(code, reason));
    if (this.refusal === undefined) {
      void this.probeRefusal(this.gen, code, reason);
      return;
    }
    let v = refusalVerdict(this.refusal);
    // A token just fetched from the callback was refused: asking again
    // would loop; the application must look.
    if (v === "new-token" && (this.tokenFresh || typeof this.options.token !== "function")) v = "stop";
    return this.failed(code, `upgrade refused: HTTP ${this.refusal}`, v);
  }

  /** Learns why an upgrade failed, where the WebSocket implementation did not say. */
  private async probeRefusal(gen: number, code: number, reason: string): Promise<void> {
    const fetchFn = this.options.fetch ?? globalThis.fetch;
    if (fetchFn) this.refusal = await upgradeRefusal(fetchFn, this.url, this.attemptToken);
    if (gen !== this.gen) return;
    if (this.refusal !== undefined) return this.closed(code, reason);
    this.failed(code, reason || "connection failed", "reconnect");
  }

  /** A connect attempt failed: count it towards the transport fallback. */
  private failed(code: number, reason: string, v: Verdict): void {
    this.failures++;
    const next = this.o.transports[(this.o.transports.indexOf(this.transport) + 1) % this.o.transports.length];
    if (!this.everOpened && this.failures >= this.o.fallbackAfter && next !== this.transport) {
      // A network that never let this transport through (a proxy that
      // strips Upgrade): try the next one.
      this.transport = next;
      this.failures = 0;
      this.attempt = 0;
    }
    this.lost(code, reason, v);
  }

  /** Tears the connection down and decides whether and when to come back. */
  private lost(code: number, reason: string, verdict: Verdict): void {
    const wasConnected = this.state === "connected";
    this.teardown();
    if (verdict === "new-token") {
      if (typeof this.options.token === "function") {
        this.cachedToken = undefined;
        verdict = "reconnect";
      } else {
        verdict = "stop";
      }
    }
    const reconnect = this.wanted && verdict === "reconnect";
    if (!reconnect) {
      this.wanted = false;
      this.state = "disconnected";
      for (const q of this.queue.splice(0)) q.reject(new CorecastError("closed", `not connected: ${reason}`));
      if (verdict === "stop" && code !== 1000) this.emit("error", new CorecastError("closed", `not reconnecting: ${code} ${reason}`));
    } else {
      this.state = "connecting";
    }
    if (wasConnected || !reconnect) this.emit("disconnected", { code, reason, reconnect });
    if (reconnect) this.scheduleReconnect(code, reason);
  }

  private scheduleReconnect(code: number, reason: string): void {
    const attempt = this.attempt++;
    const delay = backoffDelay(attempt, this.o, this.o.random);
    this.emit("reconnecting", { attempt, delay, code, reason, transport: this.transport });
    this.timers.reconnect = setTimeout(() => void this.open(), delay);
  }

  private teardown(): void {
    this.gen++;
    for (const t of Object.values(this.timers)) clearTimeout(t);
    const ws = this.ws;
    this.ws = undefined;
    if (ws) {
      ws.onopen = ws.onmessage = ws.onclose = null;
      // Not null: `ws` (Node) reports closing a socket that is still
      // connecting as an error event, and throws it when nobody listens.
      ws.onerror = () => {};
      try {
        ws.close(1000, "client disconnect");
      } catch {
        // Already closing.
      }
    }
    for (const s of this.sse.values()) s.abort();
    this.sse.clear();
    this.sseOpen.clear();
    for (const sub of this.subs.values()) sub.detach();
    for (const [id, p] of this.pending) {
      clearTimeout(p.timer);
      this.pending.delete(id);
      if (!p.subscribe) p.reject(new CorecastError("disconnected", "the connection was lost before the reply"));
    }
  }

  // ---- frames ----------------------------------------------------------

  private onText(data: unknown): void {
    this.lastSeen = Date.now();
    if (typeof data !== "string") return;
    const f = parseFrame(data);
    if (!f) {
      this.emit("error", new CorecastError("bad_frame", `not a protocol frame: ${data.slice(0, 80)}`));
      return;
    }
    if (f.id === PROBE_ID) {
      this.probes.answered++;
      return;
    }
    if (typeof f.channel === "string" && !["error", "published", "presence"].includes(f.type)) {
      this.subs.get(f.channel)?.handle(f);
    }
    if (typeof f.id === "number" && this.pending.has(f.id)) return this.settle(f.id, f);
    if (f.type === "error") this.emit("error", new CorecastError(f.code ?? "error", f.message ?? "server error"));
  }

  private settle(id: number, f: ServerFrame): void {
    const p = this.pending.get(id);
    if (!p) return;
    this.pending.delete(id);
    clearTimeout(p.timer);
    if (f.type === "error") p.reject(new CorecastError(f.code ?? "error", f.message ?? "server error"));
    else p.resolve(f);
    this.drain();
  }

  /** Sends a request with an id and resolves with its reply. */
  private request(req: Record<string, unknown>, subscribe = false): Promise<ServerFrame> {
    return new Promise((resolve, reject) => {
      const ws = this.ws;
      if (this.state !== "connected" || !ws) {
        reject(new CorecastError("disconnected", "not connected"));
        return;
      }
      if (!subscribe && this.pending.size >= this.o.maxPendingRequests) {
        reject(new CorecastError("queue_full", `${this.o.maxPendingRequests} requests already awaiting a reply`));
        return;
      }
      const id = this.nextId++;
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new CorecastError("timeout", `no reply to ${String(req.op)} within ${this.o.requestTimeout} ms`));
      }, this.o.requestTimeout);
      this.pending.set(id, { resolve, reject, timer, subscribe });
      ws.send(JSON.stringify({ ...req, id }));
    });
  }

  private startSubscription(sub: Subscription): void {
    if (this.transport === "sse") return this.openSseStream(sub, this.gen);
    const gen = this.gen;
    this.request(sub.subscribeRequest(), true).catch((err: CorecastError) => {
      if (err.code === "disconnected") return;
      sub.fail(err);
      if (err.code === "unavailable" || err.code === "timeout") {
        // Redis unreachable (or slow) for now: ask again after a while on
        // this connection (and at every reconnect anyway).
        setTimeout(() => {
          if (gen === this.gen && this.subs.get(sub.channel) === sub && sub.state === "pending") this.startSubscription(sub);
        }, backoffDelay(2, this.o, this.o.random));
        return;
      }
      if (this.subs.get(sub.channel) === sub) this.subs.delete(sub.channel);
      sub.end();
    });
  }

  private drain(): void {
    if (this.state !== "connected" || this.timers.drain !== undefined) return;
    while (this.queue.length > 0) {
      if (this.transport === "sse") {
        const q = this.queue.shift() as QueuedPublish;
        this.httpPublish(q).then(q.resolve, q.reject);
        continue;
      }
      const ws = this.ws;
      if (!ws || this.pending.size >= this.o.maxPendingRequests) return;
      if (ws.bufferedAmount > this.o.maxBufferedAmount) {
        // The socket's buffer is full: look again shortly.
        this.timers.drain = setTimeout(() => {
          this.timers.drain = undefined;
          this.drain();
        }, 20);
        return;
      }
      const q = this.queue.shift() as QueuedPublish;
      this.request({ op: "publish", channel: q.channel, ...dataMembers(q.data), ...publishMembers(q.opts) }).then(
        (f) => q.resolve({ subscribers: f.subscribers ?? 0 }),
        q.reject,
      );
    }
  }

  // ---- liveness and token refresh -------------------------------------

  private armIdle(): void {
    const { pingInterval, pongTimeout } = this.o;
    if (pingInterval <= 0) return;
    const gen = this.gen;
    const tick = Math.max(10, Math.min(pingInterval, pongTimeout) / 2);
    this.timers.idle = setTimeout(() => {
      if (gen !== this.gen) return;
      if (this.idleCheck()) this.armIdle();
    }, tick);
  }

  /** Probes a silent connection; false when it was given up. */
  private idleCheck(): boolean {
    const now = Date.now();
    if (this.probeAt > 0 && this.lastSeen >= this.probeAt) this.probeAt = 0;
    if (this.probeAt > 0 && now - this.probeAt >= this.o.pongTimeout) {
      this.lost(1006, `no answer within ${this.o.pongTimeout} ms`, "reconnect");
      return false;
    }
    if (this.probeAt === 0 && now - this.lastSeen >= this.o.pingInterval) {
      this.probeAt = now;
      if (this.transport === "websocket") {
        // The server has no ping op: it answers an unknown one with a
        // bad_request error that echoes the id, which is all we need.
        this.ws?.send(JSON.stringify({ op: "ping", id: PROBE_ID }));
        this.probes.sent++;
      }
    }
    return true;
  }

  private armRefresh(): void {
    const src = this.options.token;
    const exp = this.cachedToken ? tokenExp(this.cachedToken) : undefined;
    if (typeof src !== "function" || exp === undefined || this.transport !== "websocket") return;
    const gen = this.gen;
    this.timers.refresh = setTimeout(() => void this.refresh(gen, src), refreshDelay(exp, Date.now(), this.o.refreshBefore));
  }

  private async refresh(gen: number, src: () => Promise<string>): Promise<void> {
    try {
      const token = await src();
      if (gen !== this.gen) return;
      await this.request({ op: "refresh", token });
      this.cachedToken = token;
      this.armRefresh();
    } catch (e) {
      // The server keeps the old deadline; at exp it closes with 4001 and
      // the client reconnects with a token from the callback.
      if (gen === this.gen) this.emit("error", e instanceof CorecastError ? e : new CorecastError("token", String(e)));
    }
  }

  // ---- HTTP and SSE ----------------------------------------------------

  private whenConnected(): Promise<void> {
    if (this.state === "connected") return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.off("connected", on);
        reject(new CorecastError("disconnected", "not connected"));
      }, this.o.requestTimeout);
      const on = () => {
        clearTimeout(timer);
        this.off("connected", on);
        resolve();
      };
      this.on("connected", on);
    });
  }

  private fetchFn(): typeof fetch {
    const f = this.options.fetch ?? globalThis.fetch;
    if (!f) throw new CorecastError("http", "no fetch implementation");
    return f;
  }

  /** The HTTP API's base URL (`httpUrl`, or derived from the WebSocket URL). */
  httpBase(): string {
    return httpBase(this.url, this.options.httpUrl);
  }

  private async authHeaders(): Promise<Record<string, string>> {
    const token = await this.currentToken();
    return token ? { Authorization: `Bearer ${token}` } : {};
  }

  private async httpJson(path: string): Promise<ServerFrame> {
    return getJson(this.fetchFn(), this.httpBase() + path, await this.authHeaders());
  }

  private httpPublish(q: QueuedPublish): Promise<{ subscribers: number }> {
    return postPublish(this.fetchFn(), this.httpBase(), q.channel, q.data, this.options.publishKey, q.opts);
  }

  /** SSE "connection": one stream per subscription; connected when all are open. */
  private openSse(gen: number): void {
    if (this.subs.size === 0) return this.opened();
    for (const sub of this.subs.values()) this.openSseStream(sub, gen);
  }

  private openSseStream(sub: Subscription, gen: number): void {
    void this.authHeaders().then((auth) => {
      if (gen !== this.gen || this.subs.get(sub.channel) !== sub) return;
      const headers: Record<string, string> = { Accept: "text/event-stream", ...auth };
      const at = sub.position();
      sub.beginSubscribe();
      if (at) headers["Last-Event-ID"] = eventId(sub.channel, at);
      const c = encodeURIComponent(sub.channel);
      const filter = sub.filterParam();
      const url = `${this.httpBase()}/sse?channel=${c}${filter ? `&filter.${c}=${encodeURIComponent(filter)}` : ""}`;
      // The server's `close` event (code, reason) precedes the end of a stream it ends.
      let close: { code: number; reason: string } | undefined;
      const stream = new SseStream(this.fetchFn(), url, headers, this.o.maxEventBytes, {
        open: () => {
          if (gen !== this.gen) return;
          this.lastSeen = Date.now();
          this.sseOpen.add(sub.channel);
          const allOpen = [...this.subs.keys()].every((c) => this.sseOpen.has(c));
          if (this.state !== "connected" && allOpen) this.opened();
        },
        event: (ev) => {
          if (gen !== this.gen) return;
          this.lastSeen = Date.now();
          const f = parseFrame(ev.data);
          if (ev.event === "close" && f) close = { code: Number(f.code ?? 1006), reason: String(f.reason ?? "") };
          else if (f) sub.handleSse(ev.event, f, parseEventId(ev.id, sub.channel));
        },
        end: (reason, status) => {
          if (gen !== this.gen) return;
          const v: Verdict = close ? closeVerdict(close.code, close.reason) : status ? refusalVerdict(status) : "reconnect";
          const why = close ? `${close.reason} (SSE close ${close.code})` : reason;
          if (this.state === "connected") return this.lost(close?.code ?? 1006, why, v);
          this.failed(1006, why, v);
        },
      });
      this.sse.set(sub.channel, stream);
    }).catch((e: unknown) => {
      // No fetch, or the token callback failed: like a failed connect.
      if (gen !== this.gen) return;
      this.emit("error", e instanceof CorecastError ? e : new CorecastError("token", String(e)));
      this.failed(1006, String(e), "reconnect");
    });
  }
}
