// The three-cube assistant through the official JavaScript clients
// (ollama-js, openai-node) against a memosrt serve at process.argv[2]:
// alice's chat through ollama-js, bob's through openai-node, both naming
// the shared cubes shop and assistant-x. Prints one JSON object that
// server/node_test.go checks.
import { Ollama } from 'ollama';
import OpenAI from 'openai';

const base = process.argv[2];
const model = 'stories260K';
const question = 'Where can I get some tea';
const messages = [{ role: 'user', content: question }];
const ollama = new Ollama({ host: base });

const render = await ollama.chat({ model, messages, stream: false, _debug_render_only: true,
  options: { cubes: ['alice', 'shop', 'assistant-x'] } });
const alice = await ollama.chat({ model, messages, stream: false,
  options: { cubes: ['alice', 'shop', 'assistant-x'], temperature: 0, num_predict: 8 } });

// alice's turn stores the shared cubes' prefix in the background
let shared = null;
for (let i = 0; i < 200 && !shared; i++) {
  const { packs } = await (await fetch(base + '/v1/packs')).json();
  shared = packs.find((p) => p.label === 'shared:shop+assistant-x') ?? null;
  if (!shared) await new Promise((r) => setTimeout(r, 50));
}

const openai = new OpenAI({ baseURL: base + '/v1', apiKey: 'unused' });
const bob = await openai.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0,
  metadata: { cubes: 'bob,shop,assistant-x' } });

console.log(JSON.stringify({
  rendered: render._debug_info?.rendered_template ?? null,
  alice: { cube_memories: alice.cube_memories ?? null, cached: alice.prompt_cached_count ?? null, done: alice.done },
  shared_pack_tokens: shared ? shared.n_tokens : null,
  bob: { cube_memories: bob.usage?.cube_memories ?? null, cached: bob.usage?.prompt_tokens_details?.cached_tokens ?? null,
    content: bob.choices[0].message.content },
}));
