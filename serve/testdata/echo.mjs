// Prompt log-probabilities through the official OpenAI client for Node,
// against what `polysketch eval --choices` computed for the same
// checkpoint: for each question in its --log-samples file, an echo
// request of every choice's text (max_tokens 0) whose token_logprobs,
// summed over the choice's tokens, must equal eval's log-likelihood of
// the choice within float32 rounding; and lm-evaluation-harness's own
// request (token ids, max_tokens 1, its [ctxlen:-1] slice) for one
// question. Run from a directory where the npm package openai is
// installed:
//
//	node echo.mjs http://127.0.0.1:8080/v1 samples.jsonl
//
// Exits non-zero with a message on the first failed check.
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const [baseURL, samplesFile] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0, timeout: 60_000 });
const root = baseURL.replace(/\/v1\/?$/, "");

function check(ok, what) {
  if (!ok) {
    console.error("echo test: FAIL:", what);
    process.exit(1);
  }
}

// The context's tokens, as the harness counts them: whitespace that ends
// the context belongs to the continuation.
async function tokens(text) {
  const r = await fetch(root + "/tokenize", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt: text }),
  });
  check(r.status === 200, `/tokenize: ${r.status}`);
  return (await r.json()).tokens;
}

const samples = readFileSync(samplesFile, "utf8").split("\n").filter((l) => l !== "").map((l) => JSON.parse(l));
check(samples.length > 0, "no samples");
let choices = 0;
for (const s of samples) {
  const context = s.prompt.trimEnd();
  const space = s.prompt.slice(context.length);
  const ctxlen = (await tokens(context)).length;
  const resp = await client.completions.create({
    model: "ci-model",
    prompt: s.continuations.map((c) => context + space + c),
    max_tokens: 0,
    echo: true,
    logprobs: 1,
  });
  check(resp.choices.length === s.continuations.length, `${resp.choices.length} choices for ${s.continuations.length}`);
  for (const ch of resp.choices) {
    const lp = ch.logprobs;
    check(lp.token_logprobs[0] === null && lp.top_logprobs[0] === null, `first entry ${lp.token_logprobs[0]}`);
    check(ch.text === context + space + s.continuations[ch.index], `echoed text ${JSON.stringify(ch.text)}`);
    const got = lp.token_logprobs.slice(ctxlen).reduce((a, b) => a + b, 0);
    const want = s.loglik[ch.index];
    const n = lp.token_logprobs.length - ctxlen;
    check(n === s.tokens[ch.index], `line ${s.line}, choice ${ch.index}: ${n} tokens, eval scored ${s.tokens[ch.index]}`);
    check(Math.abs(got - want) <= 1e-4 * n + 1e-5, `line ${s.line}, choice ${ch.index}: echo's log-likelihood ${got}, eval's ${want}`);
    choices++;
  }
}

// lm-evaluation-harness's local-completions request for the first question.
const s = samples[0];
const ctx = await tokens(s.prompt.trimEnd());
const prompts = [];
for (const c of s.continuations) prompts.push(await tokens(s.prompt + c));
const resp = await client.completions.create({
  model: "ci-model", prompt: prompts, temperature: 0, max_tokens: 1, logprobs: 1, seed: 1234, echo: true,
});
for (const ch of [...resp.choices].sort((a, b) => a.index - b.index)) {
  const lp = ch.logprobs.token_logprobs;
  check(lp.length === prompts[ch.index].length + 1, `harness request: ${lp.length} entries for ${prompts[ch.index].length} tokens and 1 generated`);
  const got = lp.slice(ctx.length, -1).reduce((a, b) => a + b, 0);
  check(Math.abs(got - s.loglik[ch.index]) <= 1e-4 * s.tokens[ch.index] + 1e-5,
    `harness request, choice ${ch.index}: ${got}, eval's ${s.loglik[ch.index]}`);
}
console.log(`echo logprobs: ${choices} choices of ${samples.length} questions equal eval --choices's log-likelihoods`);
