// The client against a running promptops serve (make test-client): a
// template with a memory section, its bank served by the same process and
// consolidated by promptops consolidate with a stand-in model (one
// observation per fact, as the Go tests' llmtest.OnePerFact), then a
// prompt with the memory section through the generated client.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFile, execFileSync } from "node:child_process";
import { promisify } from "node:util";
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { createServer as createNetServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { createPromptopsClient } from "../src/index.js";

const root = resolve(fileURLToPath(import.meta.url), "../../../..");
const promptops = process.env.PROMPTOPS_BIN ?? join(root, "bin", "promptops");
const dir = mkdtempSync(join(tmpdir(), "promptops-client-"));
const store = `sqlite://${join(dir, "bank.db")}`;
let model, serve, client;

const template = `apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: support, namespace: shop}
spec:
  budget: {maxTokens: 400}
  sections:
  - {name: role, text: "You are the support assistant of Acme Cloud."}
  - name: memory
    heading: "## What we know of the customer"
    memory: {bankRef: {name: customers}, query: {fromRequest: true}, scope: {fromRequest: true}, reserveTokens: 100}
  - {name: task, heading: "## Task", intent: true}
  intents: [{name: chat, instruction: "Answer briefly."}]
`;
const facts = [
  { id: "00000000-0000-4000-8000-000000000001", scope: "user:ana", text: "Ana prefers to be contacted by email", entities: ["Ana"] },
  { id: "00000000-0000-4000-8000-000000000002", scope: "user:bob", text: "Bob prefers to be contacted by phone", entities: ["Bob"] },
];

// A stand-in of an OpenAI-compatible model: every new fact becomes an
// observation.
function standIn() {
  return createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      const user = JSON.parse(body).messages.filter((m) => m.role === "user").map((m) => m.content).join("\n");
      const section = user.split("NEW FACTS:\n")[1]?.split("\n\nEXISTING OBSERVATIONS")[0] ?? "";
      const creates = [...section.matchAll(/^\[([^\]]+)\] (.*?)(?: \| Involving: .*?)?(?: \((?:occurred_start|occurred_end|mentioned_at)=.*\))?$/gm)].map((m) => ({ text: m[2], source_fact_ids: [m[1]] }));
      const content = JSON.stringify({ creates, updates: [], deletes: [] });
      res.setHeader("Content-Type", "application/json");
      res.end(JSON.stringify({ id: "chatcmpl-1", object: "chat.completion", created: 1700000000, model: "stand-in",
        choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content } }], usage: { prompt_tokens: 100, completion_tokens: 20, total_tokens: 120 } }));
    });
  });
}

function freePort() {
  return new Promise((ok, fail) => {
    const s = createNetServer();
    s.listen(0, "127.0.0.1", () => { const { port } = s.address(); s.close(() => ok(port)); });
    s.on("error", fail);
  });
}

async function waitReady(url) {
  for (let i = 0; i < 200; i++) {
    try {
      if ((await fetch(url + "/readyz")).ok) return;
    } catch {}
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("serve did not become ready");
}

before(async () => {
  model = standIn();
  await new Promise((r) => model.listen(0, "127.0.0.1", r));
  writeFileSync(join(dir, "template.yaml"), template);
  writeFileSync(join(dir, "facts.jsonl"), facts.map((f) => JSON.stringify(f)).join("\n") + "\n");
  execFileSync(promptops, ["render", "-f", join(dir, "template.yaml"), "--out-dir", join(dir, "plans")]);
  execFileSync(promptops, ["facts", "import", "--bank", "shop/customers", "--store", store, join(dir, "facts.jsonl")]);
  // Not execFileSync: the stand-in answers from this process's event loop.
  await promisify(execFile)(promptops, ["consolidate", "--bank", "shop/customers", "--store", store, "--llm-base-url", `http://127.0.0.1:${model.address().port}/v1`, "--model", "stand-in"]);
  const port = await freePort();
  serve = spawn(promptops, ["serve", "--plans-dir", join(dir, "plans"), "--bank", "shop/customers", "--store", store, "--listen", `127.0.0.1:${port}`], { stdio: "ignore" });
  const url = `http://127.0.0.1:${port}`;
  await waitReady(url);
  client = createPromptopsClient(url);
});

after(() => {
  serve?.kill();
  model?.close();
});

test("a prompt with a memory section: one user's memory, never another's", async () => {
  const { data, error, response } = await client.POST("/v1/assemble", {
    body: { namespace: "shop", name: "support", intent: "chat", query: "How should we contact this customer?", scope: "user:ana" },
  });
  assert.equal(error, undefined, JSON.stringify(error));
  assert.equal(response.status, 200);
  assert.ok(data.withinBudget);
  assert.match(data.prompt, /Ana prefers to be contacted by email/);
  assert.doesNotMatch(data.prompt, /Bob/);
  assert.equal(data.memory.length, 1);
  assert.equal(data.memory[0].items.length, 1);
  assert.equal(data.memory[0].items[0].kind, "observation");
  assert.ok(data.cacheableTokens > 0 && data.cacheableTokens < data.tokens);
  // Outside a rollout every request gets the stable revision.
  assert.match(data.revision, /^sha256:/);
  assert.equal(data.canary, false);
});

test("an assignment key of the wrong size is refused, naming the field", async () => {
  const { error, response } = await client.POST("/v1/assemble", {
    body: { namespace: "shop", name: "support", intent: "chat", assignmentKey: "" },
  });
  assert.equal(response.status, 400);
  assert.equal(error.error.code, "MalformedRequest");
  assert.match(error.error.message, /assignmentKey/);
});

test("templates, retain and recall", async () => {
  const list = await client.GET("/v1/templates");
  assert.deepEqual(list.data.templates.map((t) => `${t.namespace}/${t.name}`), ["shop/support"]);
  const path = { namespace: "shop", name: "customers" };
  const kept = await client.POST("/v1/banks/{namespace}/{name}/facts", {
    params: { path }, body: { facts: [{ text: "Ana moved to Lisbon", scope: "user:ana", occurredStart: "2026-03-01" }] },
  });
  assert.equal(kept.data.stored, 1);
  const recall = await client.POST("/v1/banks/{namespace}/{name}/recall", {
    params: { path }, body: { query: "Where does Ana live?", maxTokens: 100, scope: "user:ana", includePending: true },
  });
  assert.ok(recall.data.items.some((it) => it.text === "Ana moved to Lisbon" && it.kind === "fact"));
});

test("an error names what is wrong: the old field names are refused", async () => {
  const { error, response } = await client.POST("/v1/banks/{namespace}/{name}/facts", {
    params: { path: { namespace: "shop", name: "customers" } }, body: { facts: [{ text: "x", occurred_start: "2026-03-01" }] },
  });
  assert.equal(response.status, 400);
  assert.equal(error.error.code, "InvalidFact");
  assert.equal(error.error.message, "facts[0].occurred_start: a field renamed occurredStart (the API's fields are camelCase)");
});
