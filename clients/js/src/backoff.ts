/** Reconnect delay bounds (milliseconds). */
export interface BackoffBounds {
  /** The cap of the first retry's delay (default 500 ms). */
  minReconnectDelay: number;
  /** The largest delay ever waited (default 30 s). */
  maxReconnectDelay: number;
}

/** The defaults documented in the README. */
export const DEFAULT_BACKOFF: BackoffBounds = {
  minReconnectDelay: 500,
  maxReconnectDelay: 30_000,
};

/**
 * Exponential backoff with full jitter ("Exponential Backoff And Jitter",
 * AWS architecture blog): retry `attempt` (0 for the first) waits a uniform
 * random time in `[0, min(maxReconnectDelay, minReconnectDelay * 2^attempt))`.
 * Full jitter spreads the reconnects of many clients cut at the same moment
 * (a server restart) instead of bringing them back in waves.
 */
export function backoffDelay(
  attempt: number,
  bounds: BackoffBounds,
  random: () => number = Math.random,
): number {
  const exp = bounds.minReconnectDelay * 2 ** Math.min(Math.max(attempt, 0), 30);
  const cap = Math.min(bounds.maxReconnectDelay, exp);
  return Math.floor(random() * cap);
}
