// Vercel's AI SDK running a multi-step tool loop through deltaflow's gateway (driven by test_vercel_ai.py).
//
// Usage: node vercel_steps.mjs BASE_URL API_KEY MODEL PROVIDER WORK_FOLDER PROMPT SYSTEM [PROVIDER_OPTIONS_JSON]
//   PROVIDER: openai-chat (@ai-sdk/openai .chat, /v1/chat/completions), openai-responses (@ai-sdk/openai
//   .responses, /v1/responses) or anthropic (@ai-sdk/anthropic, /v1/messages); PROVIDER_OPTIONS_JSON is
//   streamText's providerOptions (e.g. {"openai": {"store": false}}), none when absent.
//
// streamText with two tools that have execute functions (list_files, read_file over WORK_FOLDER) and
// stopWhen: stepCountIs(5) (ai 6.x; maxSteps is gone). Prints one line to stdout:
//   "RESULT " + JSON of {steps, text, finishReason, ran, partTypes}
// steps: each step's tool calls (id, name, input), tool results (id, name, output), text, reasoning text,
// reasoning parts (text and providerMetadata: where @ai-sdk/anthropic keeps the signature, @ai-sdk/openai
// the Responses item id and encrypted_content), finishReason, the response id; ran: what the tools' execute
// functions were called with, in order. When the SDK raised: {error, steps (those that finished), ran}.
// Must sit next to the node_modules it imports (the test copies it into the install folder).

import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

import { jsonSchema, stepCountIs, streamText, tool } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { createAnthropic } from "@ai-sdk/anthropic";

globalThis.AI_SDK_LOG_WARNINGS = false;

const [base, apiKey, modelId, provider, work, prompt, system, options] = process.argv.slice(2);
const providerOptions = options ? JSON.parse(options) : undefined;

function model() {
  if (provider === "openai-chat") return createOpenAI({ baseURL: `${base}/v1`, apiKey }).chat(modelId);
  if (provider === "openai-responses") return createOpenAI({ baseURL: `${base}/v1`, apiKey }).responses(modelId);
  if (provider === "anthropic") return createAnthropic({ baseURL: `${base}/v1`, apiKey })(modelId);
  throw new Error(`unknown provider ${provider}`);
}

const ran = [];
const tools = {
  list_files: tool({
    description: "List the files of the working folder, one per line.",
    inputSchema: jsonSchema({ type: "object", properties: {}, additionalProperties: false }),
    execute: async (input) => {
      ran.push({ name: "list_files", input });
      return readdirSync(work).sort().join("\n");
    },
  }),
  read_file: tool({
    description: "Read a file of the working folder.",
    inputSchema: jsonSchema({
      type: "object",
      properties: { path: { type: "string", description: "the file's name in the working folder" } },
      required: ["path"],
      additionalProperties: false,
    }),
    execute: async (input) => {
      ran.push({ name: "read_file", input });
      return readFileSync(join(work, input.path), "utf8");
    },
  }),
};

function summary(s) {
  return {
    toolCalls: s.toolCalls.map((c) => ({ id: c.toolCallId, name: c.toolName, input: c.input })),
    toolResults: s.toolResults.map((r) => ({ id: r.toolCallId, name: r.toolName, output: r.output })),
    text: s.text,
    reasoningText: s.reasoningText ?? null,
    reasoning: s.reasoning.map((r) => ({ text: r.text, providerMetadata: r.providerMetadata ?? null })),
    finishReason: s.finishReason,
    rawFinishReason: s.rawFinishReason ?? null,
    responseId: s.response?.id ?? null,
    warnings: (s.warnings ?? []).map((w) => w.message ?? w.details ?? JSON.stringify(w)),
  };
}

const finished = [];

async function run() {
  const errors = [];
  const result = streamText({
    model: model(),
    system,
    prompt,
    tools,
    providerOptions,
    stopWhen: stepCountIs(5),
    maxRetries: 0,
    onStepFinish: (s) => finished.push(summary(s)),
    onError: ({ error }) => errors.push(String(error?.stack ?? error)),
  });
  const partTypes = [];
  for await (const part of result.fullStream) {
    partTypes.push(part.type);
    if (part.type === "error") errors.push(String(part.error?.stack ?? part.error));
  }
  if (errors.length) throw new Error(errors.join("\n"));
  return {
    steps: (await result.steps).map(summary),
    text: await result.text,
    finishReason: await result.finishReason,
    ran,
    partTypes: [...new Set(partTypes)],
  };
}

let out;
try {
  out = await run();
} catch (err) {
  out = { error: String(err?.stack ?? err), steps: finished, ran };
}
process.stdout.write("RESULT " + JSON.stringify(out) + "\n");
