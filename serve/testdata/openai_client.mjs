// The official OpenAI client for Node against a live `polysketch serve`:
// models list, completions streamed and not, chat streamed and not, an
// error raised as an APIError, logit_bias and the penalties, and /tokenize
// and /detokenize with fetch. Run from a directory where the npm
// package openai is installed:
//
//	node openai_client.mjs http://127.0.0.1:8080/v1 [api-key]
//
// Exits non-zero with a message on the first failed check.
import OpenAI from "openai";

const [baseURL, apiKey = "none"] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });

function check(ok, what) {
  if (!ok) {
    console.error("openai client test: FAIL:", what);
    process.exit(1);
  }
}

const models = await client.models.list();
const ids = [];
for await (const m of models) ids.push(m.id);
check(ids.length === 1, `models.list: ${JSON.stringify(ids)}`);
const model = ids[0];

const req = { model, prompt: "func main() {\n", max_tokens: 24, seed: 7, temperature: 0.8 };
const whole = await client.completions.create(req);
check(whole.object === "text_completion" && whole.choices.length === 1, `completion: ${JSON.stringify(whole)}`);
check(whole.choices[0].finish_reason === "length", `finish_reason ${whole.choices[0].finish_reason}`);
check(whole.usage.completion_tokens === 24, `usage ${JSON.stringify(whole.usage)}`);

const withLogprobs = await client.completions.create({ ...req, logprobs: 2 });
const lp = withLogprobs.choices[0].logprobs;
check(lp && lp.tokens.length === 24 && lp.token_logprobs.length === 24 && lp.top_logprobs.length === 24 &&
  lp.token_logprobs.every((x) => x <= 0), `logprobs: ${JSON.stringify(lp)}`);
check(withLogprobs.choices[0].text === whole.choices[0].text, "logprobs changed the text of a seeded request");

const stream = await client.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
let text = "", finish = null, usage = null, chunks = 0;
for await (const chunk of stream) {
  chunks++;
  for (const c of chunk.choices) {
    text += c.text;
    if (c.finish_reason) finish = c.finish_reason;
  }
  if (chunk.usage) usage = chunk.usage;
}
check(chunks > 2, `only ${chunks} chunks streamed`);
check(text === whole.choices[0].text, `streamed ${JSON.stringify(text)}, whole ${JSON.stringify(whole.choices[0].text)}`);
check(finish === "length" && usage && usage.total_tokens === whole.usage.total_tokens, `stream end: ${finish} ${JSON.stringify(usage)}`);

const chatReq = { model, messages: [{ role: "user", content: "Write a Go function." }], max_tokens: 16, seed: 3 };
const chat = await client.chat.completions.create(chatReq);
check(chat.choices[0].message.role === "assistant" && typeof chat.choices[0].message.content === "string", `chat: ${JSON.stringify(chat)}`);
let chatText = "";
for await (const chunk of await client.chat.completions.create({ ...chatReq, stream: true })) {
  for (const c of chunk.choices) chatText += c.delta.content ?? "";
}
check(chatText === chat.choices[0].message.content, `chat streamed ${JSON.stringify(chatText)}, whole ${JSON.stringify(chat.choices[0].message.content)}`);

try {
  await client.completions.create({ ...req, top_p: 3 });
  check(false, "top_p 3 was accepted");
} catch (e) {
  check(e instanceof OpenAI.APIError && e.status === 400 && /top_p/.test(e.message), `top_p 3: ${e}`);
}

// logit_bias, presence_penalty and frequency_penalty as the client sends
// them: a bias of -100 bans every byte but x, y and z, in completions and
// chat; penalties change a greedy text; best_of is refused naming it.
const bans = {};
for (let b = 0; b < 256; b++) if (!"xyz".includes(String.fromCharCode(b))) bans[String(b)] = -100;
const biased = await client.completions.create({ ...req, temperature: 1.5, logit_bias: bans });
check(/^[xyz]{24}$/.test(biased.choices[0].text), `logit_bias banning all but x, y, z: ${JSON.stringify(biased.choices[0].text)}`);
const biasedChat = await client.chat.completions.create({ ...chatReq, logit_bias: { "113": 100 } });
check(biasedChat.choices[0].message.content === "q".repeat(16), `chat with a bias of 100 on q: ${JSON.stringify(biasedChat.choices[0].message.content)}`);
const greedy = { ...req, temperature: 0, logit_bias: bans };
const plain = (await client.completions.create(greedy)).choices[0].text;
const penalized = (await client.completions.create({ ...greedy, presence_penalty: 1.5, frequency_penalty: 0.5 })).choices[0].text;
check(penalized !== plain && /^[xyz]{24}$/.test(penalized), `penalties left the greedy text ${JSON.stringify(plain)} as ${JSON.stringify(penalized)}`);
try {
  await client.completions.create({ ...req, best_of: 3 });
  check(false, "best_of 3 was accepted");
} catch (e) {
  check(e instanceof OpenAI.APIError && e.status === 400 && e.param === "best_of", `best_of 3: ${e}`);
}

// POST /tokenize and /detokenize (llama.cpp's form), beside the OpenAI
// API: the count of a prompt's tokens is the usage the server reports.
const root = baseURL.replace(/\/v1\/?$/, "");
async function post(path, body) {
  const r = await fetch(root + path, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${apiKey}` },
    body: JSON.stringify(body),
  });
  return [r.status, await r.json()];
}
const [tokStatus, tok] = await post("/tokenize", { content: req.prompt, with_pieces: true });
check(tokStatus === 200 && Array.isArray(tok.tokens) && tok.tokens.length === whole.usage.prompt_tokens,
  `tokenize: ${tokStatus} ${JSON.stringify(tok)}, usage ${JSON.stringify(whole.usage)}`);
const [detokStatus, detok] = await post("/detokenize", { tokens: tok.tokens.map((t) => t.id) });
check(detokStatus === 200 && detok.content === req.prompt, `detokenize: ${detokStatus} ${JSON.stringify(detok)}`);
const [badStatus, bad] = await post("/detokenize", { tokens: [1e9] });
check(badStatus === 400 && /outside the vocabulary/.test(bad.error?.message), `detokenize 1e9: ${badStatus} ${JSON.stringify(bad)}`);

console.log(`openai client test: ok (openai for Node, model ${model}: ${JSON.stringify(text)})`);
