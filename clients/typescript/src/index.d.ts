import type { Client } from "openapi-fetch";
import type { components, paths } from "./schema.js";

export type { components, paths };
/** The answer of POST /v1/assemble. */
export type AssembleResponse = components["schemas"]["AssembleResponse"];
/** A fact, as POST /v1/banks/{namespace}/{name}/facts takes it. */
export type Fact = components["schemas"]["Fact"];
/** A message, as POST /v1/banks/{namespace}/{name}/messages takes it. */
export type Message = components["schemas"]["Message"];
/** The answer of POST /v1/banks/{namespace}/{name}/messages. */
export type MessagesResponse = components["schemas"]["MessagesResponse"];
/** An error answer. */
export type ErrorBody = components["schemas"]["Error"];

/** A typed client of the serve at baseUrl. */
export function createPromptopsClient(baseUrl: string, options?: { token?: string; fetch?: typeof fetch }): Client<paths>;
