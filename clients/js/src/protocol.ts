/**
 * The JSON control protocol of corecast's `GET /ws` (see the server's
 * the book's Protocol reference): the frames, and pure functions to
 * encode requests and read replies. No I/O here.
 */

/** A position in a channel's history: the last message a client has. */
export interface Position {
  /** The channel's epoch (changes whenever its history was lost). */
  epoch: string;
  /** The offset of the last message received (0: none yet in this epoch). */
  offset: number;
}

/** Message payload: text for text messages, bytes for binary ones. */
export type Data = string | Uint8Array;

/** A server frame, as parsed (only the members the client reads). */
export interface ServerFrame {
  type: string;
  channel?: string;
  id?: unknown;
  data?: string;
  data_base64?: string;
  offset?: number;
  epoch?: string;
  recovered?: boolean;
  /** `subscribed`: the server filters this subscription (jumps expected). */
  filtered?: boolean;
  /** `subscribed`: deltas granted; `message`: `data` is a delta of the previous one. */
  delta?: boolean;
  subscribers?: number;
  code?: string;
  message?: string;
  reason?: string;
  exp?: number;
  user?: string;
  info?: unknown;
  members?: PresenceMember[];
  count?: number;
  tags?: Record<string, string>;
  /** `message`: a copy published again (an outbox row after a crash) carries the same key. */
  idempotency_key?: string;
}

/**
 * A tag filter, in Centrifugo's shape (the server's `filter`): an inner
 * node (`op` and, or, not with `nodes`) or a leaf (`key`, `cmp`, `val` or
 * `vals`).
 */
export type Filter =
  | { op: "and" | "or" | "not"; nodes: Filter[] }
  | {
      key: string;
      cmp: "eq" | "neq" | "in" | "nin" | "ex" | "nex" | "sw" | "ew" | "ct" | "gt" | "gte" | "lt" | "lte";
      val?: string;
      vals?: string[];
    };

/** What a publish may carry besides its data. */
export interface PublishOptions {
  /** Tags (at most 16 strings, 1 KiB): what subscribers' filters select on. */
  tags?: Record<string, string>;
  /** The latest-value key: on a `conflate` channel the newest message per key is kept. */
  key?: string;
  /**
   * May go as a Fossil delta of the channel's previous message to
   * subscribers that asked for deltas (the namespace's `delta = "fossil"`).
   */
  delta?: boolean;
}

/** The members a publish's options add to its request. */
export function publishMembers(o: PublishOptions): { tags?: Record<string, string>; key?: string; delta?: true } {
  const out: { tags?: Record<string, string>; key?: string; delta?: true } = {};
  if (o.tags && Object.keys(o.tags).length > 0) out.tags = o.tags;
  if (o.key !== undefined) out.key = o.key;
  if (o.delta === true) out.delta = true;
  return out;
}

/** `POST /publish`'s query for a publish's options (`tag.K=V`, `key=`, `delta=1`). */
export function publishQuery(o: PublishOptions): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(o.tags ?? {})) q.append(`tag.${k}`, v);
  if (o.key !== undefined) q.append("key", o.key);
  if (o.delta === true) q.append("delta", "1");
  const s = q.toString();
  return s ? `?${s}` : "";
}

/** One member of a presence channel. */
export interface PresenceMember {
  user: string;
  info?: unknown;
  connections: number;
}

/** The answer to `sub.presence()`. */
export interface PresenceSnapshot {
  channel: string;
  members: PresenceMember[];
  count: number;
}

/** Parses one text frame; `undefined` when it is not a JSON object with a `type`. */
export function parseFrame(text: string): ServerFrame | undefined {
  try {
    const v = JSON.parse(text) as unknown;
    if (v && typeof v === "object" && typeof (v as ServerFrame).type === "string") {
      return v as ServerFrame;
    }
  } catch {
    // Not JSON: reported by the caller.
  }
  return undefined;
}

/** The payload of a `message` frame: `data` (text) or `data_base64` (bytes). */
export function frameData(f: { data?: string; data_base64?: string }): Data {
  if (typeof f.data_base64 === "string") return fromBase64(f.data_base64);
  return f.data ?? "";
}

/** A publish request's payload members. */
export function dataMembers(data: Data): { data: string } | { data_base64: string } {
  return typeof data === "string" ? { data } : { data_base64: toBase64(data) };
}

/** Standard base64 of bytes (browsers and Node ≥ 16 have `btoa`). */
export function toBase64(bytes: Uint8Array): string {
  let bin = "";
  // Chunks keep String.fromCharCode's argument list short.
  for (let i = 0; i < bytes.length; i += 0x8000) {
    bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(bin);
}

/** Bytes of standard base64. */
export function fromBase64(b64: string): Uint8Array {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/**
 * What to do after a WebSocket closed, from its close code and reason
 * (the server's codes: the book's Delivery and Access control pages).
 * - `reconnect`: transient (network, restart `1001`, slow consumer `1008`,
 *   overload `1013`, history gap `1012`, no close frame `1006`, ...).
 * - `new-token`: `4001`, the token expired: reconnect with a fresh token
 *   when the client has a token callback, else stop.
 * - `stop`: the server said not to come back as we are: a policy close
 *   other than "slow consumer" (`1008`), a protocol error we caused
 *   (`1002`, `1003`, `1007`), or an application code `4000-4999` other
 *   than `4001`.
 */
export function closeVerdict(code: number, reason: string): "reconnect" | "new-token" | "stop" {
  if (code === 4001) return "new-token";
  if (code === 1008) return /slow consumer/i.test(reason) ? "reconnect" : "stop";
  if (code === 1002 || code === 1003 || code === 1007) return "stop";
  if (code >= 4000 && code <= 4999) return "stop";
  return "reconnect";
}

/**
 * What to do after an upgrade the server refused with HTTP `status`
 * (known only where the WebSocket implementation tells it, e.g. `ws`):
 * `401` is a refused token (retry once with a fresh one from a callback),
 * `429` and `5xx` are "later", `400` and `426` mean the upgrade itself did
 * not get through (a proxy that strips it: a transport failure, which
 * counts towards the SSE fallback), and any other 4xx (`403` grants or
 * origin, `404` path) will not change by itself.
 */
export function refusalVerdict(status: number): "reconnect" | "new-token" | "stop" {
  if (status === 401) return "new-token";
  if (status === 400 || status === 426 || status === 429 || status >= 500) return "reconnect";
  return "stop";
}
