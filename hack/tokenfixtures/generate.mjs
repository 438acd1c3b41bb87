// Writes internal/tokens/testdata/fixtures.json: strings with their token
// counts for cl100k_base and o200k_base from the reference tiktoken (the
// Rust core compiled to WASM; works offline). Run: npm ci && npm run generate
import { get_encoding } from "tiktoken";
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

const texts = [
  // English
  "",
  "Hello, world!",
  "The quick brown fox jumps over the lazy dog.",
  "You are a helpful assistant. Answer concisely and cite your sources.",
  "Don't, won't, can't, shouldn't've — contractions and an em dash.",
  "  leading and trailing spaces  ",
  "UPPER CASE AND lower case And Title Case",
  "Numbers: 1 12 123 1234 12345 123456 3.14159 -42 1e10 0x1F",
  "Dates: 2024-01-15, 15/01/2024, Jan 15th 2024, 10:30:00Z",
  "https://example.com/path?query=value&other=1#fragment",
  // Whitespace traps
  "today\n \n",
  "today\n  \n\n   \n",
  " ",
  "    ",
  "\n\n\n",
  "\t\tindented with tabs\n\t\tand more",
  "line one\r\nline two\r\n",
  "trailing spaces on lines   \nnext   \n",
  // Chinese and mixed
  "你好，世界！",
  "你是 SSA-Pro 智能统计分析助手。你的职责是**规划、解释和沟通**，而非计算。",
  "禁止编造或生成任何数值结果（P值、均值、标准差、置信区间、检验统计量等）",
  "## 当前任务指令\n请基于统计知识和用户数据直接回答用户的问题。",
  "混合 mixed 文本 text 与 with English 单词 words 123 个",
  "用户想了解数据的特征：缺失、分布、异常值等。PICO 结构可以推断。",
  "日本語のテキストとカタカナ、ひらがな。한국어 텍스트도 있습니다.",
  "Ελληνικά κείμενα και русский текст тоже.",
  // Code and JSON
  "func main() {\n\tfmt.Println(\"hello\")\n}\n",
  "def f(x):\n    return [i * 2 for i in range(x) if i % 3 == 0]\n",
  "SELECT id, text FROM observations WHERE bank = $1 ORDER BY created_at DESC LIMIT 10;",
  "{\"creates\": [{\"text\": \"Alice works long hours.\", \"source_fact_ids\": [\"a1b2c3d4-e5f6-7890-abcd-ef1234567890\"]}], \"updates\": [], \"deletes\": []}",
  "[{\"id\":\"1\",\"text\":\"x\",\"proof_count\":3,\"occurred_start\":\"2024-01-15T00:00:00Z\"}]",
  "apiVersion: promptops.io/v1\nkind: PromptTemplate\nmetadata:\n  name: ssa-pro\nspec:\n  budget:\n    maxTokens: 4000\n",
  "<div class=\"container\"><p>Hello &amp; welcome</p></div>",
  "if (a && b || !c) { x += y << 2; } // comment",
  // Emoji and symbols
  "👍🏽 thumbs up with skin tone",
  "👨‍👩‍👧‍👦 family emoji with zero-width joiners",
  "🎉🎉🎉 party 🚀 rocket ✨ sparkles",
  "Math: ∑ ∫ √ ∞ ≠ ≤ ≥ ± × ÷ and arrows → ← ↑ ↓",
  "© ® ™ € £ ¥ § ¶ • … ‰",
  // Special-token strings inside user text are plain text
  "<|endoftext|>",
  "before <|endoftext|> after",
  "<|im_start|>system\nYou are helpful.<|im_end|>",
  "<|fim_prefix|>code<|fim_suffix|><|fim_middle|>",
  // Very long words and repetition
  "a".repeat(1000),
  "supercalifragilisticexpialidocious".repeat(20),
  "abc123".repeat(300),
  "的".repeat(500),
  "Pneumonoultramicroscopicsilicovolcanoconiosis is a long word.",
  "https://example.com/" + "x".repeat(2000),
  "word ".repeat(400),
  // Combining characters and odd unicode
  "e\u0301 combining acute, n\u0303",
  "zero\u200bwidth\u200bspace",
  "\u00a0non-breaking\u00a0spaces\u00a0",
];

const encodings = ["cl100k_base", "o200k_base"];
const encs = Object.fromEntries(encodings.map((e) => [e, get_encoding(e)]));
const fixtures = texts.map((text) => {
  const row = { text };
  for (const e of encodings) {
    // encode_ordinary: special-token strings count as plain text, which is
    // what promptops does with user text.
    row[e] = encs[e].encode_ordinary(text).length;
  }
  return row;
});
for (const e of encodings) encs[e].free();

const out = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "internal", "tokens", "testdata", "fixtures.json");
writeFileSync(out, JSON.stringify({ generator: "tiktoken@1.0.22 encode_ordinary", fixtures }, null, 1) + "\n");
console.log(`wrote ${fixtures.length} fixtures to ${out}`);
