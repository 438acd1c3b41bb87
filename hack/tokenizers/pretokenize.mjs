// Answers the pre-tokenizer fuzz target of internal/tokens
// (FuzzSuppliedPreTokenizers): reads lines {"encoding", "text"} and writes,
// for each, the JSON array of the pieces that @huggingface/tokenizers' own
// pre-tokenizer of that encoding's tokenizer.json makes of the text (in
// the byte-level alphabet). Run: node pretokenize.mjs DIR (the tokenizers
// directory, <DIR>/<encoding>/tokenizer.json).
import { Tokenizer } from "@huggingface/tokenizers";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";

const dir = process.argv[2];
const cache = new Map();
const preTokenizer = (encoding) => {
  if (!cache.has(encoding)) {
    const json = JSON.parse(readFileSync(join(dir, encoding, "tokenizer.json"), "utf8"));
    cache.set(encoding, new Tokenizer(json, {}).pre_tokenizer);
  }
  return cache.get(encoding);
};
for await (const line of createInterface({ input: process.stdin })) {
  const { encoding, text } = JSON.parse(line);
  process.stdout.write(JSON.stringify(preTokenizer(encoding).pre_tokenize(text)) + "\n");
}
