// Counts the tokens of a file with npm tiktoken (Rust core in WASM), to be
// timed as a whole process against hack/tokbench on the same file:
//
//	time node count.mjs o200k_base /tmp/corpus10.txt
//
// Chunks as bench.mjs does: ~4 KB cut at line ends.
import { get_encoding } from "tiktoken";
import { readFileSync } from "node:fs";

const [name, file] = process.argv.slice(2);
const text = readFileSync(file, "utf8");
const enc = get_encoding(name);
let tokens = 0;
for (let i = 0; i < text.length; ) {
  let end = text.indexOf("\n", i + 4096);
  end = end < 0 ? text.length : end + 1;
  tokens += enc.encode_ordinary(text.slice(i, end)).length;
  i = end;
}
console.log(`${name}: ${tokens} tokens, ${Buffer.byteLength(text, "utf8")} bytes`);
enc.free();
