/**
 * Applies a Fossil delta (the format of the Fossil SCM, which corecast
 * sends on `delta: "fossil"` subscriptions) to the bytes it was made
 * from. The reading half of D. Richard Hipp's `delta.c`, as in Dmitry
 * Chestnykh's `fossil-delta` (which the tests check it against), with
 * the checksum always verified. No I/O here.
 */

/** Digit values of the format's base-64 integers (-1: not a digit). */
const VALUES: Int8Array = (() => {
  const v = new Int8Array(128).fill(-1);
  const digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~";
  for (let i = 0; i < digits.length; i++) v[digits.charCodeAt(i)] = i;
  return v;
})();

/** The format's checksum: the bytes summed as big-endian 32-bit words. */
export function deltaChecksum(a: Uint8Array): number {
  let s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  let z = 0;
  const words = a.length - (a.length % 4);
  for (; z < words; z += 4) {
    s0 = (s0 + a[z]) | 0;
    s1 = (s1 + a[z + 1]) | 0;
    s2 = (s2 + a[z + 2]) | 0;
    s3 = (s3 + a[z + 3]) | 0;
  }
  let sum = (((((s3 + (s2 << 8)) | 0) + (s1 << 16)) | 0) + (s0 << 24)) | 0;
  for (let i = 0; z + i < a.length; i++) sum = (sum + (a[z + i] << (24 - 8 * i))) | 0;
  return sum >>> 0;
}

/**
 * The target of `delta` applied to `source`, at most `maxLength` bytes;
 * throws on a malformed delta, a copy outside the source, or a checksum
 * that does not match (the source is not the delta's base).
 */
export function applyDelta(source: Uint8Array, delta: Uint8Array, maxLength = 64 * 1024 * 1024): Uint8Array {
  let pos = 0;
  const int = (): number => {
    let v = 0;
    let d: number;
    while (pos < delta.length && delta[pos] < 128 && (d = VALUES[delta[pos]]) >= 0) {
      v = v * 64 + d;
      if (v > Number.MAX_SAFE_INTEGER / 64) throw new Error("delta: number too large");
      pos++;
    }
    return v;
  };
  const limit = int();
  if (delta[pos++] !== 0x0a) throw new Error("delta: size not followed by a newline");
  if (limit > maxLength) throw new Error("delta: target larger than allowed");
  const out = new Uint8Array(limit);
  let total = 0;
  while (pos < delta.length) {
    const cnt = int();
    const op = delta[pos++];
    if (op === 0x40 /* @ */) {
      const ofst = int();
      if (pos < delta.length && delta[pos++] !== 0x2c /* , */) throw new Error("delta: copy not followed by ','");
      if (total + cnt > limit) throw new Error("delta: copy past the target size");
      if (ofst + cnt > source.length) throw new Error("delta: copy past the source");
      out.set(source.subarray(ofst, ofst + cnt), total);
      total += cnt;
    } else if (op === 0x3a /* : */) {
      if (total + cnt > limit) throw new Error("delta: insert past the target size");
      if (pos + cnt > delta.length) throw new Error("delta: insert past the delta");
      out.set(delta.subarray(pos, pos + cnt), total);
      total += cnt;
      pos += cnt;
    } else if (op === 0x3b /* ; */) {
      if (total !== limit) throw new Error("delta: target size differs");
      if (cnt !== deltaChecksum(out)) throw new Error("delta: checksum mismatch (wrong base)");
      return out;
    } else {
      throw new Error("delta: unknown command");
    }
  }
  throw new Error("delta: unterminated");
}

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true });

/** `applyDelta` on text: the delta and its base as strings (UTF-8). */
export function applyTextDelta(base: string, delta: string): string {
  return decoder.decode(applyDelta(encoder.encode(base), encoder.encode(delta)));
}
