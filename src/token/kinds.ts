/**
 * A user token was issued through the authorization_code grant (or refreshed from one) and acts
 * for a user; an application token was issued through client_credentials and acts for the
 * application alone.
 */
export const TOKEN_KINDS = ['user', 'application'] as const;
export type TokenKind = (typeof TOKEN_KINDS)[number];
