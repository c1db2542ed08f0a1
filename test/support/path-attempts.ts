/**
 * Path confusion attempts, shared by every test that sends them through something: the gateway
 * (test/gateway-paths.test.ts) and the ingresses in front of the decision listener. Routes of
 * the ticketing layout, with a nested route that needs one more scope.
 */

export const PATH_ROUTES = {
  me: { path: '/api/public/me', methods: ['GET', 'HEAD'], token: 'user', scopes: ['public'] },
  tickets: { path: '/api/public/tickets', token: 'user', scopes: ['public'] },
  events: { path: '/api/public/events', token: 'application', scopes: ['public'] },
  eventsAdmin: { path: '/api/public/events/admin', token: 'application', scopes: ['public', 'admin'] },
} as const;
export type PathRouteName = keyof typeof PATH_ROUTES;

export type PathOutcome = { refused: number } | { reaches: PathRouteName; as: string };

/** [request target as sent, token kind, outcome]: refused with a status and forwarded nowhere, or forwarded to exactly one route's upstream as exactly that path. */
export const PATH_ATTEMPTS: ReadonlyArray<readonly [string, 'user' | 'application', PathOutcome]> = [
  // dot segments, raw and encoded, to step from a user route into the organizer route
  ['/api/public/me/../events', 'user', { refused: 400 }],
  ['/api/public/me/./', 'user', { refused: 400 }],
  ['/api/public/me/.', 'user', { refused: 400 }],
  ['/api/public/me/..', 'user', { refused: 400 }],
  ['/api/public/me/%2e%2e/events', 'user', { refused: 400 }],
  ['/api/public/me/%2E%2e/events', 'user', { refused: 400 }],
  ['/api/public/me/.%2e/events', 'user', { refused: 400 }],
  ['/api/public/me/%2e./events', 'user', { refused: 400 }],
  ['/api/public/me/%2e', 'user', { refused: 400 }],
  ['/api/public/tickets/../../../../etc/passwd', 'user', { refused: 400 }],
  // servlet-style path parameters on dot segments
  ['/api/public/me/..;/events', 'user', { refused: 400 }],
  ['/api/public/me/.;x=1/events', 'user', { refused: 400 }],
  ['/api/public/me/%2e%2e%3b/events', 'user', { refused: 400 }],
  // encoded slashes and backslashes, raw backslashes
  ['/api/public/me/..%2fevents', 'user', { refused: 400 }],
  ['/api/public/events/..%2fme', 'user', { refused: 400 }],
  ['/api/public/me%2f..%2fevents', 'user', { refused: 400 }],
  ['/api/public/me/..%5cevents', 'user', { refused: 400 }],
  ['/api/public/me/..%5Cevents', 'user', { refused: 400 }],
  ['/api/public/me\\..\\events', 'user', { refused: 400 }],
  ['/api/public/me/..\\events', 'user', { refused: 400 }],
  // double encoding
  ['/api/public/me/%252e%252e/events', 'user', { refused: 400 }],
  ['/api/public/me/%252fevents', 'user', { refused: 400 }],
  ['/api/public/me/%255cevents', 'user', { refused: 400 }],
  // empty segments
  ['//api/public/events', 'application', { refused: 400 }],
  ['/api/public//events', 'application', { refused: 400 }],
  ['/api/public/me//../events', 'user', { refused: 400 }],
  ['/api/public/events//admin', 'application', { refused: 400 }],
  ['/api/public/events/./admin', 'application', { refused: 400 }],
  // overlong UTF-8, NUL, broken escapes, characters that must be encoded
  ['/api/public/me/%c0%ae%c0%ae/events', 'user', { refused: 400 }],
  ['/api/public/me/%e0%80%ae', 'user', { refused: 400 }],
  ['/api/public/me/%00', 'user', { refused: 400 }],
  ['/api/public/me%00/../events', 'user', { refused: 400 }],
  ['/api/public/me/%0a', 'user', { refused: 400 }],
  ['/api/public/me/%', 'user', { refused: 400 }],
  ['/api/public/me/%zz', 'user', { refused: 400 }],
  ['/api/public/me/a"b', 'user', { refused: 400 }],
  ['/api/public/me/{x}', 'user', { refused: 400 }],
  ['/api/public/me#/../events', 'user', { refused: 400 }],
  // request targets that are not an absolute path
  ['http://evil.example/api/public/me', 'user', { refused: 400 }],
  ['*', 'user', { refused: 400 }],
  ['api/public/me', 'user', { refused: 400 }],
  // case: routes match case-sensitively, so a case variant matches no route
  ['/API/public/events', 'application', { refused: 404 }],
  ['/api/PUBLIC/me', 'user', { refused: 404 }],
  ['/Api/Public/Me', 'user', { refused: 404 }],
  // segment-aware prefixes
  ['/api/public/meow', 'user', { refused: 404 }],
  ['/api/public/me;x=1', 'user', { refused: 404 }],
  ['/api/public/me.json', 'user', { refused: 404 }],
  ['/api/public/eventsadmin', 'application', { refused: 404 }],
  // lookalikes of the nested /api/public/events/admin route, which needs the admin scope
  ['/api/public/events/ADMIN', 'application', { refused: 400 }],
  ['/api/public/events/Admin/keys', 'application', { refused: 400 }],
  ['/api/public/events/admin;jsessionid=1', 'application', { refused: 400 }],
  ['/api/public/events/admin%3Bx', 'application', { refused: 400 }],
  ['/api/public/events/admin.json', 'application', { refused: 400 }],
  ['/api/public/events/%61dmin', 'application', { refused: 403 }],
  ['/api/public/events/admin/', 'application', { refused: 403 }],
  ['/api/public/events/admin/keys', 'application', { refused: 403 }],
  // a segment that merely starts or ends with two dots: Windows servers drop trailing dots, naive traversal checks trip on both
  ['/api/public/me/..hidden', 'user', { refused: 400 }],
  ['/api/public/me/x../y', 'user', { refused: 400 }],
  // what is forwarded, and exactly as what
  ['/api/public/me', 'user', { reaches: 'me', as: '/api/public/me' }],
  ['/api/public/me/', 'user', { reaches: 'me', as: '/api/public/me/' }],
  ['/api/public/me/%7Euser', 'user', { reaches: 'me', as: '/api/public/me/~user' }],
  ['/api/public/me/%41%2d%5f', 'user', { reaches: 'me', as: '/api/public/me/A-_' }],
  ['/api/public/me/caf%c3%a9', 'user', { reaches: 'me', as: '/api/public/me/caf%C3%A9' }],
  ['/api/public/me/a%3bb', 'user', { reaches: 'me', as: '/api/public/me/a%3Bb' }],
  ['/api/public/me/100%25', 'user', { reaches: 'me', as: '/api/public/me/100%25' }],
  ['/api/public/me/.well-known', 'user', { reaches: 'me', as: '/api/public/me/.well-known' }],
  ['/api/public/me/x;v=1', 'user', { reaches: 'me', as: '/api/public/me/x;v=1' }],
  ['/api/public/me?next=/../events', 'user', { reaches: 'me', as: '/api/public/me?next=/../events' }],
  ['/api/public/tickets/7/seats', 'user', { reaches: 'tickets', as: '/api/public/tickets/7/seats' }],
  ['/api/public/events/administrators', 'application', { reaches: 'events', as: '/api/public/events/administrators' }],
  ['/api/public/events/%7e', 'application', { reaches: 'events', as: '/api/public/events/~' }],
];
