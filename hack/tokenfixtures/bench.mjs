// Reference figure: MB/s of the npm tiktoken (Rust/WASM) on the benchmark
// corpus. Usage: go run ./hack/tokencorpus > /tmp/corpus.txt && node bench.mjs /tmp/corpus.txt
import { get_encoding } from "tiktoken";
import { readFileSync } from "node:fs";

const text = readFileSync(process.argv[2], "utf8");
const chunks = [];
for (let i = 0; i < text.length; ) {
  let end = text.indexOf("\n", i + 4096);
  end = end < 0 ? text.length : end + 1;
  chunks.push(text.slice(i, end));
  i = end;
}
const bytes = Buffer.byteLength(text, "utf8");
for (const name of ["cl100k_base", "o200k_base"]) {
  const enc = get_encoding(name);
  let tokens = 0;
  for (const c of chunks) tokens += enc.encode_ordinary(c).length; // warm-up
  const runs = 5;
  const t0 = process.hrtime.bigint();
  for (let r = 0; r < runs; r++) for (const c of chunks) enc.encode_ordinary(c);
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(`${name}: ${tokens} tokens, ${((bytes * runs) / s / 1e6).toFixed(2)} MB/s (npm tiktoken, ${runs} runs of ${(bytes / 1e6).toFixed(2)} MB)`);
  enc.free();
}
