// A multi-turn chat through the official OpenAI client for Node against
// two live `polysketch serve`s of the same checkpoint: one with the prefix
// cache, one started with --cache-memory 0. Every turn must get the same
// answer from both, and on the first the later turns must resume from the
// cache (its /metrics counters of hits and reused tokens grow). Run from
// a directory where the npm package openai is installed:
//
//	node multiturn.mjs http://127.0.0.1:8080 http://127.0.0.1:8081
//
// Exits non-zero with a message on the first failed check.
import OpenAI from "openai";

const [cached, cold] = process.argv.slice(2);

function check(ok, what) {
  if (!ok) {
    console.error("multi-turn chat test: FAIL:", what);
    process.exit(1);
  }
}

async function metric(base, name) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(name + " "));
  check(line !== undefined, `no metric ${name} at ${base}/metrics`);
  return Number(line.split(" ")[1]);
}

async function conversation(base) {
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "none", maxRetries: 0, timeout: 60_000 });
  const messages = [{
    role: "system",
    content: "You are a careful Go programmer. Answer with short, idiomatic Go code and one sentence of explanation, " +
      "and never use packages outside the standard library.",
  }];
  const answers = [], reused = [];
  for (const question of ["Write a function that reverses a string.", "Now make it handle runes.", "Add a test for it."]) {
    messages.push({ role: "user", content: question });
    const before = await metric(base, "polysketch_prefix_cache_reused_tokens_total");
    const r = await client.chat.completions.create({ model: "ci-model", messages, max_tokens: 24, seed: 11, temperature: 0.7 });
    const answer = r.choices[0].message.content;
    check(typeof answer === "string", `answer ${JSON.stringify(r)}`);
    reused.push((await metric(base, "polysketch_prefix_cache_reused_tokens_total")) - before);
    answers.push(answer);
    messages.push({ role: "assistant", content: answer });
    // Let the server read the answer into its cache, as the time a user
    // takes to read it and type would.
    await new Promise((done) => setTimeout(done, 300));
  }
  return { answers, reused, hits: await metric(base, "polysketch_prefix_cache_hits_total") };
}

const warm = await conversation(cached);
const reference = await conversation(cold);
for (let i = 0; i < warm.answers.length; i++) {
  check(warm.answers[i] === reference.answers[i],
    `turn ${i + 1}: ${JSON.stringify(warm.answers[i])} with the cache, ${JSON.stringify(reference.answers[i])} from the server without`);
}
check(warm.hits >= 2 && warm.reused[1] > 0 && warm.reused[2] > warm.reused[1],
  `the later turns did not resume from the cache: hits ${warm.hits}, tokens reused per turn ${warm.reused}`);
check(reference.hits === 0, `the server without a cache counted ${reference.hits} hits`);
console.log(`multi-turn chat test: ok (3 turns equal with and without the cache; tokens reused per turn ${warm.reused})`);
