// Real JavaScript clients against a running deltaflow server (driven by test_node_clients.py).
//
// Usage: node clients.mjs BASE_URL TOOL_MODEL LENGTH_MODEL
// Runs every scenario one after the other and prints one line to stdout:
// "RESULTS " + JSON of {scenario: {...what the client produced...} or {error: "..."}}.
// Must sit next to the node_modules it imports (the test copies it into the install folder).

import OpenAI from "openai";
import { jsonSchema, streamText, tool } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { createAnthropic } from "@ai-sdk/anthropic";

globalThis.AI_SDK_LOG_WARNINGS = false;

const [base, toolModel, lengthModel] = process.argv.slice(2);
const API_KEY = "not-checked";
const PROMPT = "What is the weather in Paris?";
const WEATHER_SCHEMA = {
  type: "object",
  properties: { city: { type: "string" } },
  required: ["city"],
  additionalProperties: false,
};

// -- the official openai SDK ------------------------------------------------------
const oai = new OpenAI({ baseURL: `${base}/v1`, apiKey: API_KEY, maxRetries: 0, timeout: 20000 });

async function openaiChat(model) {
  const stream = await oai.chat.completions.create({
    model,
    messages: [{ role: "user", content: PROMPT }],
    tools: [{ type: "function", function: { name: "get_weather", parameters: WEATHER_SCHEMA } }],
    stream: true,
  });
  let content = "";
  let reasoning = "";
  let finishReason = null;
  const calls = [];
  for await (const chunk of stream) {
    for (const choice of chunk.choices ?? []) {
      const delta = choice.delta ?? {};
      content += delta.content ?? "";
      reasoning += delta.reasoning_content ?? ""; // not typed by the SDK: read off the raw chunk
      for (const tc of delta.tool_calls ?? []) {
        const call = (calls[tc.index] ??= { id: null, name: "", arguments: "" });
        if (tc.id) call.id = tc.id;
        if (tc.function?.name) call.name += tc.function.name;
        call.arguments += tc.function?.arguments ?? "";
      }
      if (choice.finish_reason) finishReason = choice.finish_reason;
    }
  }
  return {
    content,
    reasoning,
    finishReason,
    toolCalls: calls.map((c) => ({ id: c.id, name: c.name, input: JSON.parse(c.arguments) })),
  };
}

async function openaiResponses(model) {
  const stream = oai.responses.stream({
    model,
    input: PROMPT,
    tools: [{ type: "function", name: "get_weather", parameters: WEATHER_SCHEMA, strict: false }],
  });
  const events = [];
  for await (const event of stream) events.push(event.type);
  const final = await stream.finalResponse();
  const reasoning = final.output
    .filter((item) => item.type === "reasoning")
    .flatMap((item) => item.content ?? [])
    .map((part) => part.text)
    .join("");
  const toolCalls = final.output
    .filter((item) => item.type === "function_call")
    .map((item) => ({ id: item.call_id, name: item.name, input: JSON.parse(item.arguments) }));
  return {
    status: final.status,
    incompleteDetails: final.incomplete_details ?? null,
    content: final.output_text,
    reasoning,
    toolCalls,
    lastEvent: events.at(-1) ?? null,
  };
}

// -- Vercel's ai SDK ------------------------------------------------------------------
const weatherTool = tool({
  description: "The current weather in a city.",
  inputSchema: jsonSchema(WEATHER_SCHEMA),
  // no execute: streamText returns the call instead of running it
});

async function aiStream(model, providerOptions = undefined) {
  const errors = [];
  const result = streamText({
    model,
    providerOptions,
    prompt: PROMPT,
    tools: { get_weather: weatherTool },
    maxRetries: 0,
    onError: ({ error }) => errors.push(String(error?.stack ?? error)),
  });
  let text = "";
  let reasoningText = "";
  const signatures = [];
  const parts = [];
  for await (const part of result.fullStream) {
    parts.push(part.type);
    if (part.type === "text-delta") text += part.text;
    else if (part.type === "reasoning-delta") reasoningText += part.text;
    else if (part.type === "error") errors.push(String(part.error?.stack ?? part.error));
    const sig = part.providerMetadata?.anthropic?.signature;
    if ((part.type === "reasoning-delta" || part.type === "reasoning-end") && sig !== undefined) signatures.push(sig);
  }
  if (errors.length) throw new Error(errors.join("\n"));
  const reasoning = await result.reasoning;
  return {
    text,
    reasoningText,
    finishReason: await result.finishReason,
    rawFinishReason: (await result.rawFinishReason) ?? null,
    toolCalls: (await result.toolCalls).map((c) => ({ id: c.toolCallId, name: c.toolName, input: c.input })),
    // the final reasoning parts, as @ai-sdk/anthropic leaves them (signature in providerMetadata.anthropic)
    reasoningParts: reasoning.map((r) => ({ text: r.text, providerMetadata: r.providerMetadata ?? null })),
    streamSignatures: signatures,
    parts: [...new Set(parts)],
  };
}

const openaiProvider = createOpenAI({ baseURL: `${base}/v1`, apiKey: API_KEY });
const compatible = createOpenAICompatible({ name: "deltaflow", baseURL: `${base}/v1`, apiKey: API_KEY });
const anthropic = createAnthropic({ baseURL: `${base}/v1`, apiKey: API_KEY });

const scenarios = {
  openai_chat: () => openaiChat(toolModel),
  openai_chat_length: () => openaiChat(lengthModel),
  openai_responses: () => openaiResponses(toolModel),
  openai_responses_length: () => openaiResponses(lengthModel),
  ai_openai_chat: () => aiStream(openaiProvider.chat(toolModel)),
  ai_openai_chat_length: () => aiStream(openaiProvider.chat(lengthModel)),
  ai_openai_compatible_chat: () => aiStream(compatible.chatModel(toolModel)),
  ai_openai_compatible_chat_length: () => aiStream(compatible.chatModel(lengthModel)),
  ai_openai_responses: () => aiStream(openaiProvider.responses(toolModel)),
  ai_openai_responses_length: () => aiStream(openaiProvider.responses(lengthModel)),
  // @ai-sdk/openai's Responses model reads reasoning only from summary parts, which the server sends
  // (the raw reasoning) when the request asks for a reasoning summary; a model id it does not know as a
  // reasoning model needs forceReasoning, or the summary option is dropped.
  ai_openai_responses_summary: () =>
    aiStream(openaiProvider.responses(toolModel), { openai: { reasoningSummary: "auto", forceReasoning: true } }),
  ai_anthropic: () => aiStream(anthropic(toolModel)),
  ai_anthropic_length: () => aiStream(anthropic(lengthModel)),
};

const results = {};
for (const [name, run] of Object.entries(scenarios)) {
  try {
    results[name] = await run();
  } catch (err) {
    results[name] = { error: String(err?.stack ?? err) };
  }
}
process.stdout.write("RESULTS " + JSON.stringify(results) + "\n");
