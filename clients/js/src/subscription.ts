import { Emitter } from "./emitter.js";
import { frameData, type Data, type Filter, type Position, type PresenceSnapshot, type ServerFrame } from "./protocol.js";
import { applyTextDelta } from "./delta.js";
import { CorecastError } from "./errors.js";

/** A delivered message. */
export interface Message {
  channel: string;
  /** Text (`data`) or bytes (`data_base64`). */
  data: Data;
  /** The message's offset in the channel's history (with `--history-size`). */
  offset?: number;
  /** The channel's epoch the offset belongs to (with history). */
  epoch?: string;
  /** Its tags, when it has any. */
  tags?: Record<string, string>;
  /**
   * Its idempotency key, when the publisher gave one (an outbox row's
   * `NAME:ID`): a second message with a key seen lately is dropped.
   */
  idempotencyKey?: string;
  /**
   * Offsets jumped over since the previous message (with history): on a
   * filtered subscription the messages the filter left out, on a
   * latest-value channel (`latest: true`) those a newer value replaced.
   */
  skipped?: number;
}

/** `subscribed`: delivery has begun (every (re)subscribe). */
export interface SubscribedEvent {
  channel: string;
  /** True when this subscribe resumed from a position (`since`). */
  resumed: boolean;
  /** The server's `recovered` when resumed. */
  recovered?: boolean;
  /** The channel's epoch and latest offset when it has history. */
  epoch?: string;
  offset?: number;
}

/** `gap`: messages up to `offset` of `epoch` will never be delivered. */
export interface GapEvent {
  channel: string;
  epoch: string;
  /** The position the subscription goes on from. */
  offset: number;
  /**
   * Why: the server announced it, a resume was not recovered, an offset
   * jumped, or a delta could not be applied.
   */
  reason: "server" | "not_recovered" | "jump" | "delta";
}

/** A presence event (`presence: true`). */
export interface PresenceEvent {
  channel: string;
  user: string;
  info?: unknown;
}

/** The events of a [`Subscription`]. */
export interface SubscriptionEvents {
  message: Message;
  subscribed: SubscribedEvent;
  recovered: SubscribedEvent;
  gap: GapEvent;
  join: PresenceEvent;
  leave: PresenceEvent;
  error: CorecastError;
  unsubscribed: { channel: string };
}

/** One page of `GET /history/{channel}`. */
export interface HistoryPage {
  channel: string;
  epoch: string | null;
  offset: number;
  messages: Message[];
}

/** Options of `client.subscribe`. */
export interface SubscribeOptions {
  /** Resume after this position (e.g. one kept in storage). */
  since?: Position;
  /** Also receive `join`/`leave` events (`--presence-channels`). */
  presence?: boolean;
  /** Only messages whose tags pass this filter (and the server's own). */
  filter?: Filter;
  /**
   * The channel is a latest-value channel (its namespace conflates): an
   * offset jump is a newer value, reported as `skipped`, not a `gap`.
   */
  latest?: boolean;
  /**
   * `"fossil"`: messages may come as Fossil deltas of the previous one
   * (where the namespace allows it), applied here: `data` is always the
   * whole message.
   */
  delta?: "fossil";
}

/** What a subscription needs from its client (kept narrow on purpose). */
export interface SubscriptionHost {
  presence(channel: string): Promise<PresenceSnapshot>;
  history(channel: string, opts: { limit?: number; since?: number }): Promise<HistoryPage>;
  unsubscribe(sub: Subscription): Promise<void>;
}

/**
 * One channel of a client. It remembers the position of the last message
 * it delivered and resubscribes from there after every reconnect, so each
 * message is delivered once and in order while the server's history covers
 * the time away; otherwise it emits `gap`.
 */
/** Idempotency keys a subscription remembers to drop copies. */
export const RECENT_KEYS = 1024;

export class Subscription extends Emitter<SubscriptionEvents> {
  /** `pending` until the server acknowledged, again after a disconnect. */
  state: "pending" | "subscribed" | "unsubscribed" = "pending";
  /**
   * Messages dropped because their offset was already delivered, or
   * their idempotency key was among the last [`RECENT_KEYS`] seen.
   */
  duplicatesDropped = 0;
  /** The last idempotency keys delivered, oldest first (bounded). */
  private readonly recentKeys = new Set<string>();
  private pos: Position | undefined;
  private resuming = false;
  readonly presenceEvents: boolean;
  private readonly filter: Filter | undefined;
  /** Offset jumps are expected (filtered or latest-value): not gaps. */
  private readonly jumps: boolean;
  /** The server said it filters this subscription (its `subscribed`). */
  private serverFiltered = false;
  private readonly delta: boolean;
  /** The last text message's data (a delta's base), with deltas on. */
  private base: string | undefined;

  constructor(
    readonly channel: string,
    private readonly host: SubscriptionHost,
    opts: SubscribeOptions = {},
  ) {
    super();
    this.pos = opts.since ? { ...opts.since } : undefined;
    this.presenceEvents = opts.presence === true;
    this.filter = opts.filter;
    this.jumps = opts.filter !== undefined || opts.latest === true;
    this.delta = opts.delta === "fossil";
  }

  /** The subscription's filter as JSON text, if it has one (internal: SSE). */
  filterParam(): string | undefined {
    return this.filter ? JSON.stringify(this.filter) : undefined;
  }

  /** The position of the last delivered message (with history), to resume from. */
  position(): Position | undefined {
    return this.pos ? { ...this.pos } : undefined;
  }

  /** The channel's members (`{"op":"presence"}`, or `GET /presence` over SSE). */
  presence(): Promise<PresenceSnapshot> {
    return this.host.presence(this.channel);
  }

  /** Kept messages after `since` (default 0), at most `limit` (server default 100, max 1,000). */
  history(opts: { limit?: number; since?: number } = {}): Promise<HistoryPage> {
    return this.host.history(this.channel, opts);
  }

  /** Stops the subscription (also across reconnects). */
  unsubscribe(): Promise<void> {
    return this.host.unsubscribe(this);
  }

  /** A (re)subscribe starts: it resumes when there is a position (internal). */
  beginSubscribe(): void {
    this.resuming = this.pos !== undefined;
  }

  /** The subscribe request for the current position (internal). */
  subscribeRequest(): Record<string, unknown> {
    this.beginSubscribe();
    const req: Record<string, unknown> = { op: "subscribe", channel: this.channel };
    if (this.pos) req.since = { epoch: this.pos.epoch, offset: this.pos.offset };
    if (this.presenceEvents) req.presence = true;
    if (this.filter) req.filter = this.filter;
    if (this.delta) req.delta = "fossil";
    return req;
  }

  /** The connection is gone: pending until resubscribed (internal). */
  detach(): void {
    if (this.state === "subscribed") this.state = "pending";
  }

  /** Marks the subscription ended and tells its listeners (internal). */
  end(): void {
    if (this.state === "unsubscribed") return;
    this.state = "unsubscribed";
    this.emit("unsubscribed", { channel: this.channel });
  }

  /** Reports an error on this channel (internal). */
  fail(err: CorecastError): void {
    this.emit("error", err);
  }

  /** Handles a frame addressed to this channel (internal). */
  handle(f: ServerFrame): void {
    switch (f.type) {
      case "subscribed":
        return this.onSubscribed(f);
      case "message":
        return this.onMessage(f);
      case "gap":
        return this.onGap(f);
      case "join":
      case "leave":
        this.emit(f.type, { channel: this.channel, user: String(f.user), info: f.info });
        return;
      case "unsubscribed":
        return this.end();
    }
  }

  private onSubscribed(f: ServerFrame): void {
    this.state = "subscribed";
    this.serverFiltered = f.filtered === true;
    // What follows a (re)subscribe starts full: no base is assumed.
    this.base = undefined;
    const resumed = this.resuming;
    this.resuming = false;
    const ev: SubscribedEvent = { channel: this.channel, resumed, recovered: f.recovered, epoch: f.epoch, offset: f.offset };
    const at = typeof f.epoch === "string" && typeof f.offset === "number" ? { epoch: f.epoch, offset: f.offset } : undefined;
    if (resumed && f.recovered === true) {
      // The replay (after our position) follows: keep the position.
      this.emit("subscribed", ev);
      this.emit("recovered", ev);
      return;
    }
    this.emit("subscribed", ev);
    if (resumed && at) {
      // Not recoverable (other epoch, trimmed, expired): go on from the
      // server's position, after telling the application.
      this.pos = at;
      this.emit("gap", { channel: this.channel, ...at, reason: "not_recovered" });
    } else if (resumed && !at) {
      // The server has no history (any more): nothing to resume.
      this.pos = undefined;
    } else {
      this.pos = at;
    }
  }

  private onMessage(f: ServerFrame): void {
    const data = this.delta ? this.undelta(f) : frameData(f);
    if (data === undefined) return;
    const tags = f.tags;
    const key = f.idempotency_key;
    if (typeof f.offset !== "number" || !this.pos) {
      if (this.seenKey(key)) return;
      this.emit("message", { channel: this.channel, data, offset: f.offset, epoch: this.pos?.epoch, tags, idempotencyKey: key });
      return;
    }
    if (f.offset <= this.pos.offset) {
      this.duplicatesDropped++;
      return;
    }
    const skipped = f.offset - this.pos.offset - 1;
    if (skipped > 0 && !this.jumps && !this.serverFiltered) {
      // Offsets have no holes; a jump means messages were dropped
      // (`--slow-consumer drop-oldest`).
      this.emit("gap", { channel: this.channel, epoch: this.pos.epoch, offset: f.offset - 1, reason: "jump" });
    }
    // A copy published again has an offset of its own: the position
    // moves past it (a resume must not ask for it), nothing is emitted.
    this.pos = { epoch: this.pos.epoch, offset: f.offset };
    if (this.seenKey(key)) return;
    this.emit("message", { channel: this.channel, data, offset: f.offset, epoch: this.pos.epoch, tags, skipped, idempotencyKey: key });
  }

  /** Whether `key` was delivered lately (counted as a duplicate); else remembers it. */
  private seenKey(key: string | undefined): boolean {
    if (key === undefined) return false;
    if (this.recentKeys.has(key)) {
      this.duplicatesDropped++;
      return true;
    }
    this.recentKeys.add(key);
    if (this.recentKeys.size > RECENT_KEYS) {
      const oldest = this.recentKeys.values().next().value;
      if (oldest !== undefined) this.recentKeys.delete(oldest);
    }
    return false;
  }

  /**
   * A message's data with deltas on: a delta applied to the previous
   * message (which every message, duplicates included, updates: it is
   * the server's base too). A delta that cannot be applied (a server
   * bug: it never sends one without the base) is an `error` and a `gap`.
   */
  private undelta(f: ServerFrame): string | Uint8Array | undefined {
    if (f.delta !== true) {
      const data = frameData(f);
      this.base = typeof data === "string" ? data : undefined;
      return data;
    }
    try {
      if (this.base === undefined) throw new Error("a delta without a base");
      this.base = applyTextDelta(this.base, f.data ?? "");
      return this.base;
    } catch (e) {
      this.base = undefined;
      this.emit("error", new CorecastError("delta", `${this.channel}: ${(e as Error).message}`));
      if (this.pos && typeof f.offset === "number") {
        this.pos = { epoch: this.pos.epoch, offset: f.offset };
        this.emit("gap", { channel: this.channel, ...this.pos, reason: "delta" });
      }
      return undefined;
    }
  }

  private onGap(f: ServerFrame): void {
    if (typeof f.epoch !== "string" || typeof f.offset !== "number") return;
    this.pos = { epoch: f.epoch, offset: f.offset };
    this.emit("gap", { channel: this.channel, epoch: f.epoch, offset: f.offset, reason: "server" });
  }

  /**
   * An event of the SSE transport (internal): its data is the JSON
   * protocol's object, its id `{channel}:{epoch}:{offset}` (`at`). A resume
   * the server could not cover is answered by a `gap` alone, instead of
   * `subscribed`.
   */
  handleSse(event: string, f: ServerFrame, at: Position | undefined): void {
    if (event === "gap" && this.state === "pending" && this.resuming) {
      return this.onSubscribed({ ...f, type: "subscribed", recovered: false });
    }
    if (event === "message" && at && this.pos && this.pos.epoch !== at.epoch) {
      // A new epoch nobody announced: the old positions are void.
      this.onGap({ type: "gap", epoch: at.epoch, offset: at.offset - 1 });
    }
    if (event === "subscribed" || event === "gap" || event === "message") this.handle({ ...f, type: event });
  }
}
