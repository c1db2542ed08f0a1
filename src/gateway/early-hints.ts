import type { IncomingMessage, ServerResponse } from 'node:http';

/**
 * Relays an upstream's 103 Early Hints to the client, as nginx and Envoy do, so a browser can
 * start fetching what the final answer will need. Only its `Link` headers go: they are what early
 * hints are for, and any other header of an interim answer would bypass the response header rules.
 * Not to an HTTP/1.0 client, which must not get an interim answer (RFC 9110, section 15.2).
 * Other 1xx from an upstream are dropped: 102 is obsolete, and a 100 (never asked for: the
 * gateway answers `Expect: 100-continue` itself) is taken out before undici reads it
 * (src/gateway/interim-answers.ts).
 */
export function relayEarlyHints(request: IncomingMessage, response: ServerResponse, rawHeaders: Buffer[]): void {
  if (request.httpVersionMajor !== 1 || request.httpVersionMinor < 1 || response.headersSent) return;
  const links: string[] = [];
  for (let index = 0; index < rawHeaders.length; index += 2) {
    const name = rawHeaders[index]!;
    // One header may list several links; node takes them one by one.
    if (name.length === 4 && name.toString('latin1').toLowerCase() === 'link') links.push(...rawHeaders[index + 1]!.toString('latin1').split(/,\s*(?=<)/));
  }
  if (links.length === 0) return;
  try {
    response.writeEarlyHints({ link: links });
  } catch {
    // A Link value node refuses to write (not of the form `<uri>; param`) is dropped, hints with it.
  }
}
