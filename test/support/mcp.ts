import { createServer, type Server } from 'node:http';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';

/** A stateless MCP server (a fresh server and transport per request) with one tool that reports who the gateway says is calling. */
export async function startTicketsMcpServer(): Promise<{ server: Server; url: string }> {
  const server = createServer((request, response) => {
    const mcp = new McpServer({ name: 'ticketing', version: '1.0.0' });
    mcp.registerTool('my-tickets', { description: "The caller's tickets" }, async (extra) => ({
      content: [{ type: 'text', text: `tickets of ${String(extra.requestInfo?.headers['x-auth-user-id'])}` }],
    }));
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    response.on('close', () => void transport.close().then(() => mcp.close()));
    void mcp.connect(transport).then(() => transport.handleRequest(request, response));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as { port: number }).port}` };
}
