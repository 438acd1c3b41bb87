// Type-checked, not run (npm run typecheck): the generated types describe
// what the client sends and reads, so a request of the wrong shape does
// not compile.
import { createPromptopsClient, type AssembleResponse, type Fact, type Message, type MessagesResponse } from "../src/index.js";

export async function example(): Promise<number> {
  const client = createPromptopsClient("http://127.0.0.1:8089");
  const fact: Fact = { text: "Ana prefers email.", scope: "user:ana", occurredStart: "2026-03-01" };
  await client.POST("/v1/banks/{namespace}/{name}/facts", { params: { path: { namespace: "shop", name: "customers" } }, body: { facts: [fact] } });
  const said: Message[] = [
    { role: "user", content: "I moved to Lyon yesterday.", at: "2026-03-01T09:00:00Z" },
    { id: "m-2", role: "assistant", content: "Noted.", at: "2026-03-01T09:00:05Z" },
  ];
  const retained = await client.POST("/v1/banks/{namespace}/{name}/messages", { params: { path: { namespace: "shop", name: "customers" } }, body: { scope: "user:ana", conversation: "c-1", messages: said } });
  const counts: MessagesResponse | undefined = retained.data;
  if (counts && counts.stored + counts.unchanged !== said.length) {
    return -2;
  }
  const { data, error } = await client.POST("/v1/assemble", { body: { namespace: "shop", name: "support", intent: "chat", query: "contact", scope: "user:ana", assignmentKey: "tenant-7" } });
  if (error) {
    return -1;
  }
  const answer: AssembleResponse | undefined = data;
  const canary: boolean | undefined = answer?.canary;
  return answer && !canary ? answer.tokens - answer.cacheableTokens : 0;
}
