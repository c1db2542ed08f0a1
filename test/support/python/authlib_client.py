"""An application that logs its users in with Authlib's OpenID Connect client.

Discovers the provider from its issuer URL, prints the authorization URL (a JSON line), reads the
URL the browser was sent back to from stdin, redeems the code, validates the ID token (signature
by the provider's JWKS, iss, aud, exp, nonce, at_hash), calls UserInfo, refreshes and validates
the new ID token; prints what it found as one JSON line.
"""
import json
import sys

import requests
from authlib.integrations.requests_client import OAuth2Session
from authlib.common.security import generate_token
from authlib.jose import JsonWebKey
from authlib.oidc.core import CodeIDToken
from authlib.jose import jwt


def validated_claims(id_token, jwks, issuer, client_id, nonce, access_token):
    claims = jwt.decode(
        id_token,
        jwks,
        claims_cls=CodeIDToken,
        claims_options={"iss": {"essential": True, "value": issuer}, "aud": {"essential": True, "value": client_id}},
        claims_params={"nonce": nonce, "client_id": client_id, "access_token": access_token},
    )
    claims.validate()
    return dict(claims)


def main():
    issuer, client_id, client_secret, redirect_uri = sys.argv[1:5]
    metadata = requests.get(issuer + "/.well-known/openid-configuration", timeout=10).json()
    jwks = JsonWebKey.import_key_set(requests.get(metadata["jwks_uri"], timeout=10).json())
    session = OAuth2Session(
        client_id,
        client_secret,
        scope="openid email",
        redirect_uri=redirect_uri,
        code_challenge_method="S256",
        token_endpoint_auth_method="client_secret_basic",
    )
    nonce = generate_token(20)
    verifier = generate_token(48)
    url, state = session.create_authorization_url(metadata["authorization_endpoint"], nonce=nonce, code_verifier=verifier)
    print(json.dumps({"authorization_url": url}), flush=True)

    callback = sys.stdin.readline().strip()
    token = session.fetch_token(metadata["token_endpoint"], authorization_response=callback, state=state, code_verifier=verifier)
    first = validated_claims(token["id_token"], jwks, issuer, client_id, nonce, token["access_token"])
    userinfo = session.get(metadata["userinfo_endpoint"], timeout=10).json()
    refreshed = session.refresh_token(metadata["token_endpoint"], refresh_token=token["refresh_token"])
    # A refreshed ID token has no nonce.
    second = validated_claims(refreshed["id_token"], jwks, issuer, client_id, None, refreshed["access_token"])
    print(json.dumps({"id_token_claims": first, "userinfo": userinfo, "refreshed_claims": second, "alg": token["id_token"].split(".")[0]}), flush=True)


if __name__ == "__main__":
    main()
