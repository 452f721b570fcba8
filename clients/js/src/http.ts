/**
 * The HTTP side of corecast the client uses (`fetch` injected): the base
 * URL derived from the WebSocket URL, `GET` of JSON (history, presence),
 * `POST /publish`, and reading back why an upgrade was refused.
 */
import { CorecastError } from "./errors.js";
import { publishQuery, type Data, type PublishOptions, type ServerFrame } from "./protocol.js";

/** `url` with `?token=` (browsers cannot set headers on a WebSocket upgrade). */
export function withToken(url: string, token: string | undefined): string {
  if (!token) return url;
  const u = new URL(url);
  u.searchParams.set("token", token);
  return u.toString();
}

/** The HTTP base URL: `ws(s)://host/prefix/ws` → `http(s)://host/prefix` (or `override`). */
export function httpBase(wsUrl: string, override?: string): string {
  if (override) return override.replace(/\/$/, "");
  const u = new URL(wsUrl);
  u.protocol = u.protocol === "wss:" ? "https:" : u.protocol === "ws:" ? "http:" : u.protocol;
  return `${u.origin}${u.pathname.replace(/\/ws\/?$/, "").replace(/\/$/, "")}`;
}

/**
 * Browsers do not tell why an upgrade failed. corecast checks the token
 * before it looks at the upgrade headers, so the same URL fetched as plain
 * HTTP answers the refusal's status (401, 403, 429, 503) — or 400/426 when
 * only the upgrade was the problem (a proxy that strips it): `undefined`
 * then, and when the server is down or the page is cross-origin without
 * CORS (fetch fails): nothing learnt, a transient failure.
 */
export async function upgradeRefusal(fetchFn: typeof fetch, wsUrl: string, token: string | undefined): Promise<number | undefined> {
  try {
    const u = new URL(withToken(wsUrl, token));
    u.protocol = u.protocol === "wss:" ? "https:" : "http:";
    const res = await fetchFn(u.toString(), { cache: "no-store", credentials: "omit" });
    void res.body?.cancel();
    const st = res.status;
    return st === 429 || st === 503 || (st >= 401 && st < 500 && st !== 426) ? st : undefined;
  } catch {
    return undefined;
  }
}

/** `GET` a JSON answer; a non-2xx status is a `CorecastError` with code `http`. */
export async function getJson(fetchFn: typeof fetch, url: string, headers: Record<string, string>): Promise<ServerFrame> {
  const res = await fetchFn(url, { headers, cache: "no-store" });
  const text = await res.text();
  if (!res.ok) throw new CorecastError("http", `GET ${new URL(url).pathname}: HTTP ${res.status} ${text.slice(0, 200)}`);
  return JSON.parse(text) as ServerFrame;
}

/** `POST /publish/{channel}` (text only: the body is published as a text message). */
export async function postPublish(
  fetchFn: typeof fetch,
  base: string,
  channel: string,
  data: Data,
  publishKey: string | undefined,
  opts: PublishOptions = {},
): Promise<{ subscribers: number }> {
  if (typeof data !== "string") throw new CorecastError("bad_request", "binary publish needs the WebSocket transport");
  const headers: Record<string, string> = { "Content-Type": "text/plain; charset=utf-8" };
  if (publishKey) headers.Authorization = `Bearer ${publishKey}`;
  const url = `${base}/publish/${encodeURIComponent(channel)}${publishQuery(opts)}`;
  const res = await fetchFn(url, { method: "POST", headers, body: data });
  const text = await res.text();
  if (!res.ok) throw new CorecastError("http", `POST /publish: HTTP ${res.status} ${text.slice(0, 200)}`);
  return { subscribers: (JSON.parse(text) as { subscribers?: number }).subscribers ?? 0 };
}
