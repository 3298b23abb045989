// Renders every conversation of cases.json with every chat template it
// names, using @huggingface/jinja (the Jinja of transformers.js), with
// add_generation_prompt true as polysketch serve renders, and prints the
// results as JSON: expected.json, against which serve's tests check
// polysketch's rendering. Run by chat.sh, which compares its output with
// the committed expected.json:
//
//	node chat.mjs CASES_DIR > expected.json
import { Template } from "@huggingface/jinja";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const dir = process.argv[2];
const cases = JSON.parse(readFileSync(join(dir, "cases.json"), "utf8"));
const out = {};
for (const [name, t] of Object.entries(cases.templates)) {
  const template = new Template(readFileSync(join(dir, t.file), "utf8"));
  out[name] = {};
  for (const [conv, messages] of Object.entries(cases.conversations)) {
    out[name][conv] = template.render({ ...t.vars, messages, add_generation_prompt: true });
  }
}
process.stdout.write(JSON.stringify(out, null, 1) + "\n");
