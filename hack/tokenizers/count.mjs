// Counts the tokens of a file with @huggingface/tokenizers over
// <DIR>/<ENCODING>/tokenizer.json, to be timed as a whole process against
// hack/tokbench (promptops' encoder) on the same file: both encode it in
// ~4 KB chunks cut at line ends and print the total.
//
//	go run ./hack/tokencorpus -size 10000000 > /tmp/corpus10.txt
//	time node hack/tokenizers/count.mjs DIR llama3 /tmp/corpus10.txt
//	time PROMPTOPS_TOKENIZERS_DIR=DIR /tmp/tokbench -encoding llama3 /tmp/corpus10.txt
import { Tokenizer } from "@huggingface/tokenizers";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const [dir, encoding, file] = process.argv.slice(2);
const json = JSON.parse(readFileSync(join(dir, encoding, "tokenizer.json"), "utf8"));
// Tekken's added tokens are text (hack/tokenizers/reference.mjs).
const tok = new Tokenizer(encoding === "tekken" ? { ...json, added_tokens: [] } : json, {});
const text = readFileSync(file, "utf8");
let tokens = 0;
for (let i = 0; i < text.length; ) {
  let end = text.indexOf("\n", i + 4096);
  end = end < 0 ? text.length : end + 1;
  tokens += tok.encode(text.slice(i, end), { add_special_tokens: false }).ids.length;
  i = end;
}
console.log(tokens);
