/** A token, or a function that fetches a fresh one (called again before `exp`). */
export type TokenSource = string | (() => Promise<string>);

/**
 * The `exp` claim (seconds since the epoch) of a JWT, read without checking
 * the signature (the server checks it); `undefined` when the token is not a
 * JWT or has no numeric `exp`.
 */
export function tokenExp(token: string): number | undefined {
  const part = token.split(".")[1];
  if (!part) return undefined;
  try {
    const b64 = part.replace(/-/g, "+").replace(/_/g, "/");
    const padded = b64 + "=".repeat((4 - (b64.length % 4)) % 4);
    const claims = JSON.parse(atob(padded)) as { exp?: unknown };
    return typeof claims.exp === "number" ? claims.exp : undefined;
  } catch {
    return undefined;
  }
}

/**
 * How long before `exp` to refresh: `refreshBefore` (default 30 s), but at
 * most half of what is left, so a short-lived token is not refreshed in a
 * loop. Returns the delay from now, in milliseconds.
 */
export function refreshDelay(expSeconds: number, nowMs: number, refreshBefore: number): number {
  const left = expSeconds * 1000 - nowMs;
  return Math.max(0, left - Math.min(refreshBefore, left / 2));
}
