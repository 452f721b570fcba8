// Reads JSON lines {"source": b64, "target": b64, "delta": b64} from
// stdin; for each writes {"created": b64, "applied": b64 | null,
// "error": string | null}: the reference's delta from source to target,
// and the reference applying the given delta (corecast's) to source.
import { createDelta, applyDelta } from "fossil-delta";
import { createInterface } from "node:readline";

const b = (s) => new Uint8Array(Buffer.from(s, "base64"));
const s64 = (a) => Buffer.from(a).toString("base64");
for await (const line of createInterface({ input: process.stdin })) {
  const c = JSON.parse(line);
  const [source, target, delta] = [b(c.source), b(c.target), b(c.delta)];
  let applied = null, error = null;
  try {
    applied = s64(applyDelta(source, delta));
  } catch (e) {
    error = String(e.message);
  }
  console.log(JSON.stringify({ created: s64(createDelta(source, target)), applied, error }));
}
