// The native Hugging Face tokenizers (Rust, npm "tokenizers") as a second
// reference. With a FILE it counts it in ~4 KB chunks, like count.mjs, to
// be timed as a whole process; without, it encodes every string of
// internal/tokens/testdata/reference-<ENCODING>.jsonl.gz and prints how
// many differ from the fixture's ids (the reference.mjs ones).
//
//	node hack/tokenizers/native.mjs DIR ENCODING [FILE]
import { createRequire } from "node:module";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { gunzipSync } from "node:zlib";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

const { Tokenizer } = createRequire(import.meta.url)("tokenizers");
const [dir, encoding, file] = process.argv.slice(2);
let json = readFileSync(join(dir, encoding, "tokenizer.json"), "utf8");
if (encoding === "tekken") json = JSON.stringify({ ...JSON.parse(json), added_tokens: [] });
const tok = Tokenizer.fromString(json);
const encode = async (text) => (await tok.encode(text, null, { addSpecialTokens: false })).getIds();

if (file) {
  const text = readFileSync(file, "utf8");
  let tokens = 0;
  for (let i = 0; i < text.length; ) {
    let end = text.indexOf("\n", i + 4096);
    end = end < 0 ? text.length : end + 1;
    tokens += (await encode(text.slice(i, end))).length;
    i = end;
  }
  console.log(tokens);
} else {
  const testdata = join(dirname(fileURLToPath(import.meta.url)), "../../internal/tokens/testdata");
  const lines = (f) => gunzipSync(readFileSync(join(testdata, f))).toString("utf8").split("\n").filter((l) => l);
  const texts = lines("reference.jsonl.gz").slice(1).map((l) => JSON.parse(l).text);
  const rows = lines(`reference-${encoding}.jsonl.gz`).slice(1).map((l) => JSON.parse(l));
  let differ = 0;
  for (let i = 0; i < rows.length; i++) {
    const text = i < texts.length ? texts[i] : rows[i][2];
    const ids = await encode(text);
    const buf = Buffer.alloc(4 * ids.length);
    ids.forEach((id, k) => buf.writeUInt32LE(id, 4 * k));
    if (ids.length !== rows[i][0] || createHash("sha256").update(buf).digest("hex").slice(0, 16) !== rows[i][1]) {
      if (++differ <= 5) console.log(`differs: ${JSON.stringify(text.slice(0, 80))}: ${ids.length} tokens, fixture ${rows[i][0]}`);
    }
  }
  console.log(`${encoding}: ${differ} of ${rows.length} strings differ from the fixture`);
}
