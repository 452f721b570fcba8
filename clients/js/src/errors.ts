/**
 * An error with a machine-readable `code`: the server's error codes
 * (`forbidden`, `invalid_token`, `presence_off`, `rate_limited`, ...) and
 * the client's own: `disconnected` (the connection was lost before the
 * reply), `timeout` (no reply within `requestTimeout`), `queue_full` (a
 * bounded queue is full), `closed` (the server said not to reconnect),
 * `token` (the token callback failed), `http` (an HTTP read failed),
 * `delta` (a delta message could not be applied).
 */
export class CorecastError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "CorecastError";
  }
}
