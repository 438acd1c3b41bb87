// A client of promptops serve: openapi-fetch over the paths of its OpenAPI
// document (schema.d.ts, generated from internal/serve/openapi.json by
// `npm run generate`, which make client runs).
import createClient from "openapi-fetch";

/**
 * createPromptopsClient returns a typed client of the serve at baseUrl.
 * token, when given, is sent as a bearer token (serve --auth=kubernetes):
 * off loopback, baseUrl is https:// and fetch verifies serve's
 * certificate (NODE_EXTRA_CA_CERTS, or a fetch with its own CA; README).
 * @param {string} baseUrl
 * @param {{token?: string, fetch?: typeof fetch}} [options]
 */
export function createPromptopsClient(baseUrl, options = {}) {
  const headers = options.token ? { Authorization: `Bearer ${options.token}` } : {};
  return createClient({ baseUrl, headers, fetch: options.fetch });
}
