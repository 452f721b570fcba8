/**
 * corecast-client: a TypeScript client for corecast's JSON protocol
 * (`GET /ws`), with exact resume across reconnects and an SSE fallback.
 *
 * Layout: `client.ts` (connection state machine: reconnect, tokens,
 * liveness, queues), `subscription.ts` (per-channel position, dedup,
 * events), `protocol.ts` (frames and close-code verdicts, no I/O),
 * `options.ts` (options and their defaults),
 * `sse.ts` (event-stream parser and the SSE transport), `http.ts` (base
 * URL, JSON reads, HTTP publish, upgrade refusals), `backoff.ts`,
 * `token.ts`, `emitter.ts`, `errors.ts`.
 */
export { Client } from "./client.js";
export { httpBase, withToken } from "./http.js";
export type { ClientEvents, ConnectedEvent, DisconnectedEvent, ReconnectingEvent } from "./client.js";
export type { ClientOptions, Transport, WebSocketConstructor, WebSocketLike } from "./options.js";
export { RECENT_KEYS, Subscription } from "./subscription.js";
export type {
  GapEvent,
  HistoryPage,
  Message,
  PresenceEvent,
  SubscribeOptions,
  SubscribedEvent,
  SubscriptionEvents,
} from "./subscription.js";
export { CorecastError } from "./errors.js";
export { backoffDelay, DEFAULT_BACKOFF } from "./backoff.js";
export type { BackoffBounds } from "./backoff.js";
export { closeVerdict, refusalVerdict } from "./protocol.js";
export type { Data, Filter, Position, PresenceMember, PresenceSnapshot, PublishOptions } from "./protocol.js";
export { SseParser, parseEventId } from "./sse.js";
export type { SseEvent } from "./sse.js";
export { applyDelta, applyTextDelta, deltaChecksum } from "./delta.js";
export { tokenExp } from "./token.js";
export type { TokenSource } from "./token.js";
