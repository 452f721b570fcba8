/** Client options, their defaults (README "Bounds"), and the WebSocket shape the client needs. */
import { DEFAULT_BACKOFF } from "./backoff.js";
import type { TokenSource } from "./token.js";

/**
 * The part of the WebSocket API the client uses (browsers, Node ≥ 22, `ws`).
 * The handlers' event parameters are `any` on purpose: each implementation
 * types its events differently (DOM `Event`, `ws`'s own), and a handler
 * parameter narrower than `any` would make their constructors unassignable
 * to this option under `strictFunctionTypes`. The client reads only
 * `data`, `code`, `reason` and `message` from them.
 */
export interface WebSocketLike {
  readonly bufferedAmount: number;
  binaryType: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  onopen: ((ev: any) => void) | null;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  onmessage: ((ev: any) => void) | null;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  onclose: ((ev: any) => void) | null;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  onerror: ((ev: any) => void) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}

/** A WebSocket constructor: the global one, or e.g. `ws`'s default export. */
export type WebSocketConstructor = new (url: string) => WebSocketLike;

/** The transports, in the order they are tried. */
export type Transport = "websocket" | "sse";

/** Client options; every bound has a default (see README "Bounds"). */
export interface ClientOptions {
  /** A token (JWT, sent as `?token=`), or a callback that returns a fresh one. */
  token?: TokenSource;
  /** The WebSocket implementation (default: `globalThis.WebSocket`). */
  WebSocket?: WebSocketConstructor;
  /** `fetch` for history, presence over SSE, HTTP publish and SSE (default: global). */
  fetch?: typeof fetch;
  /** Base URL of the HTTP API (default: the WebSocket URL with http(s) and without `/ws`). */
  httpUrl?: string;
  /** `--publish-key`, for publishing over HTTP while on SSE. */
  publishKey?: string;
  /** Transports allowed, first preferred (default `["websocket", "sse"]`). */
  transports?: Transport[];
  /** Failed connects, before any succeeded, after which the next transport is tried (default 3). */
  fallbackAfter?: number;
  /** Cap of the first reconnect delay, ms (default 500). */
  minReconnectDelay?: number;
  /** Largest reconnect delay, ms (default 30,000). */
  maxReconnectDelay?: number;
  /** Probe the connection after this much silence, ms (default 25,000; 0 = never). */
  pingInterval?: number;
  /** Reconnect when a probe gets no answer in this long, ms (default 10,000). */
  pongTimeout?: number;
  /** A connect attempt that has not opened in this long is abandoned, ms (default 10,000). */
  connectTimeout?: number;
  /** Replies not received in this long fail with `timeout`, ms (default 10,000). */
  requestTimeout?: number;
  /** Requests awaiting a reply at once (default 1,000); more publishes wait in the queue. */
  maxPendingRequests?: number;
  /** Publishes waiting to be sent (default 1,000); beyond it `publish` fails with `queue_full`. */
  maxQueuedPublishes?: number;
  /** Socket send buffer above which queued publishes wait, bytes (default 1 MiB). */
  maxBufferedAmount?: number;
  /** Refresh the token this long before its `exp`, ms (default 30,000; at most half its remaining life). */
  refreshBefore?: number;
  /** Bound of one SSE line or event, bytes (default 2 MiB). */
  maxEventBytes?: number;
  /** Random source of the jitter (tests). */
  random?: () => number;
}

/** The options with every default filled in (what the client reads). */
export type Bounds = Required<Omit<ClientOptions, "token" | "WebSocket" | "fetch" | "httpUrl" | "publishKey">>;

/** `options` with the documented defaults. */
export function resolveOptions(options: ClientOptions): Bounds {
  return {
    transports: options.transports ?? ["websocket", "sse"],
    fallbackAfter: options.fallbackAfter ?? 3,
    minReconnectDelay: options.minReconnectDelay ?? DEFAULT_BACKOFF.minReconnectDelay,
    maxReconnectDelay: options.maxReconnectDelay ?? DEFAULT_BACKOFF.maxReconnectDelay,
    pingInterval: options.pingInterval ?? 25_000,
    pongTimeout: options.pongTimeout ?? 10_000,
    connectTimeout: options.connectTimeout ?? 10_000,
    requestTimeout: options.requestTimeout ?? 10_000,
    maxPendingRequests: options.maxPendingRequests ?? 1_000,
    maxQueuedPublishes: options.maxQueuedPublishes ?? 1_000,
    maxBufferedAmount: options.maxBufferedAmount ?? 1 << 20,
    refreshBefore: options.refreshBefore ?? 30_000,
    maxEventBytes: options.maxEventBytes ?? 2 << 20,
    random: options.random ?? Math.random,
  };
}
