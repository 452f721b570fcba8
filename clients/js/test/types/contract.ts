// Type-checked, never run (scripts/client_test.sh: tsc -p test/types):
// the API of issue 33 as written there — its names are a contract — and
// the WebSocket implementations users pass (the DOM's, the ws package's).
import WS from "ws";
import { Client, CorecastError, type Message, type Position } from "../../dist/index.js";

export async function contract(): Promise<void> {
  const client = new Client("wss://host/ws", { token: async () => "jwt", WebSocket: WebSocket });
  new Client("ws://host/ws", { token: "jwt", WebSocket: WS });
  new Client("ws://host/ws");
  const since: Position = { epoch: "E", offset: 41 };
  const sub = client.subscribe("news", { since, presence: true });
  sub.on("message", (m: Message) => {
    const d: string | Uint8Array = m.data;
    const o: number | undefined = m.offset;
    void d, o;
  });
  sub.on("subscribed", (e) => void e.recovered);
  sub.on("recovered", (e) => void e.offset);
  sub.on("gap", (g) => void [g.epoch, g.offset, g.reason]);
  sub.on("join", (p) => void [p.user, p.info]);
  sub.on("leave", (p) => void p.user);
  sub.on("error", (e: CorecastError) => void e.code);
  sub.on("unsubscribed", (e) => void e.channel);
  const ack: { subscribers: number } = await client.publish("news", "data");
  await client.publish("news", new Uint8Array([1, 2]));
  await client.publish("px", "50100", { tags: { sym: "BTC" }, key: "BTC" });
  const filtered = client.subscribe("px", { filter: { op: "and", nodes: [{ key: "sym", cmp: "eq", val: "BTC" }] }, latest: true });
  filtered.on("message", (m) => void [m.tags?.sym, m.skipped]);
  const members = await sub.presence();
  void [ack, members.count, members.members[0]?.user];
  const page = await sub.history({ limit: 10 });
  void page.messages[0]?.offset;
  client.on("connected", (c) => void c.transport);
  client.on("disconnected", (d) => void [d.code, d.reason, d.reconnect]);
  client.on("error", (e) => void e.message);
  client.connect();
  client.disconnect();
}
