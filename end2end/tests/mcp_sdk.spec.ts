// MCP over /mcp with the official TypeScript SDK as the client (the SDK most MCP hosts are
// built on): it validates a tool's structured content against the tool's outputSchema, so
// a refusal must be `isError: true` with the error JSON as text and no structuredContent
// (CONTRACT §5). No browser here: the SDK's client against the served binary.
import { test, expect } from '@playwright/test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { origin, printedUrl } from './helpers';

const token = (): string => new URL(printedUrl()).searchParams.get('token')!;

async function connect(): Promise<Client> {
  const client = new Client({ name: 'mulligan-e2e', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(`${origin()}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token()}` } },
  });
  await client.connect(transport);
  return client;
}

/** A refusal as the contract shapes it: its `error.code`. */
function refusal(result: any): string {
  expect(result.isError).toBe(true);
  expect(result.structuredContent).toBeUndefined();
  const text = result.content.find((c: any) => c.type === 'text')?.text;
  const body = JSON.parse(text);
  expect(typeof body.error.message).toBe('string');
  return body.error.code;
}

test('the official TypeScript MCP client takes answers and refusals alike', async () => {
  const client = await connect();
  try {
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name);
    expect(names).toEqual(expect.arrayContaining(['list_sessions', 'send_message', 'retry_session']));

    const listed: any = await client.callTool({ name: 'list_sessions', arguments: {} });
    expect(listed.isError).toBeFalsy();
    expect(Array.isArray(listed.structuredContent.sessions)).toBe(true);

    const created = await fetch(`${origin()}/api/v1/sessions`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${token()}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ title: 'ts sdk', model: 'demo' }),
    });
    expect(created.status).toBe(201);
    const session = (await created.json()).id;

    // Nothing failed in a new session: refused, and the client does not throw.
    const retried = await client.callTool({ name: 'retry_session', arguments: { session } });
    expect(refusal(retried)).toBe('retry.nothing_failed');

    // A bad argument (empty content): refused the same way.
    const sent = await client.callTool({ name: 'send_message', arguments: { session, content: '  ' } });
    expect(refusal(sent)).toBe('invalid_request');
  } finally {
    await client.close();
  }
});
