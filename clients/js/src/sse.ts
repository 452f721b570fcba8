/**
 * The Server-Sent Events fallback: a sans-I/O `text/event-stream` parser
 * and one `GET /sse?channel=…` stream per subscription, read with
 * `fetch` (so the token goes in `Authorization` and the resume position in
 * `Last-Event-ID`, which `EventSource` cannot set on its first request).
 *
 * The contract (corecast issue 33): each message is an event whose `id` is
 * `{channel}:{epoch}:{offset}` when the channel has history (read from the
 * right: channel names may contain `:`); a request with `Last-Event-ID`
 * resumes exactly like `since`, or sends one `gap` event.
 */
import type { Position } from "./protocol.js";

/** One dispatched event. */
export interface SseEvent {
  event: string;
  data: string;
  id?: string;
}

/** A `text/event-stream` parser (WHATWG HTML, "Parsing an event stream"). */
export class SseParser {
  private buf = "";
  private data: string[] = [];
  private event = "";
  private id: string | undefined;

  /** `maxBytes` bounds a line and an event's data (a peer could send one without end). */
  constructor(private readonly maxBytes: number) {}

  /** Feeds decoded text; returns the events it completed. Throws past `maxBytes`. */
  push(text: string): SseEvent[] {
    this.buf += text;
    const out: SseEvent[] = [];
    for (;;) {
      const m = /\r\n|\r|\n/.exec(this.buf);
      if (!m) break;
      // A lone \r at the end may be the first half of \r\n: wait for more.
      if (m[0] === "\r" && m.index === this.buf.length - 1) break;
      const line = this.buf.slice(0, m.index);
      this.buf = this.buf.slice(m.index + m[0].length);
      const ev = this.line(line);
      if (ev) out.push(ev);
    }
    if (this.buf.length > this.maxBytes) throw new Error(`SSE line over ${this.maxBytes} bytes`);
    return out;
  }

  private line(line: string): SseEvent | undefined {
    if (line === "") return this.dispatch();
    if (line.startsWith(":")) return undefined; // a comment (heartbeat)
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") {
      this.data.push(value);
      const size = this.data.reduce((n, d) => n + d.length + 1, 0);
      if (size > this.maxBytes) throw new Error(`SSE event over ${this.maxBytes} bytes`);
    } else if (field === "event") {
      this.event = value;
    } else if (field === "id" && !value.includes("\0")) {
      this.id = value;
    }
    return undefined;
  }

  private dispatch(): SseEvent | undefined {
    const had = this.data.length > 0;
    const ev = { event: this.event || "message", data: this.data.join("\n"), id: this.id };
    this.data = [];
    this.event = "";
    return had || ev.event !== "message" ? ev : undefined;
  }
}

/** The position in an event id `{channel}:{epoch}:{offset}`, read from the right. */
export function parseEventId(id: string | undefined, channel: string): Position | undefined {
  if (!id) return undefined;
  const last = id.lastIndexOf(":");
  const mid = last > 0 ? id.lastIndexOf(":", last - 1) : -1;
  if (mid < 0 || id.slice(0, mid) !== channel) return undefined;
  const offset = Number(id.slice(last + 1));
  if (!Number.isSafeInteger(offset) || offset < 0) return undefined;
  return { epoch: id.slice(mid + 1, last), offset };
}

/** The `Last-Event-ID` for a position. */
export function eventId(channel: string, at: Position): string {
  return `${channel}:${at.epoch}:${at.offset}`;
}

/** What a stream tells its owner. */
export interface SseHandlers {
  open(): void;
  event(ev: SseEvent): void;
  /** The stream ended or failed; `status` when the server refused it. */
  end(reason: string, status?: number): void;
}

/**
 * One SSE stream. `fetch` is injected (browsers and Node ≥ 18 have it);
 * `abort()` stops it without calling `end`.
 */
export class SseStream {
  private readonly ctl = new AbortController();
  private stopped = false;

  constructor(
    fetchFn: typeof fetch,
    url: string,
    headers: Record<string, string>,
    maxEventBytes: number,
    private readonly h: SseHandlers,
  ) {
    void this.run(fetchFn, url, headers, maxEventBytes);
  }

  abort(): void {
    this.stopped = true;
    this.ctl.abort();
  }

  private async run(fetchFn: typeof fetch, url: string, headers: Record<string, string>, max: number) {
    try {
      const res = await fetchFn(url, { headers, signal: this.ctl.signal, cache: "no-store" });
      if (!res.ok || !res.body) {
        void res.body?.cancel();
        return this.finish(`SSE refused: HTTP ${res.status}`, res.status);
      }
      this.h.open();
      const parser = new SseParser(max);
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      for (;;) {
        const { value, done } = await reader.read();
        if (done || this.stopped) break;
        for (const ev of parser.push(dec.decode(value, { stream: true }))) {
          if (this.stopped) break;
          this.h.event(ev);
        }
      }
      this.finish("SSE stream ended");
    } catch (e) {
      this.finish(`SSE failed: ${(e as Error).message}`);
    }
  }

  private finish(reason: string, status?: number): void {
    if (this.stopped) return;
    this.stopped = true;
    this.h.end(reason, status);
  }
}
