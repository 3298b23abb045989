// Compares polysketch's tokenizers with Hugging Face's JavaScript
// implementation, @huggingface/tokenizers: for a trained tokenizer.json,
// Llama-3- and Qwen2-style files made from it, the SentencePiece-kind
// piece.json (Llama 2's layout) and a Metaspace variant of it, files whose
// Split patterns polysketch matches with regexp2 (GPT-2's split as a
// Split, and two Splits in sequence), and the
// real files of Llama 2, Llama 3 and Qwen3 where hf.sh could install them,
// every string below must encode to the same ids in both, with
// add_special_tokens false (polysketch tokenizer encode) and true (with
// --special); for the SentencePiece kind, the ids must also decode to the
// same text. Run by hf.sh:
//
//	node hf.mjs POLYSKETCH TOKENIZER_DIR WORK_DIR [REAL_DIR...]
import { Tokenizer } from "@huggingface/tokenizers";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync, mkdirSync, readdirSync } from "node:fs";
import { join } from "node:path";

const [polysketch, trained, work, ...real] = process.argv.slice(2);

// Llama-3's and Qwen2's split patterns, as their tokenizer.json files
// have them.
const llama3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const qwen2 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function variant(base, pattern, extra) {
  const t = JSON.parse(JSON.stringify(base));
  t.pre_tokenizer = {
    type: "Sequence",
    pretokenizers: [
      { type: "Split", pattern: { Regex: pattern }, behavior: "Isolated", invert: false },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
    ],
  };
  let next = Math.max(...Object.values(t.model.vocab), ...t.added_tokens.map((a) => a.id)) + 1;
  for (const [content, special] of extra) {
    t.added_tokens.push({ id: next++, content, single_word: false, lstrip: false, rstrip: false, normalized: !special, special });
  }
  return t;
}

const base = JSON.parse(readFileSync(join(trained, "tokenizer.json"), "utf8"));
const llama = variant(base, llama3, [["<|begin_of_text|>", true], ["<|end_of_text|>", true], ["<|eot_id|>", true], ["<|start_header_id|>", true]]);
llama.model.ignore_merges = true;
const qwen = variant(base, qwen2, [["<|im_start|>", true], ["<|im_end|>", true], ["<tool_call>", false]]);
qwen.normalizer = { type: "NFC" };
qwen.model.merges = qwen.model.merges.map((m) => m.split(" ")); // the newer [a, b] form

// GPT-2's split as a Split regular expression, which polysketch matches
// with regexp2 (every match bounded by tokenizer.MatchTimeout), not with a
// scanner of its own; and two Splits in sequence, the second cutting the
// pieces of the first.
const gpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const regex = variant(base, gpt2, []);
const nested = variant(base, "\\p{N}+|\\P{N}+", []);
nested.pre_tokenizer.pretokenizers.splice(1, 0, { type: "Split", pattern: { Regex: gpt2 }, behavior: "Isolated", invert: false });

// The SentencePiece kind: piece.json as it is (a Prepend and Replace
// normalizer, Llama 2's layout), and with a Metaspace pre-tokenizer and
// decoder instead, prepending "▁" to the first section only (as newer
// conversions, Mistral's v0.3, write it).
const piece = JSON.parse(readFileSync("data/tokenizer/testdata/piece.json", "utf8"));
const meta = JSON.parse(JSON.stringify(piece));
meta.normalizer = null;
meta.pre_tokenizer = { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: false };
meta.decoder = { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: false };

// SmolLM2's kind: each digit apart (Digits), then GPT-2's split (ByteLevel
// with its regex), and ChatML's added tokens.
const smol = JSON.parse(JSON.stringify(base));
smol.pre_tokenizer = {
  type: "Sequence",
  pretokenizers: [
    { type: "Digits", individual_digits: true },
    { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
  ],
};
{
  let next = Math.max(...Object.values(smol.model.vocab), ...smol.added_tokens.map((a) => a.id)) + 1;
  for (const content of ["<|im_start|>", "<|im_end|>", "<repo_name>"]) {
    smol.added_tokens.push({ id: next++, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  }
}

const files = {
  trained: base, "llama3-style": llama, "qwen2-style": qwen, "gpt2-regex-split": regex, "nested-splits": nested,
  "smollm2-style": smol, "sentencepiece-kind": piece, "metaspace-kind": meta,
};
// Digits differ: the Rust library (and polysketch) isolate every
// character of Unicode's N, the JavaScript one ASCII digits only; strings
// with other numerals are left out for the files with Digits.
const asciiDigits = new Set(["smollm2-style"]);
const decodes = new Set(["sentencepiece-kind", "metaspace-kind", "llama2"]);
for (const dir of real) {
  const name = dir.split("/").filter((x) => x).at(-1);
  files[name] = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
}

// The strings: code, prose, Unicode, white space, special tokens, and
// random mixes of all of them. U+0085 and U+FEFF are left out: \s differs
// there between JavaScript and the Rust library (and polysketch), which
// follow Unicode's White_Space.
const fixed = [
  "", " ", "  ", "\n", "\n\n\n", "\t\t", " \n ", "a  b", "a   ", "   a", "x\r\ny", "end\n",
  "Hello world", "hello, World! HELLO?", "don't I'll we've they're she'd it's I'M YOU'LL 'S",
  "func main() {\n\tfmt.Println(\"héllo, 世界\")\n}\n",
  "for i := 0; i < len(xs); i++ {\n\t\tsum += xs[i] * 2\n\t}",
  "if err != nil {\n\treturn nil, fmt.Errorf(\"open %s: %w\", path, err)\n}",
  "def f(x):\n    return x**2  # square\n\n\nprint(f(3))",
  "<div class=\"a\">&nbsp;</div>", "SELECT * FROM t WHERE id = 42;",
  "1234567890 3.14159 1e-9 0x7fff 12,345,678", "٣٤٥ ௫ Ⅻ ½",
  "naïve café résumé Ångström", "e\u0301 cafe\u0301 A\u030a", "Ελληνικά Русский текст עברית العربية",
  "日本語のテキスト、中文文本。한국어", "emoji 😀👍🏽 👨‍👩‍👧 🇫🇷", "\u00a0non\u00a0breaking\u2003em\u3000ideographic",
  "<|endoftext|>", "a<|endoftext|>b", "<|endoftext|><|endoftext|>", " <|endoftext|> ", "<|endoftext|", "<<|endoftext|>>",
  "<|begin_of_text|>Hi<|eot_id|>", "<|im_start|>user\nhi<|im_end|>\n", "call <tool_call> now",
  "!!!??? ... --- ===", "del\x7f \x7fx .\x7f. \x7f٣", "x\r\n\r\n  y", "a \n\n b", ";\n\n", "12345678 123 1234", "a\u2028b\u2029c", "tabs\tand\vvertical\fform", "'''", "'s's's", "x's", "   'll",
];
let seed = 12345;
function rand(n) {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed % n;
}
const alphabet = [..."abcXYZ019 _-.,;:'\"()[]{}<>/\\|!?@#$%^&*+=~`", " ", " ", " ", "\t", "\n", "\r", "é", "ß", "ñ", "ü", "中", "文", "日",
  "😀", "🏽", "\u0301", "\u00a0", "\u3000", "ア", "ж", "Ω", "٣", "½", "'s", "'re", "<|endoftext|>", "<|eot_id|>", "<|im_end|>", "func", " the", "  \n"];
const random = [];
for (let i = 0; i < 200; i++) {
  let s = "";
  for (let n = rand(40); n > 0; n--) s += alphabet[rand(alphabet.length)];
  random.push(s);
}
// Lines of Go source, from the repository.
const source = [];
for (const f of readdirSync("data/tokenizer").filter((f) => f.endsWith(".go")).sort()) {
  const lines = readFileSync(join("data/tokenizer", f), "utf8").split("\n");
  for (let i = 0; i + 3 < lines.length && source.length < 150; i += 17) source.push(lines.slice(i, i + 3).join("\n"));
}
const strings = [...fixed, ...random, ...source];

let failed = 0;
const run = (args, input) => execFileSync(polysketch, args, { input, maxBuffer: 1 << 26 }).toString();
for (const [name, json] of Object.entries(files)) {
  const dir = join(work, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "tokenizer.json"), JSON.stringify(json));
  const hf = new Tokenizer(json, { clean_up_tokenization_spaces: false });
  // Each file's own added tokens, alone and in text, on top of the
  // strings.
  const added = json.added_tokens.slice(0, 40).flatMap((a) => [a.content, `x ${a.content}y`]);
  let bad = 0;
  let checks = 0;
  const differ = (what, s, got, want) => {
    checks++;
    if (JSON.stringify(got) === JSON.stringify(want)) return;
    if (bad < 5) console.log(`${name}: ${what} ${JSON.stringify(s)}: polysketch ${JSON.stringify(got)}, @huggingface/tokenizers ${JSON.stringify(want)}`);
    bad++;
  };
  // One polysketch process per check and per file would take minutes on
  // the real vocabularies: the strings go in one input, NUL-separated
  // (no string holds a NUL), each encoded alone by --nul.
  let all = [...strings, ...added];
  if (asciiDigits.has(name)) all = all.filter((s) => !/(?![0-9])\p{N}/u.test(s));
  for (const special of [false, true]) {
    const args = ["tokenizer", "encode", "--tokenizer", dir, "--nul"];
    if (special) args.push("--special");
    const got = run(args, all.join("\0")).trim().split("\n").map((l) => JSON.parse(l));
    all.forEach((s, i) => {
      const want = hf.encode(s, { add_special_tokens: special }).ids;
      differ(special ? "encode (special)" : "encode", s, got[i], want);
      if (!special && decodes.has(name) && want.length > 0) {
        const text = hf.decode(want, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
        differ("decode", s, run(["tokenizer", "decode", "--tokenizer", dir], JSON.stringify(want)), text);
      }
    });
  }
  console.log(`${name}: ${checks - bad} of ${checks} encodings and decodings of ${all.length} strings agree with @huggingface/tokenizers`);
  failed += bad;
}
process.exit(failed > 0 ? 1 : 0);
